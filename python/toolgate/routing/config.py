"""Router settings, and the defaults chosen on the dev sets."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import Literal

from toolgate.errors import InvalidInputError

__all__ = ["DEFAULT", "MAX_COUNT", "DefaultType", "RouterConfig", "check_count"]


class DefaultType(enum.Enum):
    """The type of :data:`DEFAULT`."""

    TOKEN = 0


DEFAULT = DefaultType.TOKEN
"""Stands for "the router's configured value" where ``None`` means "none at all"."""


@dataclass(frozen=True)
class RouterConfig:
    """Routing defaults. The values were chosen on the dev sets; see the README's results.

    ``alpha`` weighs the dense (embedding) signal against BM25 in the fused score that ranks
    tools, and ``fusion`` / ``fusion_top`` say how each signal is normalised first (see
    ``toolgate._toolgate.fuse``): min-max over each signal's best 100 rows beat reciprocal-rank
    fusion and max-division on both dev sets. nDCG@10 (BFCL / MetaTool single-tool) at alpha
    0.6: 0.831 / 0.704, 0.65: 0.830 / 0.712, 0.7: 0.827 / 0.718 with the earlier
    plural-only BM25. With Snowball stemming and the BM25 settings below, 0.6: 0.838 / 0.717,
    0.65: 0.837 / 0.722, 0.7: 0.834 / 0.725; 0.65 and 0.7 tie on the sum, and 0.65 is
    better on MetaTool multi-tool (0.682 against 0.671), so it is the default. The faster int8
    model (``onnx_export.INT8_KEEP_FP32``) then gave 0.836 / 0.722 (multi-tool 0.685).
    ``bm25_k1``, ``bm25_b`` and ``bm25_weights`` (name, description, parameter text, server)
    were swept over name 1.5-3, parameters 0.25-1, k1 0.9-1.6 and b 0.6-0.9 with Snowball
    stemming: parameter text weighed as much as the description and k1 = 0.9 gave BFCL
    0.831 -> 0.834 and MetaTool 0.7246 -> 0.7251 over (2, 1, 0.5, 0.5) and k1 = 1.2 (full
    sets, ``toolgate eval``, alpha 0.7); the best points of the grid were within 0.0015 of
    each other.
    ``threshold`` is the minimum cosine similarity of a ranked tool to the query, the Tool
    Attention paper's ISO threshold (tools named in the query, selected or pinned are exempt;
    ``toolgate calibrate`` fits it). It is off by default: on BFCL a floor of 0.3 routes
    nothing for only 15% of the irrelevant queries while recall@10 drops 0.927 -> 0.918, and
    0.5 rejects 56% but drops recall@10 to 0.706 (``make bench-report``), so MiniLM cosines
    alone do not separate "fits" from "does not fit" well enough for one default.
    ``history_decay`` is the weight of each earlier turn relative to the next one.
    ``clause_weight`` is how much of each tool's best cosine against the clauses of a
    multi-intent query (see :mod:`toolgate.embedding.clauses`) is added to its whole-query cosine
    before
    fusion (for the 200 tools nearest the whole query; the others get ``1 + clause_weight``
    times their cosine); 0 turns clause vectors off. Full dev sets, nDCG@10 / complete@10
    replayed from dumped scores at 0, 0.5 and 1: MetaTool multi-tool 0.685 / 0.674,
    0.702 / 0.710, 0.708 / 0.716; BFCL 0.836 / 0.912, 0.837 / 0.912, 0.835 / 0.914; MetaTool
    single-tool 0.722 at all three. Single-intent queries are untouched, so 1 is the default;
    with it, ``toolgate eval`` gives multi-tool 0.707 / 0.716, BFCL 0.836 / 0.914, single-tool
    0.722.
    ``near_copy_cosine``: a ranked tool with the same name as a tool placed above it, and
    whose row has at least this cosine with that tool's (0.95 is also
    ``Router.near_duplicates``'s default), is a near copy of it: it is moved below the
    different tools that score at least half its fused score, so the top k show more
    different tools (the core ranks the best 2k for it; ``None`` turns it off). BFCL's merged
    catalog repeats functions across its categories: nDCG@10 0.8479 -> 0.8515 and
    complete@10 0.9224 -> 0.9288 (``toolgate eval``, full set); MetaTool, which has no copies,
    is unchanged (0.722 / 0.707). Without the name rule, tools of one family with long shared
    parameter lists count as copies: on the Table 2 testbed (``create_issue`` ...
    ``search_issue`` at 0.95) complete fell 0.80 -> 0.75; with it, 0.80. Moving copies below
    every different tool, not only those scoring half as well, put a strong copy under tools
    that barely fit. The core takes about 5% longer (0.307 -> 0.324 ms p50 at N = 4,993).
    ``index_dtype`` is the storage the scan reads: int8 halves the core's time at N = 10,000
    (the matrix is a quarter of the f32 size, so it stays in cache next to the model), and its
    cosines are within about 1e-3 of exact: BFCL nDCG@10 0.8217 with int8, 0.8220 with f32.
    """

    top_k: int = 8
    threshold: float | None = None
    alpha: float = 0.65
    fusion: str = "minmax"
    fusion_top: int = 100
    bm25_k1: float = 0.9
    bm25_b: float = 0.75
    bm25_weights: tuple[float, float, float, float] = (2.0, 1.0, 1.0, 0.5)
    history_turns: int = 3
    history_decay: float = 0.5
    clause_weight: float = 1.0
    near_copy_cosine: float | None = 0.95
    precision: Literal["fp32", "int8"] = "int8"
    index_dtype: Literal["f32", "int8", "bf16"] = "int8"

    def __post_init__(self) -> None:
        check_count("top_k", self.top_k, minimum=1)
        check_count("fusion_top", self.fusion_top, minimum=0)  # 0: min-max over every row
        check_count("history_turns", self.history_turns, minimum=0)
        floor = self.threshold
        if floor is not None and not (_finite(floor) and -1.0 <= floor <= 1.0):
            raise InvalidInputError(
                f"threshold must be a cosine in [-1, 1] or None, got {_shown(floor)}"
            )
        if not (isinstance(self.fusion, str) and _FUSION_METHOD.fullmatch(self.fusion)):
            raise InvalidInputError(
                'fusion must be "minmax", "divmax", "rrf" or "<dense>+<sparse>" with each side '
                f"raw, minmax or divmax (as _toolgate.fuse takes), got {_shown(self.fusion)}"
            )
        if not (_finite(self.bm25_k1) and self.bm25_k1 > 0.0):
            raise InvalidInputError(
                f"bm25_k1 must be a finite number > 0, got {_shown(self.bm25_k1)}"
            )
        if not (_finite(self.bm25_b) and 0.0 <= self.bm25_b <= 1.0):
            raise InvalidInputError(f"bm25_b must be in [0, 1], got {_shown(self.bm25_b)}")
        weights = self.bm25_weights
        if not (
            isinstance(weights, tuple)
            and len(weights) == 4
            and all(_finite(w) and w >= 0.0 for w in weights)
        ):
            raise InvalidInputError(
                "bm25_weights must be 4 finite numbers >= 0 (name, description, parameter "
                f"text, server), got {_shown(weights)}"
            )
        if not (_finite(self.alpha) and 0.0 <= self.alpha <= 1.0):
            raise InvalidInputError(f"alpha must be in [0, 1], got {_shown(self.alpha)}")
        if not (_finite(self.history_decay) and 0.0 <= self.history_decay <= 1.0):
            raise InvalidInputError(
                f"history_decay must be in [0, 1], got {_shown(self.history_decay)}"
            )
        if not (_finite(self.clause_weight) and self.clause_weight >= 0.0):
            raise InvalidInputError(
                f"clause_weight must be a finite number >= 0, got {_shown(self.clause_weight)}"
            )
        copies = self.near_copy_cosine
        if copies is not None and not (_finite(copies) and 0.0 < copies <= 1.0):
            raise InvalidInputError(
                f"near_copy_cosine must be a cosine in (0, 1] or None, got {_shown(copies)}"
            )
        if not (isinstance(self.precision, str) and self.precision in ("fp32", "int8")):
            raise InvalidInputError(
                f"precision must be 'fp32' or 'int8', got {_shown(self.precision)}"
            )
        if not (isinstance(self.index_dtype, str) and self.index_dtype in ("f32", "int8", "bf16")):
            raise InvalidInputError(
                f"index_dtype must be 'f32', 'int8' or 'bf16', got {_shown(self.index_dtype)}"
            )


# The methods ``_toolgate.fuse`` takes (rust/py/text.rs, parse_method): checked here so a bad
# one fails when the config is made, not at the first route.
_FUSION_METHOD = re.compile(r"minmax|divmax|rrf|(?:raw|minmax|divmax)\+(?:raw|minmax|divmax)")


def _finite(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    # An integer past float's range is no finite setting either (and isfinite raises on it).
    return math.isfinite(value) if isinstance(value, float) else value.bit_length() <= 1024


#: Largest count a setting takes: the core reads counts as 64-bit integers, and no index
#: holds more rows than this.
MAX_COUNT = 2**32 - 1


def check_count(name: str, value: object, *, minimum: int) -> None:
    """Raise :class:`InvalidInputError` unless ``value`` is an integer from ``minimum`` to
    :data:`MAX_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{name} must be an integer >= {minimum}, got {_shown(value)}")
    if value > MAX_COUNT:
        raise InvalidInputError(f"{name} must be at most {MAX_COUNT:,}, got {_shown(value)}")


def _shown(value: object) -> str:
    """``repr(value)`` for a message: cut short, and never raising (``repr`` of an integer of
    more than 4,300 digits does)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not replace the error being reported
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else f"{text[:80]}..."

"""Router settings; docs/design.md gives the measurement behind each default."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from toolgate.arguments import check_count, finite_number, shown
from toolgate.errors import InvalidInputError

__all__ = ["DEFAULT", "DefaultType", "RouterConfig"]


class DefaultType(enum.Enum):
    """The type of :data:`DEFAULT`."""

    TOKEN = 0


DEFAULT = DefaultType.TOKEN
"""Stands for "the router's configured value" where ``None`` means "none at all"."""


#: Features of :func:`toolgate.routing.no_tool.features`.
NO_TOOL_FEATURES = 4
#: Fitted once across catalogs by ``benches/no_tool_fit.py`` (docs/design.md, "No tool needed").
NO_TOOL_WEIGHTS = (4.74, -0.15, -0.26, -0.6, -1.2)


@dataclass(frozen=True)
class RouterConfig:
    """How a router ranks and stores tools; the defaults were chosen on the dev sets.

    ``alpha`` weighs the dense (embedding) signal against BM25 in the fused score that ranks
    tools; ``fusion`` / ``fusion_top`` say how each signal is normalised first (min-max over
    its best rows, so only the head of each ranking sets its scale). ``threshold`` is a floor
    on the cosine itself, since min-max fusion cannot say "nothing fits"; it is off by
    default and ``toolgate calibrate`` fits one. ``history_*`` blend earlier turns into the
    query, and ``clause_weight`` adds each tool's best cosine against a multi-intent query's
    clauses (0: off). ``clause_fusion`` adds that share of each tool's best score over the
    query's clauses of six words or more, each fused from its own cosine and BM25 as the whole
    query is (``CLAUSE_FUSION_MIN_WORDS`` in ``rust/route/clauses.rs``; 0: off), when two such
    clauses or more remain. A ranked tool with the same name as one placed above it and a row
    cosine of at least ``near_copy_cosine`` is a copy that shows the model nothing new, so it
    moves below the different tools scoring at least half as well (``None``: off). In the
    ranking of a multi-intent query, the best ``clause_slots`` tools of each clause (ranked by
    the clause's own vector and words) come right after the query's own best two (0: off;
    :func:`toolgate.routing.selection.with_clause_slots`). A clause's vector is the mean of
    its tokens' states in the whole query's model run (``clause_vectors="pooled"``, no second
    run), or that mean plus the clause embedded on its own (``"embedded"``: one more model run
    per multi-clause query; finds each intent's tool more often on multi-tool tasks, see
    docs/design.md, "Clause vectors embedded on their own"). Each tool among the ranking's
    best ``k + 30`` gains ``server_weight`` times its server's cosine with the query, a
    server's vector being the mean of its tools' (0: off; :mod:`toolgate.routing.servers`).
    The best ``2k`` ranked tools are ordered by their fused score plus ``name_weight`` times
    the share of the tool name's words the request holds, less a little for each place down
    (0: by fused score alone; ``order_by_name`` in ``rust/route.rs``).
    Each tool's row is its embedding less ``row_centring`` times the catalog's mean row
    (shrunk for small catalogs), made unit length again: what every tool text shares, taken
    out (0: the model's rows as they are; :mod:`toolgate.routing.centring`). Cosines, and so
    ``threshold``, are read against those rows.
    ``index_dtype`` is the storage the scan reads; every type returns the f32 top-k. A tool
    whose description addresses the model ("always use this tool first") ranks by its fused
    score times ``addressing_weight``, as does one whose description is keyword-stuffed (1:
    off; see :mod:`toolgate.catalog.addressing`, :mod:`toolgate.catalog.keyword_lists`). A
    tool named as a new version of another server's tool (``list_issues_v2`` beside
    ``list_issues``) whose row has at least ``lookalike_cosine`` with it is left out of the
    ranking unless the request names its server (:mod:`toolgate.routing.lookalikes`; ``None``:
    off).

    ``top_k`` is a ceiling: with ``adaptive`` on, a turn shows the best ``min_tools`` ranked
    tools (past the first, only while their compact schemas cost at most ``floor_tokens``;
    ``None``: whatever they cost), the best ``clause_tools`` of each clause of a
    multi-intent query, and any other ranked tool scoring at least ``keep_ratio`` of the best
    (:mod:`toolgate.routing.selection`; ``toolgate calibrate`` fits ``min_tools`` and
    ``keep_ratio``). The ranked tools shown keep within ``selection_tokens`` of compact
    schemas (the best one always; ``None``: no cap). ``adaptive=False`` shows the top
    ``top_k``.

    "No tool needed" (:mod:`toolgate.routing.no_tool`): ``no_tool_weights`` (a bias and one
    weight per feature) give the confidence that a request needs none of the tools; at
    ``no_tool_threshold`` or above the route says so (``None``: never), and with
    ``no_tool_drop`` it then routes none of the ranked tools (pinned, named and included
    ones stay).
    """

    top_k: int = 5
    threshold: float | None = None
    alpha: float = 0.65
    fusion: str = "minmax"
    fusion_top: int = 100
    bm25_k1: float = 0.9
    bm25_b: float = 0.75
    bm25_weights: tuple[float, float, float, float] = (2.0, 1.0, 1.0, 0.5)
    history_turns: int = 3
    history_decay: float = 1.0
    clause_weight: float = 1.0
    clause_fusion: float = 0.5
    clause_slots: int = 0
    server_weight: float = 0.0
    name_weight: float = 0.4
    clause_vectors: Literal["pooled", "embedded"] = "pooled"
    near_copy_cosine: float | None = 0.95
    precision: Literal["fp32", "int8"] = "int8"
    row_centring: float = 0.5
    index_dtype: Literal["f32", "int8", "bf16"] = "int8"
    addressing_weight: float = 0.3
    lookalike_cosine: float | None = 0.4
    adaptive: bool = True
    min_tools: int = 3
    floor_tokens: int | None = 800
    selection_tokens: int | None = 2500
    keep_ratio: float = 0.9
    clause_tools: int = 2
    no_tool_weights: tuple[float, ...] = NO_TOOL_WEIGHTS
    no_tool_threshold: float | None = 0.89
    no_tool_drop: bool = True

    def with_settings(self, settings: Mapping[str, Any]) -> RouterConfig:
        """This config with ``settings`` (field name to value, a list read as a tuple, as
        JSON, TOML and YAML give them), checked as any config is; a name that is no field
        is an error naming the fields."""
        names = {field.name for field in fields(self)}
        for key in settings:
            if key not in names:
                raise InvalidInputError(
                    f"{key}: RouterConfig has no such setting; it has {', '.join(sorted(names))}"
                )
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()
        }
        return replace(self, **values)

    def __post_init__(self) -> None:
        check_count("top_k", self.top_k, minimum=1)
        check_count("min_tools", self.min_tools, minimum=1)
        for name in ("floor_tokens", "selection_tokens"):
            if getattr(self, name) is not None:
                check_count(name, getattr(self, name), minimum=0)
        check_count("clause_tools", self.clause_tools, minimum=0)
        check_count("clause_slots", self.clause_slots, minimum=0)
        if not isinstance(self.adaptive, bool):
            raise InvalidInputError(f"adaptive must be True or False, got {shown(self.adaptive)}")
        if not (finite_number(self.keep_ratio) and 0.0 <= self.keep_ratio <= 1.0):
            raise InvalidInputError(f"keep_ratio must be in [0, 1], got {shown(self.keep_ratio)}")
        self._check_no_tool()
        check_count("fusion_top", self.fusion_top, minimum=0)  # 0: min-max over every row
        check_count("history_turns", self.history_turns, minimum=0)
        floor = self.threshold
        if floor is not None and not (finite_number(floor) and -1.0 <= floor <= 1.0):
            raise InvalidInputError(
                f"threshold must be a cosine in [-1, 1] or None, got {shown(floor)}"
            )
        if not (isinstance(self.fusion, str) and _FUSION_METHOD.fullmatch(self.fusion)):
            raise InvalidInputError(
                'fusion must be "minmax", "divmax", "rrf" or "<dense>+<sparse>" with each side '
                f"raw, minmax or divmax (as _toolgate.fuse takes), got {shown(self.fusion)}"
            )
        if not (finite_number(self.bm25_k1) and self.bm25_k1 > 0.0):
            raise InvalidInputError(
                f"bm25_k1 must be a finite number > 0, got {shown(self.bm25_k1)}"
            )
        if not (finite_number(self.bm25_b) and 0.0 <= self.bm25_b <= 1.0):
            raise InvalidInputError(f"bm25_b must be in [0, 1], got {shown(self.bm25_b)}")
        weights = self.bm25_weights
        if not (
            isinstance(weights, tuple)
            and len(weights) == 4
            and all(finite_number(w) and w >= 0.0 for w in weights)
        ):
            raise InvalidInputError(
                "bm25_weights must be 4 finite numbers >= 0 (name, description, parameter "
                f"text, server), got {shown(weights)}"
            )
        if not (finite_number(self.alpha) and 0.0 <= self.alpha <= 1.0):
            raise InvalidInputError(f"alpha must be in [0, 1], got {shown(self.alpha)}")
        if not (finite_number(self.history_decay) and 0.0 <= self.history_decay <= 1.0):
            raise InvalidInputError(
                f"history_decay must be in [0, 1], got {shown(self.history_decay)}"
            )
        if self.clause_vectors not in ("pooled", "embedded"):
            raise InvalidInputError(
                f"clause_vectors must be 'pooled' or 'embedded', got {shown(self.clause_vectors)}"
            )
        if not (finite_number(self.row_centring) and 0.0 <= self.row_centring <= 1.0):
            raise InvalidInputError(
                f"row_centring must be in [0, 1], got {shown(self.row_centring)}"
            )
        if not (finite_number(self.server_weight) and self.server_weight >= 0.0):
            raise InvalidInputError(
                f"server_weight must be a finite number >= 0, got {shown(self.server_weight)}"
            )
        if not (finite_number(self.name_weight) and self.name_weight >= 0.0):
            raise InvalidInputError(
                f"name_weight must be a finite number >= 0, got {shown(self.name_weight)}"
            )
        if not (finite_number(self.clause_weight) and self.clause_weight >= 0.0):
            raise InvalidInputError(
                f"clause_weight must be a finite number >= 0, got {shown(self.clause_weight)}"
            )
        if not (finite_number(self.clause_fusion) and self.clause_fusion >= 0.0):
            raise InvalidInputError(
                f"clause_fusion must be a finite number >= 0, got {shown(self.clause_fusion)}"
            )
        if not (finite_number(self.addressing_weight) and 0.0 <= self.addressing_weight <= 1.0):
            raise InvalidInputError(
                f"addressing_weight must be in [0, 1], got {shown(self.addressing_weight)}"
            )
        lookalike = self.lookalike_cosine
        if lookalike is not None and not (finite_number(lookalike) and -1.0 <= lookalike <= 1.0):
            raise InvalidInputError(
                f"lookalike_cosine must be a cosine in [-1, 1] or None, got {shown(lookalike)}"
            )
        copies = self.near_copy_cosine
        if copies is not None and not (finite_number(copies) and 0.0 < copies <= 1.0):
            raise InvalidInputError(
                f"near_copy_cosine must be a cosine in (0, 1] or None, got {shown(copies)}"
            )
        if not (isinstance(self.precision, str) and self.precision in ("fp32", "int8")):
            raise InvalidInputError(
                f"precision must be 'fp32' or 'int8', got {shown(self.precision)}"
            )
        if not (isinstance(self.index_dtype, str) and self.index_dtype in ("f32", "int8", "bf16")):
            raise InvalidInputError(
                f"index_dtype must be 'f32', 'int8' or 'bf16', got {shown(self.index_dtype)}"
            )

    def _check_no_tool(self) -> None:
        weights = self.no_tool_weights
        if not (
            isinstance(weights, tuple)
            and len(weights) == NO_TOOL_FEATURES + 1
            and all(finite_number(w) for w in weights)
        ):
            raise InvalidInputError(
                f"no_tool_weights must be {NO_TOOL_FEATURES + 1} finite numbers (a bias, then "
                f"one weight per feature), got {shown(weights)}"
            )
        cut = self.no_tool_threshold
        if cut is not None and not (finite_number(cut) and 0.0 <= cut <= 1.0):
            raise InvalidInputError(
                f"no_tool_threshold must be in [0, 1] or None, got {shown(cut)}"
            )
        if not isinstance(self.no_tool_drop, bool):
            raise InvalidInputError(
                f"no_tool_drop must be True or False, got {shown(self.no_tool_drop)}"
            )


# The methods ``_toolgate.fuse`` takes (rust/py/text.rs, parse_method): checked here so a bad
# one fails when the config is made, not at the first route.
_FUSION_METHOD = re.compile(r"minmax|divmax|rrf|(?:raw|minmax|divmax)\+(?:raw|minmax|divmax)")

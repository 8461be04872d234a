""" "No tool needed": whether a request needs none of the catalog's tools, and how sure.

Raw scores do not carry across catalogs: a cosine of 0.45 is a strong match among 36 tools
and a weak one among 2,700 tools that cover arithmetic. So each catalog is measured against
its own "null" distribution: the best cosine and BM25 score it gives a small packaged set of
requests that need no tool (``data/null_requests.txt``: chit-chat, general knowledge,
arithmetic, writing help), embedded when the router is built and kept, as their mean and
spread, in the saved router's manifest. A request's features are then

- its best cosine among the ranked tools, as a z-score against the null requests';
- its best BM25 score (``log1p``), likewise;
- the gap between its best and its ``k``-th best cosine (the last ranked), in null spreads
  (a request that fits a tool stands out from the rest of the ranking);
- its length in words (``log1p``): short requests are chit-chat more often.

A logistic combination of them is the confidence that no tool is needed; its weights were
fitted once, offline, across catalogs (``benches/no_tool_fit.py``) and ship as
``RouterConfig.no_tool_weights``. ``RouterConfig.no_tool_threshold`` turns the confidence into
the decision (``toolgate calibrate --false-rejections`` fits it on labelled queries).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgate.errors import IndexFormatError
from toolgate.forks import fork_safe_lock
from toolgate.routing.config import NO_TOOL_FEATURES

if TYPE_CHECKING:
    from toolgate import _toolgate

__all__ = [
    "GAP_RANK",
    "N_FEATURES",
    "NullScores",
    "features",
    "no_tool_confidence",
    "null_requests",
    "null_vectors",
]

#: Features of :func:`features`; ``RouterConfig.no_tool_weights`` holds a bias and one weight
#: for each.
N_FEATURES = NO_TOOL_FEATURES

#: The rank whose cosine the gap feature measures the best one against: the ``top_k`` the
#: weights were fitted at.
GAP_RANK = 10

# Floors on the null spreads: a catalog whose null requests all score alike (a handful of
# tools) must not turn a small difference into a large z-score.
_MIN_COSINE_STD = 0.03
_MIN_BM25_STD = 0.25


@cache
def null_requests() -> tuple[str, ...]:
    """The packaged requests that need no tool, one a line (``#`` lines are comments)."""
    text = (resources.files("toolgate") / "data" / "null_requests.txt").read_text("utf-8")
    return tuple(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


@dataclass(frozen=True)
class NullScores:
    """Mean and spread of one catalog's best cosine and best ``log1p`` BM25 score over the
    null requests."""

    cosine_mean: float
    cosine_std: float
    bm25_mean: float
    bm25_std: float

    @classmethod
    def measure(
        cls,
        index: _toolgate.Index,
        bm25: _toolgate.Bm25,
        vectors: np.ndarray,
        texts: Sequence[str],
    ) -> NullScores:
        """The null scores of the catalog in ``index`` and ``bm25``, from the null requests'
        ``texts`` and their embedded ``vectors``."""
        if len(index) == 0:
            return cls(0.0, _MIN_COSINE_STD, 0.0, _MIN_BM25_STD)
        cosines = np.asarray([float(np.max(index.scores(v))) for v in vectors])
        sparse = np.asarray([math.log1p(max(0.0, float(np.max(bm25.scores(t))))) for t in texts])
        return cls(
            round(float(cosines.mean()), 6),
            round(max(float(cosines.std()), _MIN_COSINE_STD), 6),
            round(float(sparse.mean()), 6),
            round(max(float(sparse.std()), _MIN_BM25_STD), 6),
        )

    def to_dict(self) -> dict[str, float]:
        """The manifest's form."""
        return {
            "cosine_mean": self.cosine_mean,
            "cosine_std": self.cosine_std,
            "bm25_mean": self.bm25_mean,
            "bm25_std": self.bm25_std,
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> NullScores:
        """Read the manifest's form; :class:`IndexFormatError` if it is not one."""
        keys = ("cosine_mean", "cosine_std", "bm25_mean", "bm25_std")
        if not isinstance(value, Mapping) or set(value) != set(keys):
            raise IndexFormatError(f"null_scores must hold {', '.join(keys)}")
        numbers = [value[key] for key in keys]
        if (
            not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                for x in numbers
            )
            or min(numbers[1], numbers[3]) <= 0
        ):
            raise IndexFormatError("null_scores must be finite numbers, with spreads > 0")
        return cls(*(float(x) for x in numbers))


def features(
    null: NullScores,
    dense: Sequence[float],
    bm25: Sequence[float],
    query: str,
    n_tools: int = GAP_RANK,
) -> tuple[float, ...]:
    """The features of one request (see the module) from the cosines and BM25 scores of its
    ranked tools, in a catalog of ``n_tools``."""
    if not dense:
        return (-10.0, -10.0, 0.0, math.log1p(len(query.split())))
    top = max(dense)
    tail = min(dense)
    if n_tools < GAP_RANK:
        # A catalog of fewer tools than the gap's rank has no k-th: a tool that fits nothing
        # stands in, at the null requests' mean, or a one-tool catalog would show no gap.
        tail = min(tail, null.cosine_mean)
    best_sparse = math.log1p(max(0.0, max(bm25)))
    return (
        (top - null.cosine_mean) / null.cosine_std,
        (best_sparse - null.bm25_mean) / null.bm25_std,
        (top - tail) / null.cosine_std,
        math.log1p(len(query.split())),
    )


def no_tool_confidence(weights: Sequence[float], values: Sequence[float]) -> float:
    """The logistic confidence that no tool is needed: ``weights`` holds the bias, then one
    weight per feature."""
    z = weights[0] + sum(w * x for w, x in zip(weights[1:], values, strict=True))
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


# The null requests' vectors per model: every router a process builds reuses them. A model's
# lock is held across its embedding: routers built at once in threads (a gateway's first
# requests) each embedded the 107 requests, where the first one's vectors serve them all. One
# lock per model, so a slow model (being loaded) holds up no other model's routers.
_NULL_VECTORS: dict[str, np.ndarray] = {}
_NULL_LOCKS: dict[str, threading.Lock] = {}
_NULL_LOCKS_LOCK = fork_safe_lock()  # held only to find or make a model's lock


def _null_lock(model_id: str) -> threading.Lock:
    """The lock held while the model ``model_id`` embeds the null requests."""
    with _NULL_LOCKS_LOCK:
        lock = _NULL_LOCKS.get(model_id)
        if lock is None:
            lock = _NULL_LOCKS[model_id] = fork_safe_lock()
        return lock


def null_vectors(model_id: str, embed: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """The null requests embedded by the model ``model_id`` (``embed`` on first need)."""
    vectors = _NULL_VECTORS.get(model_id)
    if vectors is not None:
        return vectors
    with _null_lock(model_id):
        vectors = _NULL_VECTORS.get(model_id)
        if vectors is None:
            vectors = np.asarray(embed(list(null_requests())), np.float32)
            _NULL_VECTORS[model_id] = vectors
        return vectors

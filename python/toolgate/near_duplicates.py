"""Near-duplicate tools: groups of tools whose embedded rows are almost the same.

The Tool Budget pattern's pruner folds near-duplicate tools into one. Two servers exposing the
same tool, or a tool registered twice under two names, cost their tokens twice, split the
model's choice between copies and take two of a turn's few routed slots where one would do.
This finds them: tools are linked when the cosine of their rows (the same rows ``route``
scores) is at least a threshold, and a group is a set of tools linked directly or through
others. On BFCL's 2,710 tools, 524 have a twin at 0.95 (most are one function copied across
test categories with its description reworded), and 12 at 0.99.

The scan compares every pair of tools, in blocks of rows so memory stays bounded (64 MB), so
its time grows with the square of the catalog: measured here, 0.65 s at 10,000 tools and
3.4 s at 30,000. It is a report for the people who keep the catalog, not a step of routing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from toolgate.errors import InvalidInputError

__all__ = ["DEFAULT_THRESHOLD", "DuplicateGroup", "near_duplicate_groups"]

#: The cosine from which two tools count as near copies of each other.
DEFAULT_THRESHOLD = 0.95

#: Cosines computed at once (64 MB of float32): a block of rows against every later row.
_BLOCK_CELLS = 1 << 24


@dataclass(frozen=True)
class DuplicateGroup:
    """Tools that are near copies of each other, in catalog order.

    ``cosine`` is the lowest cosine among the pairs that link the group (at least the
    threshold); ``highest`` the highest (1.0 for exact copies).
    """

    ids: tuple[str, ...]
    cosine: float
    highest: float

    def to_dict(self) -> dict[str, object]:
        """Plain-Python form for JSON."""
        return {
            "ids": list(self.ids),
            "cosine": round(self.cosine, 4),
            "highest": round(self.highest, 4),
        }


def near_duplicate_groups(
    vectors: np.ndarray, ids: Sequence[str], threshold: float = DEFAULT_THRESHOLD
) -> list[DuplicateGroup]:
    """The groups of near-duplicate rows of ``vectors`` (one row per id), largest first,
    then in catalog order; a tool with no near copy is in no group.

    >>> rows = np.array([[1, 0], [0.999, 0.045], [0, 1]], dtype=np.float32)
    >>> [g.ids for g in near_duplicate_groups(rows, ["a/x", "b/x", "a/y"])]
    [('a/x', 'b/x')]
    """
    number = isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
    if not (number and 0.0 < threshold <= 1.0):
        raise InvalidInputError(f"threshold must be a cosine in (0, 1], got {threshold!r}")
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(ids):
        raise InvalidInputError(
            f"expected one vector per id ({len(ids)}), got an array of shape {matrix.shape}"
        )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = matrix / np.where(norms > 0, norms, 1.0)
    links = _links(unit, threshold)
    return _groups(links, ids)


def _links(unit: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    """Every pair ``(i, j, cosine)`` with ``i < j`` and a cosine of at least ``threshold``."""
    links: list[tuple[int, int, float]] = []
    step = max(1, _BLOCK_CELLS // max(1, unit.shape[0]))
    for start in range(0, unit.shape[0], step):
        # Only the columns from the block's first row on, and above the diagonal: every
        # pair is scored once.
        block = unit[start : start + step] @ unit[start:].T
        rows, cols = np.nonzero(np.triu(block, k=1) >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            links.append((start + r, start + c, float(block[r, c])))
    return links


def _groups(links: list[tuple[int, int, float]], ids: Sequence[str]) -> list[DuplicateGroup]:
    parent = list(range(len(ids)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving keeps the trees flat
            i = parent[i]
        return i

    for i, j, _cosine in links:
        parent[root(i)] = root(j)
    members: dict[int, list[int]] = {}
    cosines: dict[int, list[float]] = {}
    for i, _j, cosine in links:
        cosines.setdefault(root(i), []).append(cosine)
    for i in range(len(ids)):
        if root(i) in cosines:
            members.setdefault(root(i), []).append(i)
    groups = [
        (rows, DuplicateGroup(tuple(ids[r] for r in rows), min(cosines[key]), max(cosines[key])))
        for key, rows in members.items()
    ]
    groups.sort(key=lambda pair: (-len(pair[0]), pair[0][0]))
    return [group for _rows, group in groups]

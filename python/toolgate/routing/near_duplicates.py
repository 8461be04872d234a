"""Near-duplicate tools: groups of tools whose embedded rows are almost the same.

The Tool Budget pattern's pruner folds near-duplicate tools into one. Two servers exposing the
same tool, or a tool registered twice under two names, cost their tokens twice, split the
model's choice between copies and take two of a turn's few routed slots where one would do
(``route`` moves a copy of the same name down: ``RouterConfig.near_copy_cosine``).
This finds them: tools are linked when the cosine of their rows (the same rows ``route``
scores) is at least a threshold, and a group is a set of tools linked directly or through
others. BFCL's merged catalog has many such twins, most of them one function copied across
test categories with its description reworded.

The groups are candidates for a person to review, not to merge blindly: an embedding hardly
tells ``celsius_to_fahrenheit`` from ``fahrenheit_to_celsius``. A low threshold links most of
a catalog into one group, which says nothing.

The scan compares every pair of tools, in blocks of rows, and keeps no list of the pairs, so
memory stays bounded whatever the threshold. Its time grows with the square of the catalog
and with the number of linked pairs. It is a report for the people who keep the catalog, not
a step of routing. The figures: docs/design.md, "Near copies move down".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real

import numpy as np

from toolgate.embedding.normalise import normalised
from toolgate.errors import InvalidInputError

__all__ = ["DEFAULT_THRESHOLD", "DuplicateGroup", "check_threshold", "near_duplicate_groups"]

#: The cosine from which two tools count as near copies of each other.
DEFAULT_THRESHOLD = 0.95

#: Cosines computed at once (16 MB of float32): a block of rows against every later row.
_BLOCK_CELLS = 1 << 22

#: How far below the threshold a float32 cosine may fall and still meet it: two copies of
#: one row come out at 0.99999994, not 1.
_SLACK = 1e-5


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


def check_threshold(threshold: object) -> float:
    """``threshold`` as a cosine in (0, 1], or an :class:`InvalidInputError` saying why not."""
    number = isinstance(threshold, Real) and not isinstance(threshold, bool)
    if not (number and 0.0 < float(threshold) <= 1.0):  # type: ignore[arg-type]
        raise InvalidInputError(f"threshold must be a cosine in (0, 1], got {threshold!r}")
    return float(threshold)  # type: ignore[arg-type]


def near_duplicate_groups(
    vectors: np.ndarray, ids: Sequence[str], threshold: float = DEFAULT_THRESHOLD
) -> list[DuplicateGroup]:
    """The groups of near-duplicate rows of ``vectors`` (one row per id), largest first,
    then in catalog order; a tool with no near copy is in no group.

    >>> rows = np.array([[1, 0], [0.999, 0.045], [0, 1]], dtype=np.float32)
    >>> [g.ids for g in near_duplicate_groups(rows, ["a/x", "b/x", "a/y"])]
    [('a/x', 'b/x')]
    """
    threshold = check_threshold(threshold)
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(ids):
        raise InvalidInputError(
            f"expected one vector per id ({len(ids)}), got an array of shape {matrix.shape}"
        )
    return _Linker(len(ids)).link(normalised(matrix), threshold).groups(ids)


class _Linker:
    """Union-find over the rows, with the lowest and highest cosine of each row's links."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.low = np.full(n, np.inf)
        self.high = np.full(n, -np.inf)

    def root(self, i: int) -> int:
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving keeps the trees flat
            i = parent[i]
        return i

    def link(self, unit: np.ndarray, threshold: float) -> _Linker:
        """Link every pair of rows whose cosine is at least ``threshold``."""
        n = unit.shape[0]
        step = max(1, _BLOCK_CELLS // max(1, n))
        for start in range(0, n, step):
            # Only the columns from the block's first row on, and above the diagonal: every
            # pair is scored once.
            block = unit[start : start + step] @ unit[start:].T
            rows, cols = np.nonzero(np.triu(block, k=1) >= threshold - _SLACK)
            if not len(rows):
                continue
            cosines = np.minimum(block[rows, cols], 1.0).astype(np.float64)
            first, second = rows + start, cols + start
            for side in (first, second):
                np.minimum.at(self.low, side, cosines)
                np.maximum.at(self.high, side, cosines)
            for i, j in zip(first.tolist(), second.tolist(), strict=True):
                self.parent[self.root(i)] = self.root(j)
        return self

    def groups(self, ids: Sequence[str]) -> list[DuplicateGroup]:
        members: dict[int, list[int]] = {}
        for i in np.flatnonzero(np.isfinite(self.low)).tolist():
            members.setdefault(self.root(i), []).append(i)
        groups = [
            DuplicateGroup(
                tuple(ids[r] for r in rows),
                # Six places: what float32 cosines hold (copies come out at 0.99999994).
                round(float(self.low[rows].min()), 6),
                round(float(self.high[rows].max()), 6),
            )
            for rows in members.values()
        ]
        order = {tool_id: position for position, tool_id in enumerate(ids)}
        groups.sort(key=lambda group: (-len(group.ids), order[group.ids[0]]))
        return groups

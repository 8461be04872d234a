"""Which learned rows a memory keeps within its bounds, and which it evicts.

Each tool keeps its newest ``rows_per_tool`` rows. Past ``max_rows`` in all, the rows evicted
are those of the tools holding the most, the oldest of those first: the rate cap is per tool,
so a flood spread over many tools fills ``max_rows`` within minutes, and evicting the oldest
rows of all would push out every other tool's lessons. Evicting from the fullest first, the
flood gives up its own rows, and a tool with fewer than its fair share keeps them all.
"""

from __future__ import annotations

import numpy as np

__all__ = ["rows_kept"]


def rows_kept(tools: np.ndarray, rows_per_tool: int, max_rows: int) -> np.ndarray:
    """The rows to keep, as a mask, of rows of ``tools`` (each row's tool, oldest row
    first): each tool's newest ``rows_per_tool``; past ``max_rows`` in all, those of the
    tools holding the most are evicted first, the oldest of those first."""
    tools = np.asarray(tools, dtype=np.int64)
    age = _age_in_tool(tools)
    keep = age < rows_per_tool
    held = np.minimum(np.bincount(tools), rows_per_tool)  # what each tool keeps so far
    if int(held.sum()) <= max_rows:
        return keep
    # Evicting from the fullest first leaves each tool min(held, level) rows, for the
    # highest level within max_rows, and one row more for some of those above it.
    low, high = 0, int(held.max())  # fits at low, not at high
    while high - low > 1:
        mid = (low + high) // 2
        if int(np.minimum(held, mid).sum()) <= max_rows:
            low = mid
        else:
            high = mid
    keep = age < low
    spare = max_rows - int(np.minimum(held, low).sum())
    if spare:
        # The next row of each tool above the level: the oldest of them are evicted.
        above = np.flatnonzero(age == low)
        keep[above[len(above) - spare :]] = True
    return keep


def _age_in_tool(tools: np.ndarray) -> np.ndarray:
    """Each row's place among its tool's rows, newest first (0: the tool's newest)."""
    count = len(tools)
    newest_first = tools[::-1]
    order = np.argsort(newest_first, kind="stable")  # by tool, newest first within one
    grouped = newest_first[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    first = np.repeat(starts, np.diff(np.r_[starts, count]))
    age = np.empty(count, dtype=np.int64)
    age[order] = np.arange(count) - first
    return age[::-1]

"""The learned rows a memory keeps within its bounds: each tool's newest ``rows_per_tool``,
then, past ``max_rows``, evicted from the tools holding the most, oldest first."""

from __future__ import annotations

import numpy as np
import pytest

from toolgate.routing.learned_bounds import rows_kept


def _evicted_one_by_one(tools: list[int], rows_per_tool: int, max_rows: int) -> list[bool]:
    """The rule as stated, one row at a time: a tool's oldest row past its cap; then, while
    over ``max_rows``, the oldest row of the tools holding the most."""
    kept = [True] * len(tools)

    def rows_of(tool: int) -> list[int]:
        return [at for at, t in enumerate(tools) if t == tool and kept[at]]

    for tool in set(tools):
        for at in rows_of(tool)[: max(0, len(rows_of(tool)) - rows_per_tool)]:
            kept[at] = False
    while sum(kept) > max_rows:
        most = max(len(rows_of(tool)) for tool in set(tools))
        oldest = min(rows_of(tool)[0] for tool in set(tools) if len(rows_of(tool)) == most)
        kept[oldest] = False
    return kept


@pytest.mark.parametrize("seed", range(40))
def test_rows_kept_follow_the_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tools = rng.integers(0, int(rng.integers(1, 12)), size=int(rng.integers(0, 80))).tolist()
    rows_per_tool, max_rows = int(rng.integers(1, 10)), int(rng.integers(1, 40))
    kept = rows_kept(np.asarray(tools, dtype=np.uint32), rows_per_tool, max_rows)
    assert kept.tolist() == _evicted_one_by_one(tools, rows_per_tool, max_rows)


def test_a_flood_over_many_tools_leaves_a_quiet_tool_its_rows() -> None:
    quiet = [0, 0, 0]
    flood = [1 + n % 50 for n in range(50 * 32)]  # 50 tools at their cap, all newer
    kept = rows_kept(np.asarray(quiet + flood), rows_per_tool=32, max_rows=500)
    assert kept[:3].all()
    assert kept.sum() == 500

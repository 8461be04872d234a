"""One index hammered from 8 threads gives exactly the single-thread results, and a forked
child of a process that split its scans over threads searches it too."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from toolgate import Index

Result = list[tuple[list[int], list[float]]]


@pytest.mark.parametrize("dtype", ["f32", "int8"])
def test_eight_threads_agree_with_one(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(21)
    vectors = rng.standard_normal((5000, 64)).astype(np.float32)
    masks = [[int(f)] for f in rng.integers(0, 100, 5000)]
    index = Index.build(tmp_path / "i.tgi", vectors, dtype=dtype, masks=masks)
    queries = rng.standard_normal((32, 64)).astype(np.float32)
    flags = list(range(0, 100, 2))

    def run(offset: int) -> Result:
        out: Result = []
        for i in range(len(queries)):
            query = queries[(i + offset) % len(queries)]
            rows, scores = index.search(query, 10, flags=flags)
            out.append((rows.tolist(), scores.tolist()))
        return out[len(queries) - offset :] + out[: len(queries) - offset]

    expected = run(0)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, [t % len(queries) for t in range(8) for _ in range(4)]))
    for result in results:
        assert result == expected


# In a process of its own, so that the fork is the first thing its child does after a split
# scan of the parent's. Exits 0 if the forked child returns the parent's results, 3 if other
# ones, 4 if it hung (killed by its alarm).
_FORKED_SEARCH = """
import os, signal, sys
import numpy as np
from toolgate import Index

rng = np.random.default_rng(5)
vectors = rng.standard_normal((5000, 64)).astype(np.float32)
index = Index.build(sys.argv[1], vectors, dtype="int8")
index = Index.open(sys.argv[1], threads=2)
expected = [a.tolist() for a in index.search(vectors[7], 5)] + [index.scores(vectors[7]).tolist()]
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a child that hangs dies
    got = [a.tolist() for a in index.search(vectors[7], 5)] + [index.scores(vectors[7]).tolist()]
    os._exit(0 if got == expected else 3)
status = os.waitpid(pid, 0)[1]
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 4)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_searches_an_index_split_over_threads(tmp_path: Path) -> None:
    # The parent's split scans started a pool whose threads the child does not have.
    run = subprocess.run(
        [sys.executable, "-c", _FORKED_SEARCH, str(tmp_path / "i.tgi")], timeout=120, check=False
    )
    assert run.returncode != 4, "the forked child hung"
    assert run.returncode == 0

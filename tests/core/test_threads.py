"""One index hammered from 8 threads gives exactly the single-thread results."""

from __future__ import annotations

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

"""Single-query top-10 search: toolgate per storage type against numpy, faiss and the floor.

One group per row count N (d = 384, normalised random rows, one thread everywhere):

* ``toolgate f32 / int8 / bf16``: ``Index.search(q, 10)`` from Python, exact re-scoring
  included, so int8 and bf16 return the f32 top-10;
* ``numpy``: ``M @ q`` then ``argpartition`` and a sort of the 10 best;
* ``faiss IndexFlatIP``: ``search(q, 10)`` with one OpenMP thread;
* ``read probe``: summing the f32 matrix once, the memory-bandwidth floor of any f32 scan.

Ratios against faiss and the probe are printed at the end, with the targets of issue 2:

    .venv/bin/python -m pytest benches/bench_search.py -q -p no:cacheprovider

Only one N is held in memory at a time (N = 100,000 needs about 1 GB: the matrix, faiss's
copy and the three index files in the page cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import faiss
import numpy as np
import numpy.typing as npt
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from toolgate import Index
from toolgate._toolgate import _testing

if TYPE_CHECKING:
    from conftest import RatioTable

DIM = 384
K = 10
ROW_COUNTS = (120, 1_000, 10_000, 100_000)
DTYPES = ("f32", "int8", "bf16")
FAISS, PROBE = "faiss IndexFlatIP", "read probe"
METHODS = (*(f"toolgate {d}" for d in DTYPES), "numpy", FAISS, PROBE)
# Seconds of timed calls per benchmark: enough for a stable minimum on a shared machine.
TARGET_SECONDS = 0.3

faiss.omp_set_num_threads(1)


@dataclass
class Setup:
    """Everything one row count needs; built on first use, dropped when N changes."""

    n: int
    matrix: npt.NDArray[np.float32]
    query: npt.NDArray[np.float32]
    indexes: dict[str, Index]
    flat: faiss.IndexFlatIP
    directory: Path


_current: list[Setup] = []


def setup_for(n: int, root: Path) -> Setup:
    if _current and _current[0].n == n:
        return _current[0]
    for old in _current:
        for path in old.directory.iterdir():
            path.unlink()
    _current.clear()
    rng = np.random.default_rng(n)
    matrix = rng.standard_normal((n, DIM), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = rng.standard_normal(DIM, dtype=np.float32)
    query /= np.linalg.norm(query)
    directory = root / f"n{n}"
    directory.mkdir(exist_ok=True)
    indexes = {d: Index.build(directory / f"{d}.tgi", matrix, dtype=d) for d in DTYPES}
    flat = faiss.IndexFlatIP(DIM)
    flat.add(matrix)
    _current.append(Setup(n, matrix, query, indexes, flat, directory))
    return _current[0]


def numpy_top_k(
    matrix: npt.NDArray[np.float32], query: npt.NDArray[np.float32]
) -> npt.NDArray[np.intp]:
    scores = matrix @ query
    best = np.argpartition(-scores, K)[:K]
    return best[np.argsort(-scores[best], kind="stable")]


def method_call(setup: Setup, method: str) -> Callable[[], object]:
    q, q2d = setup.query, setup.query[None, :]
    if method.startswith("toolgate "):
        index = setup.indexes[method.removeprefix("toolgate ")]
        return lambda: index.search(q, K)
    if method == "numpy":
        return lambda: numpy_top_k(setup.matrix, q)
    if method == FAISS:
        return lambda: setup.flat.search(q2d, K)
    return lambda: _testing.read_probe(setup.matrix)


def timed(benchmark: BenchmarkFixture, fn: Callable[[], object]) -> float:
    """Runs `fn` under pytest-benchmark for about TARGET_SECONDS; best seconds per call."""
    fn()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < 0.02:
        fn()
        calls += 1
    per_call = (time.perf_counter() - start) / calls
    iterations = max(1, int(2e-4 / per_call))  # rounds of at least 0.2 ms beat timer noise
    rounds = max(5, int(TARGET_SECONDS / (per_call * iterations)))
    benchmark.pedantic(fn, rounds=rounds, iterations=iterations, warmup_rounds=1)
    best: float = benchmark.stats.stats.min
    return best


@pytest.fixture(scope="module")
def index_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("bench-search")
    _current.clear()


@pytest.mark.parametrize(
    ("n", "method"), [(n, m) for n in ROW_COUNTS for m in METHODS], ids=lambda v: str(v)
)
def test_search(
    benchmark: BenchmarkFixture, ratio_table: RatioTable, index_root: Path, n: int, method: str
) -> None:
    group = f"search top-{K}, N={n:,}, d={DIM}"
    benchmark.group = group
    setup = setup_for(n, index_root)
    call = method_call(setup, method)
    if method.startswith("toolgate "):
        # Same top-10 as faiss (random data has no near-ties at the top).
        rows, _ = setup.indexes[method.removeprefix("toolgate ")].search(setup.query, K)
        _, faiss_rows = setup.flat.search(setup.query[None, :], K)
        np.testing.assert_array_equal(rows, faiss_rows[0])
    ratio_table.record(group, method, timed(benchmark, call))


@pytest.fixture(scope="module", autouse=True)
def target_report(ratio_table: RatioTable) -> Iterator[None]:
    """Appends the issue's targets, checked against this run's figures, to the summary."""
    yield
    groups = {
        n: ratio_table.groups.get(f"search top-{K}, N={n:,}, d={DIM}", {}) for n in ROW_COUNTS
    }

    def ratio(n: int, a: str, b: str) -> float | None:
        g = groups[n]
        return g[a] / g[b] if a in g and b in g else None

    small = groups[120].get("toolgate f32")
    large = groups[100_000].get("toolgate int8")
    checks = [
        ("N=10k f32: faiss time / toolgate time", ratio(10_000, FAISS, "toolgate f32"), 1.1, True),
        (
            "N=10k f32: toolgate time / read probe",
            ratio(10_000, "toolgate f32", PROBE),
            1.15,
            False,
        ),
        (
            "N=10k int8: faiss time / toolgate time",
            ratio(10_000, FAISS, "toolgate int8"),
            3.0,
            True,
        ),
        ("N=120 f32: us per call", None if small is None else small * 1e6, 10.0, False),
        ("N=100k int8: ms per call", None if large is None else large * 1e3, 6.0, False),
    ]
    ratio_table.notes.append("targets")
    for label, value, target, at_least in checks:
        wanted = f"{'>=' if at_least else '<='} {target:g}"
        if value is None:
            verdict, shown = "not measured", "n/a"
        else:
            met = value >= target if at_least else value <= target
            verdict, shown = ("met" if met else "MISSED"), f"{value:.3g}"
        ratio_table.notes.append(f"  {label:<42} {shown:>8}  target {wanted:<8} {verdict}")

"""Raw scan speed of every kernel against the memory-read floor and the peers a user would pick.

One group per row count N (d = 384, normalised random rows, one thread). Each group holds the
read probe over the f32 matrix (the floor a scan of those bytes cannot beat), every available
instruction set for f32 / int8 / bf16 rows, numpy ``M @ q`` (its BLAS may use several threads; set
``OPENBLAS_NUM_THREADS=1`` for a one-thread peer) and faiss ``IndexFlatIP`` (top-10, one OpenMP
thread), and a batch of 8 queries scored at once vs one by one. Matrices are 64-byte aligned like
the index file. The ratios printed at the end compare best-of-rounds times within this run.

    .venv/bin/python -m pytest benches/bench_kernels.py -q -p no:cacheprovider
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from toolgate._toolgate import _testing

DIM = 384
ROW_COUNTS = (1_000, 10_000, 100_000)
BATCH = 8
# Enough rounds for a stable minimum while keeping the whole file well under a minute on a
# shared two-core machine: about 0.4 s of scanning per benchmark.
TARGET_SECONDS = 0.4

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Matrices:
    """One normalised random matrix in every storage type, plus queries."""

    f32: F32
    int8: npt.NDArray[np.int8]
    scales: F32
    bf16: npt.NDArray[np.uint16]
    query: F32
    queries: F32


_matrices: dict[int, Matrices] = {}
_best_seconds: dict[tuple[int, str], float] = {}
_interleaved_seconds: dict[tuple[int, str], float] = {}


def aligned_copy(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`array` copied to a 64-byte-aligned buffer, as rows are in a memory-mapped index file.

    numpy's own large allocations start 16 bytes past a page boundary, which splits every
    64-byte vector load across two cache lines and would understate every kernel here.
    """
    buffer = np.empty(array.nbytes + 64, dtype=np.uint8)
    offset = -buffer.ctypes.data % 64
    out = buffer[offset : offset + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def matrices(n: int) -> Matrices:
    if n not in _matrices:
        rng = np.random.default_rng(n)
        rows = rng.standard_normal((n, DIM), dtype=np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        scales = (np.abs(rows).max(axis=1) / np.float32(127)).astype(np.float32)
        codes = np.clip(np.rint(rows / scales[:, None]), -127, 127).astype(np.int8)
        bf16 = (rows.view(np.uint32) >> 16).astype(np.uint16)
        rows, codes, bf16 = aligned_copy(rows), aligned_copy(codes), aligned_copy(bf16)
        queries = rng.standard_normal((BATCH, DIM), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        _matrices[n] = Matrices(rows, codes, scales, bf16, queries[0].copy(), queries)
    return _matrices[n]


def run(benchmark: BenchmarkFixture, n: int, name: str, fn: Callable[[], object]) -> None:
    """Benchmarks `fn` for about TARGET_SECONDS and records its best time under `name`."""
    fn()
    rounds = max(10, int(TARGET_SECONDS / (n * DIM * 4 / 10e9 + 20e-6)))
    # pytest-benchmark ships no annotations for pedantic().
    benchmark.pedantic(fn, rounds=rounds, warmup_rounds=2)  # type: ignore[no-untyped-call]
    assert benchmark.stats is not None
    _best_seconds[(n, name)] = benchmark.stats.stats.min


@pytest.fixture
def forced_isa(request: pytest.FixtureRequest) -> Iterator[str]:
    name: str = request.param
    _testing.force_isa(name)
    yield name
    _testing.force_isa(None)


class RatioReport:
    """pytest plugin printing each best time and its ratios to the read probe and to faiss."""

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        write = terminalreporter.write_line
        if _best_seconds:
            write("")
            write("kernel ratios per benchmark (best of rounds; < 1 means faster than the peer)")
            write_ratios(write, _best_seconds)
        if _interleaved_seconds:
            write("")
            write("rotating blocks (each peer a warm block per cycle, best call: robust ratios)")
            write_ratios(write, _interleaved_seconds)


def write_ratios(write: Callable[[str], object], seconds: dict[tuple[int, str], float]) -> None:
    """One block per N: each timing, then its ratio to the read probe and to faiss."""
    for n in ROW_COUNTS:
        timings = sorted(((t, name) for (m, name), t in seconds.items() if m == n))
        if not timings:
            continue
        probe = seconds.get((n, "read probe f32"))
        faiss_time = seconds.get((n, "faiss IndexFlatIP k=10"))
        write(f"N = {n:,}, d = {DIM}")
        for time_s, name in timings:
            vs_probe = f"{time_s / probe:6.2f}x probe" if probe else ""
            vs_faiss = f"{time_s / faiss_time:6.2f}x faiss" if faiss_time else ""
            write(f"  {name:<28} {time_s * 1e6:10.1f} us  {vs_probe}  {vs_faiss}")


@pytest.fixture(scope="module", autouse=True)
def ratio_report(request: pytest.FixtureRequest) -> None:
    """Registers the ratio printer for the end of the session."""
    manager = request.config.pluginmanager
    if not manager.has_plugin("toolgate-kernel-ratios"):
        manager.register(RatioReport(), "toolgate-kernel-ratios")


@pytest.mark.parametrize("n", ROW_COUNTS)
@pytest.mark.parametrize("forced_isa", _testing.available_isas(), indirect=True)
@pytest.mark.parametrize("dtype", ["f32", "int8", "bf16"])
def test_scan(benchmark: BenchmarkFixture, n: int, forced_isa: str, dtype: str) -> None:
    if forced_isa == "avx512vnni" and dtype != "int8":
        pytest.skip("VNNI has an int8 kernel only; f32 and bf16 run the AVX-512 ones")
    benchmark.group = f"scan N={n:,}"
    m = matrices(n)
    stored: dict[str, npt.NDArray[Any]] = {"f32": m.f32, "int8": m.int8, "bf16": m.bf16}
    rows, scales = stored[dtype], (m.scales if dtype == "int8" else None)
    run(
        benchmark,
        n,
        f"scan {dtype} {forced_isa}",
        lambda: _testing.scan(m.query, rows, dtype, scales),
    )


@pytest.mark.parametrize("n", ROW_COUNTS)
def test_read_probe(benchmark: BenchmarkFixture, n: int) -> None:
    benchmark.group = f"scan N={n:,}"
    m = matrices(n)
    run(benchmark, n, "read probe f32", lambda: _testing.read_probe(m.f32))


@pytest.mark.parametrize("n", ROW_COUNTS)
def test_numpy_matvec(benchmark: BenchmarkFixture, n: int) -> None:
    benchmark.group = f"scan N={n:,}"
    m = matrices(n)
    run(benchmark, n, "numpy M @ q", lambda: m.f32 @ m.query)


@pytest.mark.parametrize("n", ROW_COUNTS)
def test_faiss_flat_ip(benchmark: BenchmarkFixture, n: int) -> None:
    faiss = pytest.importorskip("faiss")
    faiss.omp_set_num_threads(1)
    benchmark.group = f"scan N={n:,}"
    m = matrices(n)
    index = faiss.IndexFlatIP(DIM)
    index.add(m.f32)
    query = m.query[None, :]
    run(benchmark, n, "faiss IndexFlatIP k=10", lambda: index.search(query, 10))


@pytest.mark.parametrize("n", ROW_COUNTS)
@pytest.mark.parametrize("mode", ["batch", "one by one"])
def test_batch_of_queries(benchmark: BenchmarkFixture, n: int, mode: str) -> None:
    benchmark.group = f"scan N={n:,}"
    m = matrices(n)

    def one_by_one() -> list[F32]:
        return [_testing.scan(query, m.f32) for query in m.queries]

    fn = (lambda: _testing.scan_batch(m.queries, m.f32)) if mode == "batch" else one_by_one
    run(benchmark, n, f"{BATCH} queries f32 {mode}", fn)


@pytest.mark.parametrize("n", [10_000, 100_000])
def test_interleaved_ratios(n: int) -> None:
    """Times the probe, the kernels and faiss in rotating order, a short block of calls each
    per cycle: a block runs on a warm cache, as repeated searches over one index do, and the
    rotation makes a busy machine slow every peer alike. Records the best call of each."""
    faiss = pytest.importorskip("faiss")
    faiss.omp_set_num_threads(1)
    m = matrices(n)
    index = faiss.IndexFlatIP(DIM)
    index.add(m.f32)
    query = m.query[None, :]
    peers: dict[str, Callable[[], object]] = {
        "read probe f32": lambda: _testing.read_probe(m.f32),
        "scan f32": lambda: _testing.scan(m.query, m.f32),
        "scan int8": lambda: _testing.scan(m.query, m.int8, "int8", m.scales),
        "scan bf16": lambda: _testing.scan(m.query, m.bf16, "bf16"),
        "faiss IndexFlatIP k=10": lambda: index.search(query, 10),
    }
    names = list(peers)
    best = dict.fromkeys(names, float("inf"))
    calls_per_block = max(3, int(TARGET_SECONDS / 20 / (n * DIM * 4 / 10e9)))
    for cycle in range(8):
        for name in names[cycle % len(names) :] + names[: cycle % len(names)]:
            for _ in range(calls_per_block):
                start = time.perf_counter()
                peers[name]()
                best[name] = min(best[name], time.perf_counter() - start)
    for name, seconds in best.items():
        _interleaved_seconds[(n, name)] = seconds

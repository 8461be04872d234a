"""The cost of the changed-file guard on the core of a route, against a build without it.

Every read of a matrix's rows is wrapped in an ``fstat`` before and after (see
``rust/matrix_file.rs``, ``check_unchanged``); a route reads rows in three calls. This bench
runs ``_toolgate.route`` (scan, BM25, fusion, gate, top-k; no embedding) at N = 10,000 with
this build and with a build of the commit before the guard, loaded side by side in one
process, on the same files. Set ``TOOLGATE_BASELINE_EXT`` to that build's
``_toolgate.abi3.so``; without it the bench is skipped:

    git worktree add /tmp/base <commit before the guard> && (cd /tmp/base && make setup)
    TOOLGATE_BASELINE_EXT=/tmp/base/python/toolgate/_toolgate.abi3.so \\
        .venv/bin/python -m pytest benches/bench_guard.py -q -p no:cacheprovider \\
        -o python_files='bench_*.py'
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from toolgate import _toolgate

if TYPE_CHECKING:
    from benches.conftest import RatioTable

N, DIM = 10_000, 384
GROUP = f"route core, N = {N:,}"


def _baseline() -> ModuleType:
    path = os.environ.get("TOOLGATE_BASELINE_EXT")
    if not path:
        pytest.skip("TOOLGATE_BASELINE_EXT is not set (see the module docstring)")
    # The module's init symbol is PyInit__toolgate: the last part of the name must match.
    loader = importlib.machinery.ExtensionFileLoader("baseline._toolgate", path)
    spec = importlib.util.spec_from_file_location("baseline._toolgate", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, np.ndarray]:
    rng = np.random.default_rng(0)
    directory = tmp_path_factory.mktemp("guard")
    _toolgate.Index.build(
        directory / "m.tgm", rng.standard_normal((N, DIM)).astype(np.float32), dtype="int8"
    )
    words = ["issue", "file", "email", "weather", "deploy", "invoice", "search", "user"]
    docs = [
        {"name": f"tool_{i}", "server": "s", "description": " ".join(rng.choice(words, 6))}
        for i in range(N)
    ]
    _toolgate.Bm25.build(docs).save(directory / "b.tgb")
    query = rng.standard_normal(DIM).astype(np.float32)
    return directory / "m.tgm", directory / "b.tgb", query


@pytest.mark.benchmark(group=GROUP)
@pytest.mark.parametrize("build", ["this build (guarded)", "unguarded build"])
def test_route_core(
    benchmark: BenchmarkFixture,
    ratio_table: RatioTable,
    files: tuple[Path, Path, np.ndarray],
    build: str,
) -> None:
    ext = _toolgate if build.startswith("this") else _baseline()
    matrix, bm25_path, query = files
    index, bm25 = ext.Index.open(matrix), ext.Bm25.load(bm25_path)

    def route() -> object:
        return ext.route(
            index, bm25, query, "open an issue about the email file",
            alpha=0.65, method="minmax", top=100, k=8,
        )  # fmt: skip

    benchmark.pedantic(route, rounds=300, iterations=5, warmup_rounds=20)
    ratio_table.record(GROUP, build, benchmark.stats.stats.min)

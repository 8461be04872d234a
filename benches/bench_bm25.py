"""BM25, name look-ups, index loading and fusion at N = 10,000 real tools.

The corpus is the first 10,000 tools of the Docker and mcpm MCP registries, the BFCL tools and
GitHub's MCP server (``../shared/data/catalogs`` and ``eval``). Each BM25 benchmark runs the
same 16 queries; the report gives microseconds per query and the ratio to toolgate's
``Bm25.scores`` for two peers a user would otherwise write: BM25 over per-term numpy postings
arrays, and the per-term Python scan that ``rank_bm25``'s ``get_scores`` performs.

    .venv/bin/python -m pytest benches/bench_bm25.py -q -p no:cacheprovider
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from toolgate._toolgate import Bm25, SchemaCache, fuse

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
N_TOOLS = 10_000
QUERIES = [
    "send an sms message to a phone number",
    "list open pull requests in a github repository",
    "query the postgres database with sql",
    "take a screenshot of a web page",
    "create a calendar event for tomorrow",
    "upload a file to an s3 bucket",
    "search slack messages in a channel",
    "get the current weather forecast",
    "call get_weather for Paris",
    "translate text to french",
    "find issues assigned to me in jira",
    "restart a kubernetes deployment",
    "summarise the latest news about AI",
    "convert currency from usd to eur",
    "read a notion page",
    "delete a docker container",
]
TARGET_SECONDS = 0.3

_best: dict[str, float] = {}


def _tool_doc(tool: dict[str, Any], server: str) -> dict[str, str]:
    props = (tool.get("inputSchema") or {}).get("properties") or {}
    params = " ".join(
        f"{name} {spec.get('description', '') if isinstance(spec, dict) else ''}"
        for name, spec in props.items()
    )
    return {
        "name": tool["name"],
        "description": tool.get("description") or "",
        "param_text": params,
        "server": server,
    }


def _load_docs() -> list[dict[str, str]]:
    docs: list[dict[str, str]] = []
    for path in [
        DATA / "catalogs" / "docker-mcp-registry.jsonl",
        DATA / "catalogs" / "mcpm-registry.jsonl",
        DATA / "eval" / "bfcl-single-turn" / "tools.jsonl",
    ]:
        if not path.exists():
            pytest.skip(f"{path} not present")
        with path.open(encoding="utf-8") as fh:
            docs += [_tool_doc(t, t.get("server", "")) for t in map(json.loads, fh)]
    github = DATA / "catalogs" / "github-mcp-server.tools-list.json"
    if github.exists():
        docs += [_tool_doc(t, "github") for t in json.loads(github.read_text())["tools"]]
    return docs[:N_TOOLS]


@pytest.fixture(scope="module")
def docs() -> list[dict[str, str]]:
    return _load_docs()


@pytest.fixture(scope="module")
def index(docs: list[dict[str, str]]) -> Bm25:
    return Bm25.build(docs)


_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class NumpyPostingsBm25:
    """BM25 over per-term numpy arrays of rows and precomputed weights: the fast pure-Python
    peer (one vectorised add per query term)."""

    def __init__(self, docs: list[dict[str, str]], k1: float = 1.2, b: float = 0.75) -> None:
        counts = [Counter(_words(" ".join(d.values()))) for d in docs]
        lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
        norms = k1 * (1 - b + b * lengths / max(lengths.mean(), 1e-9))
        postings: dict[str, list[tuple[int, int]]] = {}
        for row, c in enumerate(counts):
            for term, tf in c.items():
                postings.setdefault(term, []).append((row, tf))
        n = len(docs)
        self.n = n
        self.terms: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}
        for term, plist in postings.items():
            rows = np.array([r for r, _ in plist])
            freqs = np.array([t for _, t in plist], dtype=np.float64)
            idf = math.log(1 + (n - len(plist) + 0.5) / (len(plist) + 0.5))
            weights = idf * freqs * (k1 + 1) / (freqs + norms[rows])
            self.terms[term] = (rows, weights.astype(np.float32))

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        out = np.zeros(self.n, dtype=np.float32)
        for term in set(_words(query)):
            if term in self.terms:
                rows, weights = self.terms[term]
                out[rows] += weights
        return out


class PerTermScanBm25:
    """The algorithm of ``rank_bm25.BM25Okapi.get_scores``: per query term, one Python pass
    over every document's term-frequency dict."""

    def __init__(self, docs: list[dict[str, str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.freqs = [Counter(_words(" ".join(d.values()))) for d in docs]
        self.lengths = np.array([sum(c.values()) for c in self.freqs], dtype=np.float64)
        self.avg = self.lengths.mean()
        df = Counter(term for c in self.freqs for term in c)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self.k1, self.b = k1, b

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        out = np.zeros(len(self.freqs))
        norm = self.k1 * (1 - self.b + self.b * self.lengths / self.avg)
        for term in _words(query):
            tf = np.array([c.get(term, 0) for c in self.freqs], dtype=np.float64)
            out += self.idf.get(term, 0.0) * tf * (self.k1 + 1) / (tf + norm)
        return out


def run(benchmark: BenchmarkFixture, name: str, fn: Callable[[], object], calls: int) -> None:
    """Benchmarks `fn` (which makes `calls` calls) and records the best time per call."""
    benchmark.group = "bm25 N=10,000"
    start = time.perf_counter()
    fn()
    one = time.perf_counter() - start
    rounds = int(min(200, max(3, TARGET_SECONDS / max(one, 1e-6))))
    benchmark.pedantic(fn, rounds=rounds, warmup_rounds=1)  # type: ignore[no-untyped-call]
    stats = benchmark.stats
    assert stats is not None
    _best[name] = stats.stats.min / calls


@pytest.fixture(scope="module", autouse=True)
def ratio_report(request: pytest.FixtureRequest) -> Iterator[None]:
    """Prints microseconds per call, and each BM25 peer's time relative to toolgate's."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not _best:
        return
    ours = _best.get("toolgate Bm25.scores")
    lines = ["", f"BM25 at N = {N_TOOLS:,} real tools (best of rounds, per call)"]
    for name, seconds in sorted(_best.items(), key=lambda kv: kv[1]):
        ratio = f"{seconds / ours:8.1f}x toolgate scores" if ours and "BM25" in name else ""
        lines.append(f"  {name:<40} {seconds * 1e6:12.1f} us  {ratio}")
    # Module teardown runs inside the last test's output capture; print past it.
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        for line in lines:
            reporter.write_line(line)


def test_toolgate_scores(benchmark: BenchmarkFixture, index: Bm25) -> None:
    run(benchmark, "toolgate Bm25.scores", lambda: [index.scores(q) for q in QUERIES], len(QUERIES))


def test_numpy_postings_peer(benchmark: BenchmarkFixture, docs: list[dict[str, str]]) -> None:
    peer = NumpyPostingsBm25(docs)
    run(benchmark, "numpy postings BM25", lambda: [peer.scores(q) for q in QUERIES], len(QUERIES))


def test_per_term_scan_peer(benchmark: BenchmarkFixture, docs: list[dict[str, str]]) -> None:
    peer = PerTermScanBm25(docs)
    run(
        benchmark,
        "rank_bm25-style per-term scan BM25",
        lambda: [peer.scores(q) for q in QUERIES[:4]],
        4,
    )


def test_mentioned_names(benchmark: BenchmarkFixture, index: Bm25) -> None:
    run(
        benchmark,
        "toolgate mentioned_names",
        lambda: [index.mentioned_names(q) for q in QUERIES],
        len(QUERIES),
    )


def test_rows_named_and_name_terms(benchmark: BenchmarkFixture, index: Bm25) -> None:
    run(
        benchmark,
        "toolgate rows_named + name_has_term",
        lambda: (index.rows_named("create_issue"), index.name_has_term("slack")),
        1,
    )


def test_build(benchmark: BenchmarkFixture, docs: list[dict[str, str]]) -> None:
    run(benchmark, "toolgate Bm25.build (whole index)", lambda: Bm25.build(docs), 1)


def test_load(benchmark: BenchmarkFixture, index: Bm25, tmp_path: Path) -> None:
    path = tmp_path / "tools.bm25"
    index.save(path)
    run(benchmark, "toolgate Bm25.load (whole index)", lambda: Bm25.load(path), 1)


@pytest.mark.parametrize("method", ["minmax", "divmax", "rrf"])
def test_fuse(benchmark: BenchmarkFixture, index: Bm25, method: str) -> None:
    rng = np.random.default_rng(0)
    dense = rng.uniform(-0.1, 0.8, N_TOOLS).astype(np.float32)
    sparse = index.scores(QUERIES[0])
    run(
        benchmark,
        f"toolgate fuse {method}",
        lambda: fuse(dense, sparse, alpha=0.6, method=method),
        1,
    )


def test_cache_hit(benchmark: BenchmarkFixture) -> None:
    cache = SchemaCache(1000, 1 << 24)
    cache.put("github/create_issue", 1, "{}" * 500)
    run(
        benchmark,
        "toolgate SchemaCache.get (hit, 1 kB)",
        lambda: [cache.get("github/create_issue", 1) for _ in range(100)],
        100,
    )

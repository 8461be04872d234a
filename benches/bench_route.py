"""The whole route path at N = 120 ... 100,000 tools, side by side with the peers.

Catalogs are real tools from the shared registries (mcpm and Docker, ~7,200 valid tools, in a
seeded shuffle), topped up past that with :func:`benches.testbed.topup_tools`. Real tools are
embedded with the int8 model (through the embedding cache); top-up rows get mixes of real rows
(the scan costs the same whatever the vectors hold; embedding 90,000 texts would not).

One group per N, each entry timed on one thread:

* ``toolgate route``: ``Router.route(text)`` with the default configuration: int8 MiniLM query
  embedding, dense + BM25 fusion, gate, top-k. Each call takes the next of 2,000 distinct
  queries, more than the router's query cache holds, so every call embeds;
* ``toolgate route, query cached``: the same query every call (the embedding is memoised);
* ``toolgate route, no clause fusion``: ``toolgate route`` with ``clause_fusion=0``, for
  what fusing each long clause of a multi-intent query on its own costs;
* ``python pipeline``: what a user would write instead: ONNX Runtime fp32 embedding of the
  query (tokenizers + InferenceSession, no toolgate code) and a faiss ``IndexFlatIP`` search
  over the same tool matrix;
* ``faiss IndexFlatIP`` and ``numpy``: dense top-10 alone for a given query vector.

Ratios to faiss print at the end (see ``conftest.py``); ``python -m benches.report`` turns the
``--benchmark-json`` output into the cost-versus-N plot. Each group also records the tokens per
turn of B1, Tool Attention and toolgate at that N (``extra_info``):

    .venv/bin/python -m pytest benches/bench_route.py -q -p no:cacheprovider \\
        -o python_files='bench_*.py'
"""

from __future__ import annotations

import itertools
import json
import os
import random
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np
import numpy.typing as npt
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from benches import tokens as accounting
from benches.testbed import topup_tools
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import embedding_texts
from toolgate.catalog.tool import Tool
from toolgate.embedding.embedder import Embedder, TokenStates
from toolgate.embedding.onnx_export import SENTENCE_OUTPUT
from toolgate.promotion.pool import render_pool
from toolgate.promotion.promote import promote_tools
from toolgate.routing.router import Router

if TYPE_CHECKING:
    from benches.conftest import RatioTable

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REGISTRIES = ("mcpm-registry.jsonl", "docker-mcp-registry.jsonl")
# TOOLGATE_BENCH_N="120,1000" restricts the row counts (for a quick run).
ROW_COUNTS = tuple(
    int(n) for n in os.environ.get("TOOLGATE_BENCH_N", "120,1000,10000,100000").split(",")
)
QUERY_POOL = 2_000
TOKEN_QUERIES = 20
K = 10
# Seconds of timed calls per benchmark: enough for a stable minimum on a shared machine.
TARGET_SECONDS = 0.4
SYNTHETIC_PREFIX = "synthetic-"
METHODS = (
    "toolgate route",
    "toolgate route, query cached",
    "toolgate route, no clause fusion",
    "python pipeline",
    "faiss IndexFlatIP",
    "numpy",
)

faiss.omp_set_num_threads(1)


def real_tools() -> list[Tool]:
    """Every valid tool of the two registries, each id once, in a seeded shuffle."""
    tools: list[Tool] = []
    with warnings.catch_warnings():
        # Lenient loading warns about the registries' duplicate ids; they are skipped.
        warnings.simplefilter("ignore")
        for name in REGISTRIES:
            tools.extend(Catalog.load(DATA / "catalogs" / name, lenient=True).tools)
    # Both registries list some servers (meilisearch-mcp, ...): keep each id once.
    unique = list({tool.id: tool for tool in reversed(tools)}.values())[::-1]
    random.Random(42).shuffle(unique)
    return unique


def scale_catalog(n: int, real: Sequence[Tool]) -> Catalog:
    """``n`` tools: real ones first, synthetic top-ups past them."""
    chosen = list(real[:n])
    if len(chosen) < n:
        raw = [
            {"server": t.server, "name": t.name, "description": t.description,
             "inputSchema": t.input_schema}
            for t in real
        ]  # fmt: skip
        chosen.extend(Catalog.from_tools(topup_tools(raw, n - len(chosen))).tools)
    return Catalog(chosen)


def query_pool(count: int = QUERY_POOL) -> list[str]:
    """Distinct user queries from the BFCL and MetaTool sets (relevant and not)."""
    texts: dict[str, None] = {}
    for path in sorted((DATA / "eval").glob("*/queries*.jsonl")):
        with path.open(encoding="utf-8") as handle:
            for line in itertools.islice(handle, count):
                texts.setdefault(json.loads(line)["query"], None)
    pool = sorted(texts)
    random.Random(42).shuffle(pool)
    return pool[:count]


class TopUpEmbedder:
    """The int8 embedder, except that top-up tools get a mix of two real rows plus noise.

    Tool vectors of real tools come from the persistent embedding cache; queries are embedded
    live (no cache), as a router serving users would.
    """

    def __init__(self) -> None:
        self._tools = Embedder(precision="int8", cache=True, progress=False)
        self._queries = Embedder(precision="int8", cache=None, progress=False)

    @property
    def model_id(self) -> str:
        """The real model's id."""
        return self._queries.model_id

    @property
    def dim(self) -> int:
        """384."""
        return self._queries.dim

    def embed_tokens(self, text: str) -> TokenStates:
        """A query's vector and token states, for the router's clause vectors."""
        return self._queries.embed_tokens(text)

    def embed(self, texts: Sequence[str] | str) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``; a batch of tool texts may include top-ups."""
        batch = [texts] if isinstance(texts, str) else list(texts)
        synthetic = [i for i, t in enumerate(batch) if t.startswith(SYNTHETIC_PREFIX)]
        if not synthetic:
            embedder = self._queries if len(batch) == 1 else self._tools
            return embedder.embed(batch)
        skip = set(synthetic)
        real = [i for i in range(len(batch)) if i not in skip]
        out = np.empty((len(batch), self.dim), dtype=np.float32)
        vectors = self._tools.embed([batch[i] for i in real])
        out[real] = vectors
        rng = np.random.default_rng(len(batch))
        pick = rng.integers(0, len(real), size=(len(synthetic), 2))
        mixed = vectors[pick[:, 0]] + vectors[pick[:, 1]]
        mixed += rng.normal(0.0, 0.02, size=mixed.shape).astype(np.float32)
        out[synthetic] = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
        return out


class PlainPipeline:
    """A user's own pipeline: tokenizers + ONNX Runtime fp32 (one thread) + faiss."""

    def __init__(self, matrix: npt.NDArray[np.float32]) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped,unused-ignore]
        from tokenizers import Tokenizer

        from toolgate.embedding import models

        loaded = models.load("fp32")
        self.tokenizer = Tokenizer.from_str(loaded.tokenizer_json)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(256)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            loaded.onnx_bytes, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.flat = faiss.IndexFlatIP(matrix.shape[1])
        self.flat.add(matrix)

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        """The query's L2-normalised vector."""
        ids = np.asarray([self.tokenizer.encode(text).ids], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        feed = {i.name: feed[i.name].astype(_ORT_INT[i.type]) for i in self.session.get_inputs()}
        (vector,) = self.session.run([SENTENCE_OUTPUT], feed)
        row: npt.NDArray[np.float32] = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        row /= np.linalg.norm(row)
        return row

    def search(self, text: str) -> npt.NDArray[np.int64]:
        """Ids of the top-10 tools for ``text``."""
        _, ids = self.flat.search(self.embed(text), K)
        found: npt.NDArray[np.int64] = ids[0]
        return found


_ORT_INT = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


@dataclass
class Setup:
    """One N: its router, its matrix, the peers and the token figures."""

    n: int
    router: Router
    matrix: npt.NDArray[np.float32]
    pipeline: PlainPipeline
    tokens: dict[str, float]
    workdir: tempfile.TemporaryDirectory[str]


_current: list[Setup] = []
_shared: dict[str, Any] = {}


def _shared_inputs() -> tuple[list[Tool], TopUpEmbedder, list[str]]:
    if not _shared:
        _shared["real"] = real_tools()
        _shared["embedder"] = TopUpEmbedder()
        _shared["queries"] = query_pool()
    return _shared["real"], _shared["embedder"], _shared["queries"]


def setup_for(n: int) -> Setup:
    """Build (or reuse) everything for ``n`` tools; the previous N is dropped first."""
    if _current and _current[0].n == n:
        return _current[0]
    for old in _current:
        old.workdir.cleanup()
    _current.clear()
    real, embedder, queries = _shared_inputs()
    catalog = scale_catalog(n, real)
    workdir = tempfile.TemporaryDirectory(prefix=f"toolgate-bench-{n}-")
    router = Router.from_catalog(catalog, embedder=embedder, cache=False, path=workdir.name)  # type: ignore[arg-type]
    # The texts the router embedded, so the peers search the same vectors.
    matrix = np.ascontiguousarray(embedder.embed(embedding_texts(catalog)), dtype=np.float32)
    setup = Setup(n, router, matrix, PlainPipeline(matrix), token_figures(router, queries), workdir)
    _current.append(setup)
    return setup


def token_figures(router: Router, queries: Sequence[str]) -> dict[str, float]:
    """Mean cl100k tokens per turn (steady state) of B1, Tool Attention and toolgate."""
    catalog = router.catalog
    count = accounting.TokenCounter("cl100k_base")
    b1 = count.request(accounting.full_schema(catalog)).steady
    pool_tokens = count(render_pool(catalog, "full")[0] + "\n")
    attention = toolgate = 0.0
    sample = queries[:TOKEN_QUERIES]
    for text in sample:
        ranked = router.route(text, top_k=K, threshold=None, adaptive=False).ids
        attention += (
            pool_tokens + count.request(accounting.simple_retrieval(catalog, ranked)).steady
        )
        promotion = promote_tools(catalog, router.route(text), format="openai")
        toolgate += count.request(accounting.toolgate_default(promotion)).steady
    return {
        "B1 full schema": b1,
        "Tool Attention": attention / len(sample),
        "toolgate default": toolgate / len(sample),
    }


def _fresh_queries(queries: Sequence[str]) -> Iterator[str]:
    """One iterator for the whole run, past the queries the token figures routed (and so
    cached): within one N no query repeats until more than the query cache has gone by."""
    if "fresh" not in _shared:
        _shared["fresh"] = itertools.cycle(queries[TOKEN_QUERIES:])
    fresh: Iterator[str] = _shared["fresh"]
    return fresh


def _callables(setup: Setup, queries: Sequence[str]) -> dict[str, Callable[[], object]]:
    texts = _fresh_queries(queries)
    fixed = queries[0]
    vector = setup.pipeline.embed(fixed)
    flat, matrix, query = setup.pipeline.flat, setup.matrix, vector[0]

    def numpy_top10() -> object:
        scores = matrix @ query
        top = np.argpartition(-scores, K)[:K] if len(scores) > K else np.arange(len(scores))
        return top[np.argsort(-scores[top])]

    # What clause fusion costs: the same fresh queries, each long clause left unfused.
    unfused = setup.router.with_config(replace(setup.router.config, clause_fusion=0.0))
    return {
        "toolgate route": lambda: setup.router.route(next(texts)),
        "toolgate route, query cached": lambda: setup.router.route(fixed),
        "toolgate route, no clause fusion": lambda: unfused.route(next(texts)),
        "python pipeline": lambda: setup.pipeline.search(next(texts)),
        "faiss IndexFlatIP": lambda: flat.search(vector, K),
        "numpy": numpy_top10,
    }


# The top decorator varies fastest: every method runs at one N before the next N is built.
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n", ROW_COUNTS, ids=lambda n: f"N={n}")
def test_route(benchmark: BenchmarkFixture, ratio_table: RatioTable, n: int, method: str) -> None:
    """Time one method at one N."""
    setup = setup_for(n)
    _, _, queries = _shared_inputs()
    call = _callables(setup, queries)[method]
    call()
    rounds, iterations = _rounds(call)
    benchmark.group = f"route N={n}"
    benchmark.extra_info.update({"n": n, "method": method, "tokens_per_turn": setup.tokens})
    benchmark.pedantic(call, rounds=rounds, iterations=iterations, warmup_rounds=1)  # type: ignore[no-untyped-call]
    assert benchmark.stats is not None
    ratio_table.record(benchmark.group, method, benchmark.stats.stats.min)


def _rounds(call: Callable[[], object]) -> tuple[int, int]:
    """Rounds and iterations per round for about :data:`TARGET_SECONDS` of timed calls."""
    start = time.perf_counter()
    for _ in range(3):
        call()
    each = max((time.perf_counter() - start) / 3, 1e-7)
    iterations = max(1, int(2e-4 / each))  # rounds of at least 0.2 ms beat timer noise
    return max(5, min(500, int(TARGET_SECONDS / (each * iterations)))), iterations

"""Route speed at N = 10,000: a fresh query and a repeated one, the model run and the core
apart, against the route that ranked each clause by a core call of its own and against a
plain Python pipeline, all in one run:

    .venv/bin/python -m benches.route_speed
    .venv/bin/python -m benches.route_speed --route-only   # Router.route alone, any checkout

The catalog, the queries and the plain pipeline are those of ``benches/bench_route.py``
(real registry tools topped up to N, queries from the BFCL and MetaTool sets). Routers:

* ``toolgate route``: ``Router.route`` with the defaults; the core ranks each clause of a
  multi-intent query in the same call (``RouteOutcome.clauses``);
* ``per-clause calls``: the same saved router opened again (a query cache of its own), ranking
  no clause in its route, then one core call per clause (its first 16) as adaptive selection
  used to make them. Its clause rankings are checked equal to the core's first;
* ``python pipeline``: tokenizers + ONNX Runtime fp32 + faiss ``IndexFlatIP``, no toolgate.

"fresh" routes each query once (every call embeds); "repeated" routes queries already routed
(the embedding is memoised), and the one long multi-intent query ``bench_route`` repeats.
Each query goes to every method in turn, which method first turning from query to query, so
load on the machine and cold caches fall on all alike. The
model-run / core split is the route's own ``timings_ms`` (``embed``: tokenizer, model run,
clause pooling; ``core``: the core call and selection), p50 over the fresh queries; the model
run's own parts are timed apart on the same queries.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from benches.bench_route import PlainPipeline, TopUpEmbedder, query_pool, real_tools, scale_catalog
from toolgate import _toolgate
from toolgate.catalog.text import embedding_texts
from toolgate.embedding.clauses import clauses as clauses_of
from toolgate.routing.result import RouteResult
from toolgate.routing.router import Router
from toolgate.routing.state import State

N = 10_000
FRESH = 300
REPEATED = 200
# bench_route's repeated query: the pool's first, of eight clauses.
LONG_REPEATS = 200
# Most clauses the adapter ranked by calls of their own.
MAX_CLAUSES = 16


class PerClauseCalls:
    """A route whose core call ranks no clause, then one core call per clause of the query
    (its first 16), with the gate, scope, floor and forced rows of the route."""

    def __init__(self, router: Router) -> None:
        self.router = router.with_config(replace(router.config, clause_tools=0))
        self.config = router.config
        self.pipeline = self.router._pipeline

    def route(self, text: str) -> tuple[RouteResult, float]:
        """The route's result and the milliseconds of the clause calls."""
        result = self.router.route(text)
        start = time.perf_counter()
        self.clause_rankings(text)
        return result, (time.perf_counter() - start) * 1e3

    def clause_rankings(self, text: str) -> list[list[_toolgate.RoutedRow]]:
        """Each clause's ranking, one core call each."""
        pipeline, config = self.pipeline, self.config
        _, vectors = pipeline.query_vectors(text)
        texts = pipeline.query_vectors.clause_texts(text)
        flags = pipeline._vocabulary.flags(State.coerce(None))
        forced = pipeline._rows.with_pinned([])
        return [
            _toolgate.route(
                pipeline._index, pipeline._bm25, vector, clause,
                alpha=config.alpha, method=config.fusion, top=config.fusion_top,
                k=config.clause_tools, threshold=config.threshold, flags=flags, forced=forced,
                near_copy_cosine=config.near_copy_cosine, demoted=pipeline._addressing,
                demote_weight=config.addressing_weight,
            ).ranked
            for vector, clause in list(zip(vectors, texts, strict=True))[:MAX_CLAUSES]
        ]  # fmt: skip

    def core_rankings(self, text: str) -> list[list[_toolgate.RoutedRow]]:
        """Each clause's ranking as the core's route returns it."""
        pipeline, config = self.pipeline, self.config
        vector, vectors = pipeline.query_vectors(text)
        return _toolgate.route(
            pipeline._index, pipeline._bm25, vector, text,
            alpha=config.alpha, method=config.fusion, top=config.fusion_top, k=config.top_k,
            threshold=config.threshold, flags=pipeline._vocabulary.flags(State.coerce(None)),
            forced=pipeline._rows.with_pinned([]), clauses=vectors,
            clause_weight=config.clause_weight,
            clause_texts=pipeline.query_vectors.clause_texts(text),
            clause_fusion=config.clause_fusion, clause_k=config.clause_tools,
            near_copy_cosine=config.near_copy_cosine, demoted=pipeline._addressing,
            demote_weight=config.addressing_weight,
        ).clauses  # fmt: skip


@dataclass
class Times:
    """Milliseconds per call of one method, with the route's own split when it has one."""

    total: list[float] = field(default_factory=list)
    embed: list[float] = field(default_factory=list)
    core: list[float] = field(default_factory=list)

    def add(self, total: float, result: RouteResult | None = None, extra: float = 0.0) -> None:
        """One call: its wall time, and ``extra`` milliseconds of core work past the route."""
        self.total.append(total)
        if result is not None:
            self.embed.append(result.timings_ms.get("embed", 0.0))
            self.core.append(result.timings_ms.get("core", 0.0) + extra)


def p50(values: Sequence[float]) -> float:
    """The median, or NaN for none."""
    return statistics.median(values) if values else float("nan")


def timed(call: Callable[[], object]) -> tuple[object, float]:
    """``call()`` and its milliseconds."""
    start = time.perf_counter()
    out = call()
    return out, (time.perf_counter() - start) * 1e3


def interleaved_ms(
    routers: Mapping[Any, Router], texts: Sequence[str], rounds: int = 1
) -> dict[Any, list[float]]:
    """Milliseconds of each router's ``route`` for each of ``texts`` (``rounds`` times over),
    which router goes first turning with each text, so load on the machine and cold caches
    fall on all alike."""
    order = list(routers.items())
    times: dict[Any, list[float]] = {key: [] for key in routers}
    for _ in range(rounds):
        for turn, text in enumerate(texts):
            at = turn % len(order)
            for key, router in order[at:] + order[:at]:
                times[key].append(timed(partial(router.route, text))[1])
    return times


def percentiles(times: Mapping[Any, Sequence[float]], label: str = "") -> str:
    """One line per key of ``times``: its p50 and p90 milliseconds and how many routes."""
    return "\n".join(
        f"{label}{key}: p50 {statistics.median(ms):.3f} ms, "
        f"p90 {statistics.quantiles(ms, n=10)[-1]:.3f} ms ({len(ms)} routes)"
        for key, ms in times.items()
    )


def run_methods(
    router: Router, before: PerClauseCalls, plain: PlainPipeline | None, texts: Sequence[str]
) -> dict[str, Times]:
    """Each of ``texts`` through each method, the order turning with each text: a method run
    right after another's model run finds the caches as that one left them."""
    times = {"toolgate route": Times(), "per-clause calls": Times(), "python pipeline": Times()}

    def ours(text: str) -> None:
        result, ms = timed(lambda: router.route(text))
        times["toolgate route"].add(ms, result)  # type: ignore[arg-type]

    def theirs(text: str) -> None:
        (old, clause_ms), ms = timed(lambda: before.route(text))  # type: ignore[misc]
        times["per-clause calls"].add(ms, old, clause_ms)

    def plain_search(text: str) -> None:
        if plain is not None:
            times["python pipeline"].add(timed(lambda: plain.search(text))[1])

    methods = [ours, theirs, plain_search]
    for turn, text in enumerate(texts):
        for method in methods[turn % 3 :] + methods[: turn % 3]:
            method(text)
    return times


def model_parts(router: Router, texts: Sequence[str]) -> dict[str, float]:
    """p50 milliseconds of the parts of one query's embedding: tokenizer, model run, clause
    pooling."""
    embedder = router._pipeline.query_vectors.embedder._queries  # type: ignore[attr-defined]
    parts: dict[str, list[float]] = {"tokenizer": [], "model run": [], "clause pooling": []}
    for text in texts:
        encoding, ms = timed(lambda text=text: embedder._tokenizer.encode(text))
        parts["tokenizer"].append(ms)
        tokens, ms = timed(lambda text=text: embedder.embed_tokens(text))
        parts["model run"].append(ms - parts["tokenizer"][-1])
        parts["clause pooling"].append(timed(lambda t=tokens, s=text: clauses_of(t, s))[1])  # type: ignore[arg-type]
        del encoding
    return {name: p50(values) for name, values in parts.items()}


def checked(before: PerClauseCalls, texts: Sequence[str]) -> tuple[int, int]:
    """Of ``texts`` with clauses: how many, and for how many the core's clause rankings equal
    the per-clause calls' (rows, scores and copies)."""

    def rows(rankings: list[list[_toolgate.RoutedRow]]) -> list[list[tuple[object, ...]]]:
        return [[(r.row, r.fused, r.dense, r.bm25, r.copy_of) for r in c] for c in rankings]

    multi = [text for text in texts if len(before.pipeline.query_vectors.clause_texts(text))]
    same = sum(
        rows(before.core_rankings(text)) == rows(before.clause_rankings(text)) for text in multi
    )
    return len(multi), same


def report(name: str, times: dict[str, Times]) -> None:
    """One block of p50s with ratios to toolgate's."""
    ours = p50(times["toolgate route"].total)
    print(f"\n{name}: p50 ms (ratio of toolgate route to it)")
    for method, each in times.items():
        if each.total:
            ratio = ours / p50(each.total)
            split = ""
            if each.embed:
                split = f"   embed {p50(each.embed):6.2f}  core {p50(each.core):6.2f}"
            print(f"  {method:18s} {p50(each.total):7.2f}  ({ratio:.2f}x){split}")


def route_only(router: Router, queries: Sequence[str]) -> None:
    """``Router.route`` alone, fresh, repeated and the long query: what runs on a checkout
    whose core ranks no clause, to compare builds across runs."""

    def line(name: str, texts: Sequence[str]) -> None:
        times = Times()
        for text in texts:
            result, ms = timed(lambda text=text: router.route(text))
            times.add(ms, result)  # type: ignore[arg-type]
        print(f"  {name:10s} {p50(times.total):6.2f}  embed {p50(times.embed):5.2f}", end="")
        print(f"  core {p50(times.core):5.2f}")

    warm = queries[:REPEATED]
    for text in warm:
        router.route(text)
    print(f"N = {N:,}, toolgate route alone, p50 ms")
    line("fresh", queries[REPEATED : REPEATED + FRESH])
    line("repeated", warm)
    line("long", [queries[0]] * LONG_REPEATS)


def main() -> None:
    """Build the N = 10,000 router, check the clause rankings, time the methods."""
    real, embedder, queries = real_tools(), TopUpEmbedder(), query_pool()
    catalog = scale_catalog(N, real)
    with tempfile.TemporaryDirectory(prefix="toolgate-route-speed-") as workdir:
        router = Router.from_catalog(catalog, embedder=embedder, cache=False, path=workdir)  # type: ignore[arg-type]
        if "--route-only" in sys.argv[1:]:
            route_only(router, queries)
            return
        before = PerClauseCalls(Router.open(workdir, embedder=embedder))  # type: ignore[arg-type]
        matrix = np.ascontiguousarray(embedder.embed(embedding_texts(catalog)), np.float32)
        plain = PlainPipeline(matrix)
        warm, fresh = queries[:REPEATED], queries[REPEATED : REPEATED + FRESH]
        run_methods(router, before, plain, warm)  # loads, and memoises the repeated queries
        multi, same = checked(before, warm)
        print(f"N = {N:,}; clause rankings equal to the per-clause calls': {same} of {multi}")
        print(f"queries with clauses: {multi} of {len(warm)}")
        report(f"fresh ({FRESH} queries, each embedded)", run_methods(router, before, plain, fresh))
        report(f"repeated ({REPEATED} queries)", run_methods(router, before, None, warm))
        long = [queries[0]] * LONG_REPEATS
        clauses = len(before.pipeline.query_vectors.clause_texts(queries[0]))
        report(f"repeated, one query of {clauses} clauses", run_methods(router, before, None, long))
        parts = model_parts(router, fresh)
        shown = ", ".join(f"{name} {ms:.2f}" for name, ms in parts.items())
        print(f"\nembedding a fresh query, p50 ms: {shown}")


if __name__ == "__main__":
    main()

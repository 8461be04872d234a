"""What a learned memory costs a route: ``route`` p50 at N = 10,000 tools, without a memory
and with one of 10,000 learned rows, on one thread with the int8 model.

The tool rows are random unit vectors (the scan costs the same whatever they hold; embedding
10,000 texts would take minutes) over the tools of :func:`benches.testbed.topup_tools`; the
learned rows are the vectors of real queries' neighbours, spread over the tools. Each route
embeds a query of its own (more distinct queries than the router's query cache holds)::

    .venv/bin/python -m benches.learned
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benches.testbed import table2_tools, topup_tools
from toolgate.catalog.catalog import Catalog
from toolgate.routing.build import build_parts, default_embedder
from toolgate.routing.config import RouterConfig
from toolgate.routing.router import Router

N_TOOLS = 10_000
N_LEARNED = 10_000
ROUTES = 400


def _router() -> Router:
    real = table2_tools()
    catalog = Catalog.from_tools(topup_tools(real, N_TOOLS - len(real)) + real)
    config = RouterConfig(precision="int8")
    embedder = default_embedder(config.precision)
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((len(catalog), embedder.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    parts = build_parts(catalog, vectors, config, embedder.model_id, None)
    return Router(parts, catalog=catalog, embedder=embedder)


def _timed(router: Router, query: str) -> float:
    start = time.perf_counter()
    router.route(query)
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    router = _router()
    router.route("warm up the model")
    memory = router.learn(":memory:")
    rng = np.random.default_rng(11)
    learned = rng.standard_normal((N_LEARNED, router._parts.index.dim)).astype(np.float32)
    # A tenth near the queries' own vectors, so the vote has rows above its floor to group.
    anchor, _ = router._pipeline.query_vectors("find the sales report")
    learned /= np.linalg.norm(learned, axis=1, keepdims=True)
    learned[: N_LEARNED // 10] = anchor + 0.3 * learned[: N_LEARNED // 10]
    memory._rows.push(
        np.ascontiguousarray(learned / np.linalg.norm(learned, axis=1, keepdims=True)),
        rng.integers(0, len(router), N_LEARNED).astype(np.uint32),
        np.ones(N_LEARNED, np.float32),
    )
    without, with_memory = [], []
    # Interleaved, each query routed both ways, so a busy machine weighs on both alike.
    for n in range(ROUTES):
        for memory_on, times, tag in ((None, without, "a"), (memory, with_memory, "b")):
            router._pipeline.learning.memory = memory_on  # each text once: every route embeds
            times.append(_timed(router, f"find the sales report number {n} ({tag})"))
    p50, p50_memory = statistics.median(without), statistics.median(with_memory)
    print(
        f"route p50 at N={len(router)}: {p50:.3f} ms without a memory, {p50_memory:.3f} ms "
        f"with {len(memory)} learned rows: ratio {p50_memory / p50:.2f}"
    )


if __name__ == "__main__":
    main()

"""What saving schema token counts with a router costs at build time and saves on the first
adaptive route after ``Router.open``, at N = 10,000 tools (real registry tools, topped up).

The route before the change is reproduced by removing the counts from the saved manifest (a
router saved before them): its first adaptive route loads the catalog to count. The model is
loaded before timing, so both routes time the query embedding, the core and selection only:

    .venv/bin/python -m benches.schema_tokens
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benches.bench_route import real_tools, scale_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.routing.build import build_parts
from toolgate.routing.config import RouterConfig
from toolgate.routing.outline import schema_token_rows
from toolgate.routing.router import Router
from toolgate.routing.store import MANIFEST, manifest_checksum

N = 10_000
QUERY = "create an issue in the repository about the failing build"
ROUNDS = 3


def _first_route_ms(directory: Path, embedder: Embedder) -> float:
    """Median over fresh opens of the first adaptive route's time, in milliseconds."""
    times = []
    for _ in range(ROUNDS):
        router = Router.open(directory, embedder=embedder)
        start = time.perf_counter()
        router.route(QUERY, adaptive=True)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _without_counts(directory: Path) -> None:
    path = directory / MANIFEST
    manifest = json.loads(path.read_text())
    del manifest["schema_tokens"]
    manifest["checksum"] = manifest_checksum(manifest)
    path.write_text(json.dumps(manifest))


def main() -> None:
    """Print the counting time at build and the first route after open, without and with."""
    real = real_tools()
    catalog = scale_catalog(N, real)
    start = time.perf_counter()
    schema_token_rows(catalog)
    counting = time.perf_counter() - start
    embedder = Embedder(precision="int8", cache=None, progress=False)
    embedder.embed(["warm the model up"])
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(N, embedder.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        config = RouterConfig()
        fresh = scale_catalog(N, real)  # no definition cached by the count above
        start = time.perf_counter()
        build_parts(fresh, vectors, config, embedder.model_id, directory, embedder.embed)
        build = time.perf_counter() - start
        with_counts = _first_route_ms(directory, embedder)
        _without_counts(directory)
        without = _first_route_ms(directory, embedder)
    print(f"N = {N:,}: counting schema tokens {counting:.2f} s of a {build:.2f} s build_parts")
    print(f"first adaptive route after open: {without:.1f} ms without saved counts, "
          f"{with_counts:.1f} ms with them ({without / with_counts:.1f}x)")  # fmt: skip


if __name__ == "__main__":
    main()

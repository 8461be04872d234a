"""Routing quality on a hand-written set of multi-tool MCP tasks (``data/mcp_tasks.json``).

Each task is one request needing 2 to 5 tools of one or two servers of the Docker MCP registry
(``../shared/data/catalogs/docker-mcp-registry.jsonl``); the catalog is every registry tool of
the set's servers. Three rankings, as in :mod:`benches.quality`, each with ``top_k=10``:
BM25 alone, dense alone and the shipped :class:`RouterConfig` (:data:`benches.quality.RANKINGS`).
Figures are :func:`toolgate.evaluation.evaluate.evaluate`'s.

``python -m benches.mcp_tasks`` prints them as JSON.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from benches import quality
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.evaluation.evaluate import LabelledQuery, evaluate
from toolgate.routing.router import RouterConfig

#: The set's name in the results tables.
NAME = "mcp tasks"
TASKS = Path(__file__).resolve().parent / "data" / "mcp_tasks.json"
REGISTRY = Path(__file__).resolve().parents[2] / "shared/data/catalogs/docker-mcp-registry.jsonl"


def registry_tools(servers: list[str], registry: Path = REGISTRY) -> list[dict[str, Any]]:
    """Every tool of ``servers`` in the registry, in registry order.

    Raises :class:`ValueError` naming the servers the registry does not hold: a renamed or
    dropped server would otherwise shrink the catalog without a word.
    """
    wanted = set(servers)
    with registry.open(encoding="utf-8") as handle:
        tools = [json.loads(line) for line in handle if line.strip()]
    kept = [tool for tool in tools if tool["server"] in wanted]
    missing = sorted(wanted - {tool["server"] for tool in kept})
    if missing:
        raise ValueError(f"{registry} holds no tool of the servers {', '.join(missing)}")
    return kept


def load(
    tasks: Path = TASKS, registry: Path = REGISTRY
) -> tuple[list[dict[str, Any]], list[LabelledQuery]]:
    """The set's catalog (registry tools of its servers) and its tasks as labelled queries.

    Raises :class:`ValueError` naming every task whose gold names a tool outside the catalog,
    since such a task could never be complete and would lower every figure silently.
    """
    document = json.loads(tasks.read_text(encoding="utf-8"))
    tools = registry_tools(document["servers"], registry)
    ids = {f"{tool['server']}/{tool['name']}" for tool in tools}
    queries = [
        LabelledQuery(task["qid"], task["query"], tuple(task["gold"]), ())
        for task in document["tasks"]
    ]
    unknown = [
        f"{query.qid}: {tool_id}"
        for query in queries
        for tool_id in query.gold
        if tool_id not in ids
    ]
    if unknown:
        raise ValueError(f"gold tools not in the catalog: {'; '.join(unknown)}")
    return tools, queries


def whole_registry(registry: Path = REGISTRY) -> tuple[Catalog, list[LabelledQuery]]:
    """Every tool of the registry as one catalog (its few unreadable tools skipped, repeated
    names kept under a renamed server) and the set's tasks: the tasks' servers among many."""
    _, queries = load(registry=registry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one warning per skipped tool
        catalog = Catalog.load(registry, lenient=True, rename_duplicates=True)
    return catalog, queries


def measure(
    tools: list[dict[str, Any]],
    queries: list[LabelledQuery],
    embedder: Embedder | None = None,
    *,
    cache: bool = True,
) -> dict[str, dict[str, Any]]:
    """``evaluate``'s figures per ranking of :data:`benches.quality.RANKINGS`, each built on
    its own (:func:`benches.quality.routers_for`, ``cache`` as there), as the report builds
    them."""
    embedder = embedder or Embedder(precision=RouterConfig().precision, progress=False)
    routers = quality.routers_for(Catalog.from_tools(tools), embedder, cache=cache)
    return {
        name: evaluate(router, queries, top_k=quality.TOP_K) for name, router in routers.items()
    }


def main() -> None:
    """Print the set's size and each configuration's figures as JSON."""
    tools, queries = load()
    report = {"tools": len(tools), "tasks": len(queries), "top_k": quality.TOP_K}
    print(json.dumps({**report, "configs": measure(tools, queries)}, indent=2))


if __name__ == "__main__":
    main()

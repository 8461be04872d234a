"""Routing quality on a labelled query set: the engine behind ``toolgate eval``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolgate.errors import InvalidInputError
from toolgate.metrics import QueryOutcome, RoutingMetrics

if TYPE_CHECKING:
    from toolgate.router import Router

__all__ = ["LabelledQuery", "evaluate", "load_queries", "progress_bar"]


@dataclass(frozen=True)
class LabelledQuery:
    """A query and the tools that answer it (empty: no tool in the catalog fits)."""

    qid: str
    query: str
    gold: tuple[str, ...]


def load_queries(path: str | Path) -> list[LabelledQuery]:
    """Read a queries JSONL file (``{"qid", "query", "gold": [...]}`` per line).

    Every malformed line is reported at once, with its line number.
    """
    problems: list[str] = []
    queries: list[LabelledQuery] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                query, gold = row["query"], row.get("gold", [])
                if not isinstance(query, str) or not isinstance(gold, list):
                    raise TypeError("'query' must be a string and 'gold' a list")
                queries.append(
                    LabelledQuery(str(row.get("qid", number)), query, tuple(map(str, gold)))
                )
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                problems.append(f"line {number}: {exc}")
    if problems:
        shown = "; ".join(problems[:20])
        more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        raise InvalidInputError(f"{path}: {len(problems)} malformed queries: {shown}{more}")
    return queries


def progress_bar(
    items: Sequence[LabelledQuery], enabled: bool, desc: str
) -> Iterator[LabelledQuery]:
    """``items``, behind a tqdm bar on stderr when ``enabled``."""
    if not enabled:
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=desc, unit="q", leave=False)


def evaluate(
    router: Router,
    queries: list[LabelledQuery],
    *,
    top_k: int = 10,
    progress: bool = False,
) -> dict[str, float | int]:
    """Route every query and summarise quality and latency (see :class:`RoutingMetrics`).

    ``route_ms`` is wall time of the whole ``route`` call, embedding included.
    """
    metrics = RoutingMetrics()
    for item in progress_bar(queries, progress, "routing"):
        start = time.perf_counter()
        result = router.route(item.query, top_k=top_k)
        elapsed = (time.perf_counter() - start) * 1000
        metrics.add(QueryOutcome(item.gold, tuple(result.ids), elapsed))
    return metrics.summary()

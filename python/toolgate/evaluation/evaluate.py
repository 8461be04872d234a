"""Routing quality on a labelled query set: the engine behind ``toolgate eval``."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgate.arguments import check_count, check_flag, file_path, shown
from toolgate.errors import InvalidInputError
from toolgate.evaluation.metrics import QueryOutcome, RoutingMetrics, distinct_gold
from toolgate.json_limits import (
    JsonLimitError,
    json_problem,
    loads,
    not_utf8_problem,
    one_json_document,
    read_bounded,
    without_bom,
)
from toolgate.routing.history import history_texts
from toolgate.routing.query import parse_query, trimmed

if TYPE_CHECKING:
    from toolgate.catalog.catalog import Catalog
    from toolgate.routing.router import Router

__all__ = [
    "LabelledQuery",
    "evaluate",
    "labelled_queries",
    "load_queries",
    "progress_bar",
    "unmatched_gold",
    "unmatched_summary",
]

# Far past any labelled set (the largest shared one is a few megabytes), and a bound on what
# a wrong path makes the reader allocate.
_MAX_QUERIES_BYTES = 1 << 30


@dataclass(frozen=True)
class LabelledQuery:
    """A query and the tools that answer it (empty: no tool in the catalog fits), with the
    conversation before it (``history``, as :meth:`Router.route` takes it; empty: a first
    turn)."""

    qid: str
    query: str
    gold: tuple[str, ...]
    history: tuple[str | Mapping[str, object], ...] = field(default=())

    def __post_init__(self) -> None:
        # A gold string would be read letter by letter, each a tool no catalog has: every
        # figure 0, silently. Lists are taken, as JSON gives them, and kept as tuples.
        if not isinstance(self.query, str):
            raise InvalidInputError(f"query must be a string, got {shown(self.query)}")
        for name in ("gold", "history"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)):
                raise InvalidInputError(
                    f"query {self.qid!r}: {name} must be a tuple or list, got {shown(value)}"
                )
            object.__setattr__(self, name, tuple(value))
        for position, entry in enumerate(self.gold):
            if not isinstance(entry, str):
                raise InvalidInputError(
                    f"query {self.qid!r}: gold[{position}] must be a tool name or id, got "
                    f"{shown(entry)}"
                )


def load_queries(path: str | Path) -> list[LabelledQuery]:
    """Read a queries JSONL file (``{"qid", "query", "gold": [...]}`` per line, and an
    optional ``"history"``: the turns before the query, strings or message objects).

    Every malformed line is reported at once, with its line number; a file that cannot be read
    or holds no query is an :class:`InvalidInputError` too.
    """
    problems: list[str] = []
    queries: list[LabelledQuery] = []
    lines = _read_lines(file_path("path", path))
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            queries.append(_parse_line(raw, number))
        except _BadLine as exc:
            problems.append(f"line {number}: {exc}")
    if problems:
        _check_not_one_document(path, lines)
        shown = "; ".join(problems[:20])
        more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        raise InvalidInputError(f"{path}: {len(problems)} malformed queries: {shown}{more}")
    if not queries:
        raise InvalidInputError(f"no queries in {path}")
    return queries


def _check_not_one_document(path: str | Path, lines: list[bytes]) -> None:
    """Say so when a file whose lines do not read holds one JSON array (or an object printed
    over several lines): each of its lines is a problem, and none of them says what is."""
    document = one_json_document(b"\n".join(lines))
    if document is None:  # JSON lines, some of them bad: each is named
        return
    kind = "array" if isinstance(document, list) else "object"
    raise InvalidInputError(
        f"{path} holds one JSON {kind}, not JSON lines: write one query object per line "
        "(jq -c '.[]' turns an array into them)"
    )


class _BadLine(Exception):
    """One line's problem, collected by :func:`load_queries` with its line number."""


def _read_lines(path: Path) -> list[bytes]:
    # Bytes first and each line decoded on its own, so a bad byte is reported at its line.
    try:
        data = without_bom(read_bounded(path, _MAX_QUERIES_BYTES))
    except FileNotFoundError:
        raise InvalidInputError(f"queries file not found: {path}") from None
    except JsonLimitError as exc:  # a pipe, a device, a directory, or too large
        raise InvalidInputError(f"cannot read queries file: {exc}") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read queries file {path}: {exc.strerror}") from None
    not_text = not_utf8_problem(path, data)
    if not_text is not None:
        raise InvalidInputError(f"cannot read queries file: {not_text}")
    return data.splitlines()


def _parse_line(raw: bytes, number: int) -> LabelledQuery:
    row = _json_object(raw)
    if "query" not in row:
        raise _BadLine("missing key 'query'")
    query = row["query"]
    if not isinstance(query, str):
        raise _BadLine(f"'query' must be a string, got {type(query).__name__}")
    if not trimmed(query):
        raise _BadLine("query is empty")
    gold, history = _gold(row.get("gold", [])), _history(row.get("history", []))
    try:
        # What route() refuses (a "select:" naming no tool, a turn it cannot read) is said
        # here, with the line, rather than in the middle of the run.
        parse_query(query)
        history_texts(history, len(history))
    except InvalidInputError as exc:
        raise _BadLine(str(exc)) from None
    return LabelledQuery(str(row.get("qid", number)), query, gold, history)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        row = loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _BadLine(
            f"not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})"
        ) from None
    except ValueError as exc:  # also nesting too deep to parse, or a 5,000-digit number
        raise _BadLine(f"invalid JSON: {exc}") from None
    if not isinstance(row, dict):
        raise _BadLine(f"expected a JSON object, got {type(row).__name__}")
    # Nesting the parser takes can still be past what route() walks (tool results in
    # tool results).
    problem = json_problem(row, strict=False)
    if problem:
        raise _BadLine(problem)
    return row


def _gold(gold: object) -> tuple[str, ...]:
    if not isinstance(gold, list):
        raise _BadLine(f"'gold' must be a list, got {type(gold).__name__}")
    for position, entry in enumerate(gold):
        if not isinstance(entry, str):
            # As text a null would pass for the name 'None'.
            raise _BadLine(f"gold[{position}] must be a string, got {type(entry).__name__}")
    return tuple(gold)


def _history(history: object) -> tuple[str | Mapping[str, object], ...]:
    if not isinstance(history, list):
        raise _BadLine(f"'history' must be a list, got {type(history).__name__}")
    for position, turn in enumerate(history):
        if not isinstance(turn, (str, dict)):
            raise _BadLine(
                f"history[{position}] must be a string or an object, got {type(turn).__name__}"
            )
    return tuple(history)


def labelled_queries(queries: object, name: str = "queries") -> list[LabelledQuery]:
    """``queries`` as a non-empty list of :class:`LabelledQuery`, or an
    :class:`InvalidInputError` naming the argument ``name``: a path or a list of dicts fails
    far from the call otherwise, and a generator read twice loses its first queries."""
    if isinstance(queries, (str, bytes, Path, Mapping)) or not isinstance(queries, Iterable):
        raise InvalidInputError(
            f"{name} must be a list of LabelledQuery (load_queries(path) reads a file), got "
            f"{shown(queries)}"
        )
    listed = list(queries)
    for position, item in enumerate(listed):
        if not isinstance(item, LabelledQuery):
            raise InvalidInputError(
                f"{name}[{position}] must be a LabelledQuery, got {type(item).__name__}"
            )
    if not listed:
        raise InvalidInputError(f"{name} is empty: no query to route")
    return listed


def unmatched_gold(catalog: Catalog, queries: Sequence[LabelledQuery]) -> list[tuple[str, str]]:
    """``(qid, entry)`` for every gold entry that is neither the id nor the name of a tool of
    ``catalog``: its query can never be complete (a misspelt name, or a tool skipped as
    invalid when the catalog was loaded)."""
    known = {tool.id for tool in catalog} | {tool.name for tool in catalog}
    return [(item.qid, entry) for item in queries for entry in item.gold if entry not in known]


def unmatched_summary(catalog: Catalog, queries: Sequence[LabelledQuery]) -> tuple[int, str]:
    """How many gold entries of ``queries`` name no tool of ``catalog``, and the first five
    of them (``qid: 'entry'``) for a message."""
    unmatched = unmatched_gold(catalog, queries)
    shown = ", ".join(f"{qid}: {entry!r}" for qid, entry in unmatched[:5])
    more = f" and {len(unmatched) - 5} more" if len(unmatched) > 5 else ""
    return len(unmatched), shown + more


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
) -> dict[str, Any]:
    """Route every query and summarise quality and latency (see :class:`RoutingMetrics`).

    The ranking is judged on the top ``top_k`` (adaptive selection off, so the figures
    measure ranking alone); ``complete@default`` and ``tools@default`` judge what the router's
    default selection shows (adaptive, under its configured ceiling). ``route_ms`` is wall
    time of the ranking's ``route`` call, embedding included. Gold names are matched against
    the routed tools' real names, read from ``router.catalog`` (which loads an opened
    router's catalog), and gold entries that accept the same tools count once
    (:func:`~toolgate.evaluation.metrics.distinct_gold`). ``irrelevant_rejected`` is the
    share of queries with empty gold that the router said need no tool (or routed nothing),
    ``false_rejected`` that of the others.

    Queries with a ``history`` are routed with it. When any has one, the report adds
    ``without_history`` (the ranking figures of every query routed without its history) and
    ``later_turns`` (the figures of the queries that have a history, with it, and under its
    own ``without_history`` without it): what blending the conversation in is worth.

    Arguments are checked first (as ``toolgate eval`` checks its options): ``queries`` a
    non-empty list of :class:`LabelledQuery`, ``top_k`` an integer of at least 1.
    """
    queries = labelled_queries(queries)
    check_count("top_k", top_k, minimum=1)
    check_flag("progress", progress)
    metrics = RoutingMetrics()
    plain, later, later_plain = RoutingMetrics(), RoutingMetrics(), RoutingMetrics()
    with_history = any(item.history for item in queries)
    for item in progress_bar(queries, progress, "routing"):
        history = list(item.history) or None
        start = time.perf_counter()
        result = router.route(item.query, top_k=top_k, adaptive=False, history=history)
        elapsed = (time.perf_counter() - start) * 1000
        shown = tuple(router.route(item.query, history=history).ids)
        ids = tuple(result.ids)
        gold = distinct_gold(item.gold, router.catalog)
        outcome = QueryOutcome(
            gold, ids, elapsed, _names(router, ids), shown, _names(router, shown), result.no_tool
        )
        metrics.add(outcome)
        if not with_history:
            continue
        if item.history:
            later.add(outcome)
            start = time.perf_counter()
            alone = tuple(router.route(item.query, top_k=top_k, adaptive=False).ids)
            elapsed = (time.perf_counter() - start) * 1000
            outcome = QueryOutcome(gold, alone, elapsed, _names(router, alone))
            later_plain.add(outcome)
        plain.add(outcome)
    summary: dict[str, Any] = dict(metrics.summary())
    if with_history:
        summary["without_history"] = _ranking(plain.summary())
        summary["later_turns"] = {
            **_ranking(later.summary()),
            "without_history": _ranking(later_plain.summary()),
        }
    return summary


# The figures of a ranking, apart from latency and what the default selection shows.
_RANKING_KEYS = ("queries", "recall@5", "recall@10", "complete@5", "complete@10", "ndcg@10", "mrr")


def _ranking(summary: Mapping[str, float | int | None]) -> dict[str, float | int | None]:
    return {key: summary[key] for key in _RANKING_KEYS}


def _names(router: Router, ids: Sequence[str]) -> tuple[str, ...]:
    return tuple(router.catalog[tool_id].name for tool_id in ids)

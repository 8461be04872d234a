"""Which of a request's tools a :class:`~toolgate.gateway.filter.ToolFilter` keeps: the routed
ones and those the request's tool choice names, within the caller's allow / deny lists, cut
to a budget if one is given; tools the catalog could not read are kept unless a list shuts
them out."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolgate.arguments import shown
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.scopes import ScopeMatcher
from toolgate.errors import InvalidInputError
from toolgate.formats.raw import DEFAULT_SERVER, RawTool, base_provider
from toolgate.formats.requests import defers
from toolgate.formats.tokens import count_tools
from toolgate.gateway.indexes import IndexedTools
from toolgate.promotion.budget import (
    Budget,
    BudgetDecision,
    Candidate,
    enforce,
    enforce_counted,
)
from toolgate.routing.result import RouteResult

__all__ = [
    "Outcome",
    "choose",
    "kept_searchable",
    "refuse_shut_choice",
    "refuse_unmet_requirement",
    "shut_out_read",
]


@dataclass(frozen=True)
class Outcome:
    """One route over a request's tools: the result, the budget's decision, the ids kept."""

    route: RouteResult
    budget: BudgetDecision | None
    active: tuple[str, ...]


def choose(
    routed: IndexedTools,
    query: str | None,
    history: list[Any],
    forced: frozenset[str],
    options: dict[str, Any],
    *,
    in_use: Iterable[str] = (),
    fallback: Callable[[], Iterable[str]] = tuple,
    compact: bool = False,
) -> tuple[Outcome, tuple[str, ...], list[int]]:
    """Route ``query`` over the tools of ``routed`` with :meth:`Router.route`'s ``options``
    (and ``budget``): the outcome, the names kept, and the positions (among the tools read)
    to keep; with no ``query``, nothing is routed. The tools ``in_use`` names (the
    conversation needs them) are kept as those ``forced`` names are, where the lists admit
    them and without an error where not; those ``fallback()`` names (those the lists admit)
    are kept when nothing else is, and it is called only then. ``compact``: the kept tools
    are sent compacted, so the budget counts them so."""
    catalog = routed.catalog
    options = dict(options)
    budget: Budget | None = options.pop("budget", None)
    pinned: tuple[str, ...] = options.pop("pinned", ())
    missing = sorted(
        n
        for n in forced
        if not catalog.with_name(n) and not catalog.get_exposed(n)
        and n not in routed.unreadable_names
    )  # fmt: skip
    if missing:
        raise InvalidInputError(
            f"the request's tool choice names {', '.join(map(repr, missing))}, "
            "which no tool of the request declares"
        )
    if query is None:
        result = RouteResult(query="", form="none", tools=())
    else:
        result = routed.router.route(query, history=history, **options)
    allow, deny = options.get("allow"), options.get("deny")
    chosen = _rows_named(catalog, forced)
    if shut := shut_out(routed.scopes, sorted(chosen), allow, deny):
        refuse_shut_choice([catalog.tools[row].name for row in shut])
    using = _rows_named(catalog, in_use)
    chosen |= using - set(shut_out(routed.scopes, sorted(using), allow, deny))
    routed_rows = [catalog.position(tool_id) for tool_id in result.ids]
    # Pinned tools the route let through (the state and the lists apply to them, as to any
    # included name) are never dropped by the budget, as in Router.promote.
    chosen |= _rows_named(catalog, pinned) & set(routed_rows)
    decision = None
    if budget is not None:
        decision = fit_budget(catalog, routed_rows, chosen, budget, routed.reader, compact)
        kept_ids = set(decision.kept)
        routed_rows = [row for row in routed_rows if catalog.tools[row].id in kept_ids]
    rows = sorted(chosen | set(routed_rows))
    if not rows:
        named_rows = _rows_named(catalog, fallback())
        shut_rows = set(shut_out(routed.scopes, sorted(named_rows), allow, deny))
        rows = sorted(named_rows - shut_rows)
    active = tuple(catalog.tools[row].id for row in rows)
    named = {routed.position_of_row[row]: catalog.tools[row].name for row in rows}
    # Unreadable tools are never ranked, but the caller's lists still apply to them.
    unreadable = list(range(len(routed.unreadable)))
    shut_unreadable = set(shut_out(routed.unreadable_scopes, unreadable, allow, deny))
    for k, (position, name) in enumerate(
        zip(routed.unreadable, routed.unreadable_names_in_order, strict=True)
    ):
        if k not in shut_unreadable:
            named[position] = name
    positions = sorted(named)
    outcome = Outcome(result, decision, active)
    return outcome, tuple(named[p] for p in positions if named[p]), positions


def _rows_named(catalog: Catalog, names: Iterable[str]) -> set[int]:
    """The rows of the tools called ``name`` or exposed as it, for each of ``names``."""
    rows: set[int] = set()
    for name in names:
        rows.update(catalog.position(tool.id) for tool in catalog.with_name(name))
        if (tool := catalog.get_exposed(name)) is not None:
            rows.add(catalog.position(tool.id))
    return rows


def fit_budget(
    catalog: Catalog,
    ranked: list[int],
    chosen: set[int],
    budget: Budget,
    reader: str,
    compact: bool = False,
) -> BudgetDecision:
    """``budget`` applied to the routed rows, best first, after the chosen ones (never
    dropped); tokens as the request's provider counts the tools kept, sent together
    (``compact`` or as given), its fixed cost of sending any tools included, as in
    :meth:`Router.promote`. Text tags are not tool definitions: each tag is counted as an
    OpenAI tool, without a provider's fixed cost."""
    provider = base_provider(reader) if reader != "text_tags" else "openai"
    rows = [*sorted(chosen), *(row for row in ranked if row not in chosen)]
    tools = {catalog.tools[row].id: catalog.tools[row] for row in rows}
    candidates = [
        Candidate(
            catalog.tools[row].id,
            catalog.tools[row].token_count(provider, compact=compact),
            rank,
            row in chosen,
        )
        for rank, row in enumerate(rows)
    ]
    if reader == "text_tags":
        return enforce(budget, candidates)

    def count(ids: Sequence[str]) -> int:
        # Read, not sent: no copies.
        definitions = [tools[i]._definition(provider, compact=compact) for i in ids]
        return count_tools(definitions, provider)

    return enforce_counted(budget, candidates, count)[0]


def shut_out(
    scopes: ScopeMatcher,
    rows: list[int],
    allow: Iterable[str] | None,
    deny: Iterable[str] | None,
) -> list[int]:
    """Those of ``rows`` (of ``scopes``) that ``allow`` or ``deny`` shut out. Nothing is
    resolved when there are no rows or no lists: the common call costs nothing."""
    if not rows or (allow is None and deny is None):
        return []
    wanted = np.asarray(rows)
    out = np.zeros(len(rows), dtype=bool)
    if (allowed := scopes.rows(allow)) is not None:
        out |= ~np.isin(wanted, allowed)
    if (denied := scopes.rows(deny, deny=True)) is not None:
        out |= np.isin(wanted, denied)
    return [int(row) for row in wanted[out]]


def shut_out_read(
    tools: Sequence[RawTool], allow: Iterable[str] | None, deny: Iterable[str] | None
) -> set[int]:
    """The positions of those of ``tools`` (read from a request that was not routed: no
    index) that ``allow`` or ``deny`` shut out, each matched by the id a catalog would give
    it (its server, by default ``default``, and its name) and its name."""
    if not tools or (allow is None and deny is None):
        return set()
    names = [tool.name if isinstance(tool.name, str) else "" for tool in tools]
    servers = [
        t.server if isinstance(t.server, str) and t.server else DEFAULT_SERVER for t in tools
    ]
    ids = [f"{server}/{name}" for server, name in zip(servers, names, strict=True)]
    return set(shut_out(ScopeMatcher(ids, names), list(range(len(tools))), allow, deny))


def refuse_shut_choice(names: Iterable[str]) -> None:
    """Refuse a tool choice naming tools the allow / deny lists shut out: the provider would
    refuse a choice of a tool it is not sent, and a forced call must not pass the lists."""
    listed = ", ".join(map(repr, names))
    raise InvalidInputError(
        f"the request's tool choice names {listed}, which the allow / deny lists shut "
        "out: change the tool choice or the lists"
    )


def refuse_unmet_requirement(cause: str) -> None:
    """Refuse a tool choice requiring a call when ``cause`` left none of the request's tools:
    dropping the choice with them would turn a required call into text."""
    raise InvalidInputError(f"the request's tool choice requires a tool call, but {cause}")


#: The eager tools shut out that a refusal of only deferred tools names.
_LISTED_EAGER = 5


def kept_searchable(
    tools: list[Any], kept: list[tuple[int, Any]], provider: str, choice: Any = None
) -> list[tuple[int, Any]]:
    """``kept``, the entries (with their positions) of a request's ``tools`` that the allow /
    deny lists left, as the provider takes them when the request defers tools to a search.

    Anthropic refuses a request whose tools are all deferred (400, "All tools have
    defer_loading set"), blaming the client for the lists: that is refused here, naming the
    tools shut out. OpenAI refuses a hosted ``tool_search`` with nothing deferred to search:
    it goes once no deferred tool is left (one the client runs searches what it likes), and
    a tool ``choice`` naming it is refused: OpenAI refuses a choice of a tool not sent.
    """
    # An MCP toolset may load some of its tools up front: only a tool marked counts.
    if provider == "anthropic" and kept and all(_deferred(t) for _, t in kept):
        eager = [t.get("name") for t in tools if isinstance(t, Mapping) and not _deferred(t)]
        if eager:
            # The first few: the tools are the client's, any number of them.
            listed = ", ".join(shown(name) for name in eager[:_LISTED_EAGER])
            more = len(eager) - _LISTED_EAGER
            listed += f" and {more:,} more" if more > 0 else ""
            raise InvalidInputError(
                "the allow / deny lists shut out every tool the request loads up front ("
                f"{listed}), leaving only tools deferred to "
                "a tool search, which Anthropic refuses: admit one of them (the client's "
                "search tool)"
            )
    elif (
        provider == "openai-responses"
        and not any(_searchable(t) for _, t in kept)
        # Only once the lists took the last deferred tool: what else a search may reach is
        # OpenAI's to say.
        and any(map(_searchable, tools))
    ):
        if any(_hosted_search(t) for _, t in kept) and _chooses_search(choice):
            raise InvalidInputError(
                "the request's tool choice names the hosted tool_search, but the allow / deny "
                "lists shut out every tool deferred to it, and OpenAI refuses a tool_search "
                "with nothing to search: change the tool choice or the lists"
            )
        return [(i, t) for i, t in kept if not _hosted_search(t)]
    return kept


def _chooses_search(choice: Any) -> bool:
    """Whether a Responses tool ``choice`` forces or allows a ``tool_search``."""
    if not isinstance(choice, Mapping):
        return False
    listed = choice.get("tools") if choice.get("type") == "allowed_tools" else [choice]
    entries = listed if isinstance(listed, list) else []
    return any(isinstance(e, Mapping) and e.get("type") == "tool_search" for e in entries)


def _deferred(tool: Any) -> bool:
    """Whether ``tool`` is marked ``defer_loading``."""
    return isinstance(tool, Mapping) and tool.get("defer_loading") is True


def _searchable(tool: Any) -> bool:
    """Whether a Responses ``tool`` defers tools to a search: itself, or a namespace member."""
    if not isinstance(tool, Mapping):
        return False
    if defers(tool):
        return True
    members = tool.get("tools") if tool.get("type") == "namespace" else None
    listed = members if isinstance(members, list) else []
    return any(isinstance(m, Mapping) and defers(m) for m in listed)


def _hosted_search(tool: Any) -> bool:
    """Whether ``tool`` is OpenAI's hosted ``tool_search`` (not one the client runs)."""
    return (
        isinstance(tool, Mapping)
        and tool.get("type") == "tool_search"
        and tool.get("execution") != "client"
    )


def shut_functions(
    request: dict[str, Any], allow: Iterable[str] | None, deny: Iterable[str] | None
) -> list[str]:
    """Drop from ``request`` (a copy the caller owns) the OpenAI Chat legacy ``functions`` that
    ``allow`` or ``deny`` shut out, and ``functions`` and ``function_call`` when none is left;
    the names dropped. A ``function_call`` naming a shut-out one is refused, as a tool choice
    is (:func:`refuse_shut_choice`)."""
    functions = request.get("functions")
    if not isinstance(functions, list):
        return []
    # Entries that are no named function are the provider's to refuse: they are kept.
    named = [
        (i, RawTool(f"functions[{i}]", name=entry["name"]))
        for i, entry in enumerate(functions)
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
    ]
    shut = {named[k][0] for k in shut_out_read([raw for _, raw in named], allow, deny)}
    if not shut:
        return []
    choice = request.get("function_call")
    chosen = choice.get("name") if isinstance(choice, Mapping) else None
    if isinstance(chosen, str) and any(functions[i]["name"] == chosen for i in shut):
        refuse_shut_choice([chosen])
    kept = [entry for i, entry in enumerate(functions) if i not in shut]
    if kept:
        request["functions"] = kept
    else:
        request.pop("functions")
        request.pop("function_call", None)
    return [functions[i]["name"] for i in sorted(shut)]

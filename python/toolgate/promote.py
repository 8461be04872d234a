"""Two-phase tool loading within a budget.

Phase 1 is the *summary pool*: text for the system prompt that tells the model which tools
exist. It depends only on the catalog, so it is a stable, prompt-cacheable prefix. Up to
:data:`FULL_POOL_MAX_TOKENS` it lists every tool (``- name: summary``, in catalog order); past
that (5,000 tools at ~16 tokens each would be an 80k-token "summary") it becomes a per-server
digest, bounded by :data:`DIGEST_MAX_SERVERS` lines, plus a ``tool_search`` tool the model can
call to ask for more. That tool's name is ``tool_search`` unless a catalog tool's exposed name
already is (ignoring case, as in :mod:`toolgate.names`), and its id, :data:`TOOL_SEARCH_ID`,
is one no tool can have.

Phase 2 is the full definitions of the active tools (a route result's, which hold the pinned
tools the gate admits; a bare id list gets every pinned one added), in catalog order so
the same active set always serialises the same way, in the provider's format, with schemas from
the catalog or from a schema source through an optional cache. Both phases are counted in the
provider's serialisation, and the :class:`~toolgate.budget.Budget` decides what is sent. The
``tool_search`` tool, when present, is treated like a pinned tool: it counts toward the caps
and is never dropped, since without it the model could not reach the rest of the catalog.

>>> promotion = promote_tools(catalog, ["github/get_me"], format="anthropic")  # doctest: +SKIP
>>> promotion.decision.status, len(promotion.tools)  # doctest: +SKIP
('pass', 1)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from toolgate.adapters import PROVIDERS, base_provider
from toolgate.budget import Budget, BudgetDecision, Candidate, enforce
from toolgate.catalog import Catalog
from toolgate.errors import CatalogError, InvalidInputError, ToolgateError
from toolgate.schema_source import SchemaCacheLike, SchemaSource, as_schema_source, schema_of
from toolgate.scopes import ScopeMatcher
from toolgate.tool import Tool, split_name, validated_schema

__all__ = [
    "DIGEST_MAX_SERVERS",
    "FULL_POOL_MAX_TOKENS",
    "TOOL_SEARCH_ID",
    "Budget",
    "Promotion",
    "promote_tools",
    "render_pool",
    "search_tool",
    "tools_in_scope",
]

#: Largest full summary pool ``pool="auto"`` keeps; past it the per-server digest is used.
#: Claude Code's ToolSearch index, the reference point, is ~8.7k tokens for its whole catalog.
FULL_POOL_MAX_TOKENS = 6_000
#: Most servers the digest lists one by one; the rest are counted on one line.
DIGEST_MAX_SERVERS = 150
#: Most keywords the digest gives per server.
DIGEST_KEYWORDS = 8
#: The id the synthetic search tool goes by in budget decisions and verdicts. Every tool id is
#: ``server/name``, so an id without a ``/`` can never clash with a catalog tool's.
TOOL_SEARCH_ID = "toolgate:tool_search"

_POOL_MODES = ("auto", "full", "digest", "none")
# A pool line ("- name: summary\n") is never under four tokens.
_MIN_LINE_TOKENS = 4
_STOP_WORDS = {
    "get",
    "list",
    "create",
    "update",
    "delete",
    "set",
    "add",
    "remove",
    "the",
    "a",
    "an",
    "of",
    "to",
    "by",
    "for",
    "and",
    "or",
    "in",
    "on",
    "with",
    "from",
    "all",
}
_SEARCH_DESCRIPTION = (
    "Find tools that are not loaded yet. Describe what you need in words, use "
    "'select:name1,name2' to load tools by name, or '+word' to require a word in the name. "
    "The tools found are available on your next turn."
)


@dataclass(frozen=True)
class Promotion:
    """What to send for one turn: tool definitions, the pool text, token counts, the decision.

    ``catalog_version`` is the :attr:`~toolgate.catalog.Catalog.version` it was built from, so
    a promotion is never checked against another catalog. ``search_tool_name`` is the name
    the ``tool_search`` tool was sent under, if it was.
    """

    tools: list[dict[str, Any]]
    pool_text: str
    tokens: dict[str, int]
    decision: BudgetDecision
    active_ids: tuple[str, ...]
    format: str
    pool_mode: str
    catalog_version: str
    search_tool_name: str | None = None
    tool_tokens: dict[str, int] = field(default_factory=dict)
    latency_ms: float = 0.0

    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.tools)

    def __repr__(self) -> str:
        return (
            f"Promotion({len(self.tools)} {self.format} tools, pool={self.pool_mode}, "
            f"tokens={self.tokens['pool']}+{self.tokens['schemas']}, {self.decision.status})"
        )

    def request_tools(self) -> list[dict[str, Any]]:
        """The value for the request's ``tools`` field (Gemini wraps declarations)."""
        if base_provider(self.format) == "gemini":
            return [{"functionDeclarations": self.tools}] if self.tools else []
        return list(self.tools)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {
            "format": self.format,
            "pool_mode": self.pool_mode,
            "catalog_version": self.catalog_version,
            "active_ids": list(self.active_ids),
            "search_tool_name": self.search_tool_name,
            "tokens": dict(self.tokens),
            "tool_tokens": dict(self.tool_tokens),
            "decision": self.decision.to_dict(),
            "latency_ms": self.latency_ms,
            "tools": self.tools,
            "pool_text": self.pool_text,
        }


def _name_words(name: str) -> list[str]:
    return [w for w in split_name(name).split() if w not in _STOP_WORDS and not w.isdigit()]


def _render_full(tools: Sequence[Tool]) -> str:
    lines = [
        f"Tools available ({len(tools)}). Full definitions are attached for the ones "
        "you can call this turn; ask for another by name if you need it."
    ]
    lines.extend(f"- {t.exposed_name}: {t.summary}" for t in tools)
    return "\n".join(lines)


def _render_digest(tools: Sequence[Tool], search_name: str) -> str:
    by_server: dict[str, list[Tool]] = {}
    for tool in tools:
        by_server.setdefault(tool.server, []).append(tool)
    lines = [
        f"Tool catalog: {len(tools)} tools on {len(by_server)} servers. Full definitions are "
        f"attached for the tools you can call this turn; call {search_name} to find others."
    ]
    ordered = sorted(by_server.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    for server, tools in ordered[:DIGEST_MAX_SERVERS]:
        words = Counter(w for t in tools for w in dict.fromkeys(_name_words(t.name)))
        top = [w for w, _ in sorted(words.items(), key=lambda kv: -kv[1])[:DIGEST_KEYWORDS]]
        lines.append(f"- {server} ({len(tools)} tools): {', '.join(top)}")
    rest = ordered[DIGEST_MAX_SERVERS:]
    if rest:
        lines.append(f"- and {len(rest)} more servers with {sum(len(t) for _, t in rest)} tools")
    return "\n".join(lines)


#: A route's allow and deny patterns (``None``: not given), as :class:`RouteResult` holds them.
Scope = tuple[tuple[str, ...] | None, tuple[str, ...] | None]
_ANY_SCOPE: Scope = (None, None)

_POOL_CACHE: dict[tuple[str, str, str, str, Scope], tuple[str, int]] = {}
_POOL_LOCK = threading.Lock()
_POOL_CACHE_SIZE = 32
_MATCHERS: dict[str, ScopeMatcher] = {}


def render_pool(
    catalog: Catalog,
    mode: str,
    *,
    search_name: str = "tool_search",
    encoding: str = "cl100k_base",
    scope: Scope = _ANY_SCOPE,
) -> tuple[str, int]:
    """The phase-1 text for ``mode`` (``"full"``, ``"digest"`` or ``"none"``) and its tokens.

    The pool names only the tools ``scope`` (allow and deny patterns) admits: a tool a deny
    list shuts out is not even mentioned. Memoised per catalog version and scope: the pool
    only changes when they do.
    """
    from toolgate.tokens import count_text

    key = (catalog.version, mode, search_name, encoding, scope)
    with _POOL_LOCK:
        if key in _POOL_CACHE:
            return _POOL_CACHE[key]
    if mode == "none":
        text = ""
    elif mode == "full":
        text = _render_full(tools_in_scope(catalog, *scope))
    else:
        text = _render_digest(tools_in_scope(catalog, *scope), search_name)
    result = (text, count_text(text, encoding) if text else 0)
    with _POOL_LOCK:
        if len(_POOL_CACHE) >= _POOL_CACHE_SIZE:
            _POOL_CACHE.pop(next(iter(_POOL_CACHE)))
        _POOL_CACHE[key] = result
    return result


def tools_in_scope(
    catalog: Catalog, allow: Sequence[str] | None, deny: Sequence[str] | None
) -> Sequence[Tool]:
    """The tools of ``catalog`` that the ``allow`` and ``deny`` patterns admit (see
    :mod:`toolgate.scopes`), in catalog order."""
    if allow is None and deny is None:
        return catalog.tools
    with _POOL_LOCK:
        matcher = _MATCHERS.get(catalog.version)
        if matcher is None:
            if len(_MATCHERS) >= _POOL_CACHE_SIZE:
                _MATCHERS.pop(next(iter(_MATCHERS)))
            matcher = ScopeMatcher(catalog.ids, [t.name for t in catalog])
            _MATCHERS[catalog.version] = matcher
    allowed, denied = matcher.rows(allow), matcher.rows(deny, deny=True)
    keep = np.full(len(catalog), allowed is None)
    if allowed is not None:
        keep[allowed] = True
    if denied is not None:
        keep[denied] = False
    return [tool for tool, kept in zip(catalog, keep, strict=True) if kept]


def _choose_pool(
    catalog: Catalog,
    pool: str,
    budget: Budget | None,
    search_name: str,
    encoding: str,
    scope: Scope = _ANY_SCOPE,
) -> tuple[str, str, int]:
    if pool not in _POOL_MODES:
        raise InvalidInputError(f"pool must be one of {', '.join(_POOL_MODES)}, got {pool!r}")
    render = partial(render_pool, catalog, search_name=search_name, encoding=encoding, scope=scope)
    if pool != "auto":
        return (pool, *render(pool))
    limit = FULL_POOL_MAX_TOKENS
    if budget is not None and budget.max_context_tokens is not None:
        limit = min(limit, budget.max_context_tokens // 2)
    if len(tools_in_scope(catalog, *scope)) * _MIN_LINE_TOKENS > limit:
        # Too many tools for any full pool to fit: skip rendering and counting it.
        return ("digest", *render("digest"))
    text, tokens = render("full")
    if tokens <= limit:
        return "full", text, tokens
    return ("digest", *render("digest"))


def check_catalog_version(catalog: Catalog, active: Any) -> None:
    """Refuse a ``RouteResult`` or :class:`Promotion` made from another version of ``catalog``:
    its ids would be checked against tools they were never routed among."""
    version = getattr(active, "catalog_version", "")
    if version and version != catalog.version:
        kind = type(active).__name__
        raise InvalidInputError(
            f"the {kind} is for catalog version {version}, this catalog is {catalog.version}"
        )


def _active_ids(catalog: Catalog, active: Any) -> list[str]:
    """The ids to promote, best first.

    A ``RouteResult`` is taken as it is: the router already added the pinned tools that the
    gate and the allow / deny lists admit, and a pinned tool they shut out must stay out. A
    bare list of ids carries no state, so the pinned tools are added to it.
    """
    check_catalog_version(catalog, active)
    ids = getattr(active, "ids", None)
    routed = ids is not None
    if ids is None:
        ids = active
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise InvalidInputError(
            f"active_ids must be a list of tool ids or a RouteResult, got {type(ids).__name__}"
        )
    unknown = [i for i in ids if not isinstance(i, str) or i not in catalog]
    if unknown:
        raise InvalidInputError(f"active_ids has ids not in the catalog: {unknown}")
    pinned = () if routed else catalog.pinned_ids
    return list(dict.fromkeys([*ids, *pinned]))


_SEARCH_TOOLS: dict[str, Tool] = {}
# Token counts of whole definition lists. An agent promotes the same active set turn after
# turn, and tokenising the set is most of a promotion (about 65%).
_SET_TOKENS: OrderedDict[tuple[str, str, str], int] = OrderedDict()
_SET_TOKENS_SIZE = 256


def _count_set(tools: Sequence[Tool], format: str, encoding: str) -> int:
    """Tokens of ``tools``' definitions sent together in ``format``, counted once per set.

    Keyed by a digest of the definitions' JSON in their own key order (a content
    fingerprint would ignore it, and the sent JSON, so its token count, keeps it), so a
    schema a source supplies anew each turn still hits, and a changed one misses.
    """
    from toolgate.tokens import count_tools

    if not tools:
        return 0
    text = "\n".join(t.definition_json(format) for t in tools)
    key = (format, encoding, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
    with _POOL_LOCK:
        found = _SET_TOKENS.get(key)
        if found is not None:
            _SET_TOKENS.move_to_end(key)
            return found
    definitions = [t._definition(format) for t in tools]  # read, not sent: no copies
    count = count_tools(definitions, base_provider(format), encoding=encoding)
    with _POOL_LOCK:
        _SET_TOKENS[key] = count
        while len(_SET_TOKENS) > _SET_TOKENS_SIZE:
            _SET_TOKENS.popitem(last=False)
    return count


def search_tool(catalog: Catalog) -> Tool:
    """The synthetic ``tool_search`` tool a digest pool sends with ``catalog``'s tools.

    One per catalog version, so its token counts are cached like any other tool's.
    """
    found = _SEARCH_TOOLS.get(catalog.version)
    if found is None:
        found = _make_search_tool(catalog)
        with _POOL_LOCK:
            if len(_SEARCH_TOOLS) >= _POOL_CACHE_SIZE:
                _SEARCH_TOOLS.pop(next(iter(_SEARCH_TOOLS)))
            _SEARCH_TOOLS[catalog.version] = found
    return found


def _search_tool_name(catalog: Catalog) -> str:
    """``tool_search``, else the first of ``toolgate_tool_search``, ``..._2``, ... that is free.

    Compared ignoring case, like the catalog's exposed names, since some clients fold case.
    """
    taken = {t.exposed_name.casefold() for t in catalog}
    numbered = (f"toolgate_tool_search_{n}" for n in itertools.count(2))
    names = itertools.chain(("tool_search", "toolgate_tool_search"), numbered)
    return next(n for n in names if n not in taken)


def _make_search_tool(catalog: Catalog) -> Tool:
    name = _search_tool_name(catalog)
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What you need, or select:a,b"}},
        "required": ["query"],
    }
    return Tool(
        "toolgate",
        "tool_search",
        _SEARCH_DESCRIPTION,
        schema,
        summary="Find tools that are not loaded yet.",
        exposed_name=name,
        pinned=True,
    )


def _fetch_schema(tool: Tool, source: SchemaSource, cache: SchemaCacheLike | None) -> Tool:
    def fetch_json() -> str:
        try:
            fetched = source.fetch(tool.id)
        except ToolgateError:
            raise
        except Exception as exc:
            raise CatalogError(f"schema source failed for {tool.id!r}: {exc!r}") from exc
        schema = validated_schema(
            schema_of(tool.id, fetched, aliases=(tool.exposed_name,)), tool.id
        )
        return json.dumps(schema, sort_keys=True)

    if cache is None:
        return replace(tool, input_schema=json.loads(fetch_json()))
    # The cache keys versions as 64-bit ints; the fingerprint's first 64 bits change with it.
    version = int(tool.fingerprint[:16], 16)
    text = cache.get_or_fetch(tool.id, version, fetch_json)
    return replace(tool, input_schema=json.loads(text))


def _schema_entries(
    catalog: Catalog,
    rank: Mapping[str, int],
    source: SchemaSource | None,
    cache: SchemaCacheLike | None,
) -> list[tuple[str, Tool]]:
    """Phase 2's tools, keyed by id, in catalog order (a stable, cacheable prompt prefix),
    with their schemas from ``source`` when given."""
    chosen = [catalog[i] for i in catalog.in_catalog_order(rank)]
    if source is not None:
        chosen = [_fetch_schema(t, source, cache) for t in chosen]
    return [(t.id, t) for t in chosen]


def promote_tools(
    catalog: Catalog,
    active_ids: Any,
    *,
    format: str = "openai",
    budget: Budget | None = None,
    schema_source: Any = None,
    cache: SchemaCacheLike | None = None,
    pool: str = "auto",
    encoding: str = "cl100k_base",
) -> Promotion:
    """Build both phases for one turn and apply ``budget``.

    ``active_ids`` is a ``RouteResult``, or tool ids best first, to which the pinned tools
    are added.
    ``format`` is one of :data:`toolgate.adapters.PROVIDERS` (see
    :meth:`toolgate.tool.Tool.to_provider`).
    ``pool`` is ``"auto"``, ``"full"``, ``"digest"`` or ``"none"``.
    ``schema_source`` (see :mod:`toolgate.schema_source`) supplies full schemas instead of the
    catalog, through ``cache`` (``get_or_fetch(tool_id, version, fetch)``) when given.
    """

    started = time.perf_counter()
    if format not in PROVIDERS:
        raise InvalidInputError(f"format must be one of {', '.join(PROVIDERS)}, got {format!r}")
    if budget is not None and not isinstance(budget, Budget):
        raise InvalidInputError(
            f"budget must be a toolgate.Budget or None, got {type(budget).__name__}"
        )
    ranked = _active_ids(catalog, active_ids)
    search = search_tool(catalog)
    scope: Scope = (getattr(active_ids, "allow", None), getattr(active_ids, "deny", None))
    pool_mode, pool_text, pool_tokens = _choose_pool(
        catalog, pool, budget, search.exposed_name, encoding, scope
    )
    rank = {tool_id: i for i, tool_id in enumerate(ranked)}
    source = as_schema_source(schema_source) if schema_source is not None else None
    entries = _schema_entries(catalog, rank, source, cache)
    if pool_mode == "digest":
        # Keyed by an id no catalog tool can have, so a real tool never shares its entry.
        entries.insert(0, (TOOL_SEARCH_ID, search))
    tool_tokens = {key: t.token_count(format, encoding=encoding) for key, t in entries}
    candidates = [
        Candidate(key, tool_tokens[key], rank.get(key, len(rank)), t.pinned) for key, t in entries
    ]
    whole = _count_set([t for _, t in entries], format, encoding)
    overhead = max(0, whole - sum(tool_tokens.values()))
    decision = enforce(budget, candidates, pool_tokens=pool_tokens, overhead_tokens=overhead)
    kept = set(decision.kept)
    sent = [(key, t) for key, t in entries if key in kept]
    tools = [t.to_provider(format) for _, t in sent]
    if len(sent) == len(entries):
        schema_tokens = whole
    else:
        schema_tokens = _count_set([t for _, t in sent], format, encoding)
    return Promotion(
        tools=tools,
        pool_text=pool_text,
        tokens={
            "pool": pool_tokens,
            "schemas": schema_tokens,
            "total": pool_tokens + schema_tokens,
        },
        decision=decision,
        active_ids=tuple(key for key, _ in sent if key != TOOL_SEARCH_ID),
        format=format,
        pool_mode=pool_mode,
        catalog_version=catalog.version,
        # Only a search tool that was sent can be called: a blocking budget may drop it.
        search_tool_name=search.exposed_name if TOOL_SEARCH_ID in kept else None,
        tool_tokens=tool_tokens,
        latency_ms=(time.perf_counter() - started) * 1000,
    )

"""Two-phase tool loading within a budget.

Phase 1 tells the model, in text for the system prompt, what else exists. By default it is a
digest of constant size (at most :data:`~toolgate.promotion.pool.DIGEST_MAX_TOKENS`: the
catalog's size and one line per server, largest first, saying what each is for) plus a
``tool_search`` tool the model calls to load any other tool, as Anthropic's tool search and
Claude Code do; the full pool (``- name: summary`` for every tool) is an option, and ``"auto"``
takes it only where it costs less than the digest and its tool. The search tool's name is
``tool_search`` unless a catalog tool's exposed name already is (ignoring case, as in
:mod:`toolgate.catalog.names`), and its id, :data:`TOOL_SEARCH_ID`, is one no tool can have.

Phase 2 is the full definitions of the active tools (a route result's, which hold the pinned
tools the gate admits; a bare id list gets every pinned one added), in the provider's format,
compact by default (:mod:`toolgate.formats.compact`; ``compact=False`` sends them as given),
with schemas from the catalog or from a schema source through an optional cache. The tools
that repeat every turn come first: the search tool, then the pinned tools, each group in
catalog order, so the pool and those tools make a prefix that stays the same from turn to
turn and a provider's prompt cache can serve it (:attr:`Promotion.stable_count` says how many
tools it holds); the routed tools follow, in catalog order, so the same active set always
serialises the same way. Both phases are counted in the provider's serialisation, and the
:class:`~toolgate.promotion.budget.Budget` decides what is sent. The ``tool_search`` tool,
when present, is never dropped, since without it the model could not reach the rest of the
catalog; its tokens count toward the caps, but it takes none of ``max_tools``' slots. A
budget that blocks sends nothing: no tool, and no pool text (a digest would name the search
tool it did not send).

>>> from importlib import resources
>>> catalog = Catalog.load(resources.files("toolgate") / "data" / "demo_catalog.json")
>>> promotion = promote_tools(catalog, ["github/get_issue"], format="anthropic")
>>> promotion.decision.status, [tool["name"] for tool in promotion.tools]
('pass', ['tool_search', 'get_issue'])
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from toolgate.arguments import check_flag
from toolgate.catalog.build import validated_schema
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.tool import Tool
from toolgate.errors import CatalogError, InvalidInputError, ToolgateError
from toolgate.formats.definition import schema_of
from toolgate.formats.raw import PROVIDERS, base_provider
from toolgate.formats.tokens import count_tools
from toolgate.memo import Memo
from toolgate.promotion.active_set import ActiveSet
from toolgate.promotion.budget import Budget, BudgetDecision, Candidate, enforce_counted
from toolgate.promotion.discovery import TOOL_SEARCH_ID, search_tool
from toolgate.promotion.pool import choose_pool
from toolgate.promotion.schema_source import (
    SchemaCacheLike,
    SchemaSource,
    SchemaSourceLike,
    as_schema_source,
    cache_token,
)

__all__ = ["Budget", "Promotion", "promote_tools"]


@dataclass(frozen=True)
class Promotion:
    """What to send for one turn: tool definitions, the pool text, token counts, the decision.

    ``catalog_version`` is the :attr:`~toolgate.catalog.Catalog.version` it was built from, so
    a promotion is never checked against another catalog. ``search_tool_name`` is the name
    the ``tool_search`` tool was sent under, if it was. The first ``stable_count`` of
    ``tools`` (the search tool and the pinned tools) are the same every turn: with the pool
    text they are the prompt-cacheable prefix. ``query`` is the text of the route it was
    built from, when that route ranked a text query ("" otherwise), so that a call verified
    against it can teach a learning router; it is left out of ``repr`` and :meth:`to_dict`,
    which telemetry logs.
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
    stable_count: int = 0
    query: str = field(default="", repr=False)

    def __hash__(self) -> int:
        # Of the fields that are no lists or dicts (the generated hash took them, a
        # TypeError): equal promotions still hash equal.
        return hash((self.active_ids, self.format, self.pool_mode, self.catalog_version))

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
            "stable_count": self.stable_count,
            "tokens": dict(self.tokens),
            "tool_tokens": dict(self.tool_tokens),
            "decision": self.decision.to_dict(),
            "latency_ms": self.latency_ms,
            "tools": self.tools,
            "pool_text": self.pool_text,
        }


# Token counts of whole definition lists. An agent promotes the same active set turn after
# turn, and tokenising the set is most of a promotion.
_SET_TOKENS: Memo[tuple[str, str, str], int] = Memo(256)


def _count_set(tools: Sequence[Tool], format: str, encoding: str, compact: bool) -> int:
    """Tokens of ``tools``' definitions sent together in ``format``, counted once per set.

    Keyed by a digest of the definitions' JSON in their own key order (a content
    fingerprint would ignore it, and the sent JSON, so its token count, keeps it), so a
    schema a source supplies anew each turn still hits, and a changed one misses.
    """
    if not tools:
        return 0
    text = "\n".join(t.definition_json(format, compact=compact) for t in tools)
    key = (format, encoding, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())

    def count() -> int:
        # Read, not sent: no copies.
        definitions = [t._definition(format, compact=compact) for t in tools]
        return count_tools(definitions, base_provider(format), encoding=encoding)

    return _SET_TOKENS.get(key, count)


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

    # The cache keys versions as 64-bit ints: one that changes with the tool and with what
    # the source would give for it (another source, an invalidated listing, a new file).
    token = None if cache is None else cache_token(source, tool.id)
    if cache is None or token is None:  # no cache, or no telling this source from a dead one
        return replace(tool, input_schema=json.loads(fetch_json()))
    key = hashlib.sha256(f"{tool.fingerprint}:{token}".encode()).digest()
    version = int.from_bytes(key[:8], "big")
    text = cache.get_or_fetch(tool.id, version, fetch_json)
    return replace(tool, input_schema=json.loads(text))


def _schema_entries(
    catalog: Catalog,
    rank: Mapping[str, int],
    source: SchemaSource | None,
    cache: SchemaCacheLike | None,
) -> list[tuple[str, Tool]]:
    """Phase 2's tools, keyed by id: the pinned ones, then the others, each in catalog order
    (a stable, cacheable prompt prefix), with their schemas from ``source`` when given."""
    chosen = [catalog[i] for i in catalog.in_catalog_order(rank)]
    chosen.sort(key=lambda t: not t.pinned)  # stable: catalog order within each group
    if source is not None:
        chosen = [_fetch_schema(t, source, cache) for t in chosen]
    return [(t.id, t) for t in chosen]


def promote_tools(
    catalog: Catalog,
    active_ids: Any,
    *,
    format: str = "openai",
    budget: Budget | None = None,
    schema_source: SchemaSourceLike | None = None,
    cache: SchemaCacheLike | None = None,
    pool: str = "auto",
    encoding: str = "cl100k_base",
    compact: bool = True,
) -> Promotion:
    """Build both phases for one turn and apply ``budget``.

    ``active_ids`` is a ``RouteResult``, or tool ids best first, to which the pinned tools
    are added.
    ``format`` is one of :data:`toolgate.formats.raw.PROVIDERS` (see
    :meth:`toolgate.catalog.tool.Tool.to_provider`).
    ``pool`` is ``"auto"`` (the cheaper of the two below), ``"digest"`` (constant-size text
    and a ``tool_search`` tool), ``"full"`` (every tool's name and summary) or ``"none"``.
    ``compact`` sends definitions without what a model does not need
    (:mod:`toolgate.formats.compact`); ``False`` sends them as given.
    ``schema_source`` (see :mod:`toolgate.promotion.schema_source`) supplies full schemas
    instead of the catalog, through ``cache`` (``get_or_fetch(tool_id, version, fetch)``) when
    given.
    """

    started = time.perf_counter()
    if format not in PROVIDERS:
        raise InvalidInputError(f"format must be one of {', '.join(PROVIDERS)}, got {format!r}")
    if budget is not None and not isinstance(budget, Budget):
        raise InvalidInputError(
            f"budget must be a toolgate.Budget or None, got {type(budget).__name__}"
        )
    check_flag("compact", compact)
    active = ActiveSet.of(catalog, active_ids, strict=True)
    ranked = list(active.ids)
    search = search_tool(catalog)
    pool_mode, pool_text, pool_tokens = choose_pool(
        catalog, pool, search.exposed_name, encoding, active.scope,
        search_tokens=search.token_count(format, encoding=encoding, compact=compact),
    )  # fmt: skip
    rank = {tool_id: i for i, tool_id in enumerate(ranked)}
    source = as_schema_source(schema_source) if schema_source is not None else None
    entries = _schema_entries(catalog, rank, source, cache)
    if pool_mode == "digest":
        # Keyed by an id no catalog tool can have, so a real tool never shares its entry.
        entries.insert(0, (TOOL_SEARCH_ID, search))
    tool_tokens = {
        key: t.token_count(format, encoding=encoding, compact=compact) for key, t in entries
    }
    candidates = [
        Candidate(key, tool_tokens[key], rank.get(key, len(rank)), t.pinned, key == TOOL_SEARCH_ID)
        for key, t in entries
    ]
    by_key = dict(entries)
    decision, schema_tokens = enforce_counted(
        budget, candidates,
        lambda keys: _count_set([by_key[k] for k in keys], format, encoding, compact),
        pool_tokens=pool_tokens,
    )  # fmt: skip
    kept = set(decision.kept)
    sent = [(key, t) for key, t in entries if key in kept]
    if decision.status == "block":
        # Nothing is promoted: not the pool either, whose digest names a search tool that
        # is not sent. The decision's usage still says what the pool would have cost.
        pool_text, pool_tokens = "", 0
    tools = [t.to_provider(format, compact=compact) for _, t in sent]
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
        stable_count=sum(1 for _, t in sent if t.pinned),
    )

"""Gateway filtering: cut an LLM request's tools down to the ones routed for its user turn.

A gateway between an application and the model sees whole requests. :class:`ToolFilter` takes
the user's latest message as the query, routes over the tools the request itself carries, and
returns a copy of the request holding only the routed tools, in their original order and as
given, so the tools array stays a stable prefix for prompt caching.

Shapes are told apart by their keys: OpenAI Chat Completions (``messages``, tools
``{"type": "function", "function": {...}}``), OpenAI Responses (``input``), Anthropic Messages
(``messages``, tools with ``input_schema``) and Gemini (``contents``, ``functionDeclarations``).
A request without a tools array whose last user message holds ``<toolname>`` tags is routed
over those tags. Provider-side tools (``web_search``, ``googleSearch``...) are never routed
and always kept. A function tool the catalog cannot read is an error, never dropped: a gateway
that forwarded the request without it would hide the fault from the application.

>>> from toolgate.gateway import ToolFilter
>>> gate = ToolFilter()
>>> send(gate.filter(request, top_k=5).request)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import marshal
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from toolgate.catalog.build import build_tools
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.scopes import ScopeMatcher
from toolgate.errors import CatalogWarning, InvalidInputError, InvalidToolsError
from toolgate.formats import text_tags
from toolgate.formats.raw import DEFAULT_SERVER, RawTool
from toolgate.lazy import Lazy
from toolgate.routing.config import DEFAULT, DefaultType, RouterConfig
from toolgate.routing.result import RouteResult
from toolgate.routing.router import Router, default_embedder
from toolgate.routing.state import State

if TYPE_CHECKING:
    from toolgate.embedding.cache import EmbeddingCache
    from toolgate.embedding.embedder import Embedder

from toolgate.formats.requests import (
    TOOL_KEYS,
    carry_cache_marker,
    keep_tags,
    kept_entries,
    last_user_turn,
    messages_of,
    read_tool_choice,
    request_shape,
    routable_tools,
    text_rewriter,
)

__all__ = ["FilteredRequest", "ToolFilter"]


@dataclass(frozen=True)
class _Turn:
    """What filtering needs of a request: its conversation and the user turn to route on."""

    request: Mapping[str, Any]
    key: str
    messages: list[Any]
    found: tuple[int, str] | None
    forced: frozenset[str]


@dataclass(frozen=True)
class FilteredRequest:
    """A request cut down to its routed tools, and the routing behind it.

    ``request`` is a new dict; the input is never modified (nested values that were not
    rewritten are shared with it, not copied). ``kept`` names the function tools kept, as the
    request names them, in request order; provider-side tools are kept too but not listed.
    ``positions`` are the indexes, in the request's ``tools`` array, of the entries kept
    (provider-side ones too), in order; empty for text tags.
    ``dropped_count`` counts the function tools removed. ``provider`` is the shape read:
    ``"openai"``, ``"openai-responses"``, ``"anthropic"``, ``"gemini"`` or ``"text_tags"``.
    When nothing was routed (tool calling off, no function tools, no user text to route on:
    a system prompt or an image alone) ``result`` is empty, with form ``"none"``, and
    ``request`` is a copy of the input.
    """

    request: dict[str, Any]
    result: RouteResult
    kept: tuple[str, ...]
    dropped_count: int
    provider: str
    positions: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.kept)

    def __iter__(self) -> Iterator[str]:
        return iter(self.kept)

    def __repr__(self) -> str:
        kept, dropped = list(self.kept), self.dropped_count
        return f"FilteredRequest({self.provider}, kept={kept}, dropped={dropped})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view for logs; the request itself is left out (large, user data)."""
        return {
            "provider": self.provider,
            "kept": list(self.kept),
            "dropped_count": self.dropped_count,
            "result": self.result.to_dict(),
        }


class ToolFilter:
    """Filters each LLM request's tools to the ones routed for its latest user message.

    One filter serves many threads and many tool sets. It keeps one router per distinct tools
    array (keyed by a digest of the array as the request gives it), the least recently used
    dropped past ``max_catalogs``, so only the first request with a given array builds an
    index; with
    ``cache`` (as in :meth:`Router.from_catalog`) a rebuilt one embeds nothing new. Every
    router shares one embedder, ``embedder`` or the default model loaded on first use.

    ``unreadable`` says what becomes of a function tool the catalog cannot read (no name, a
    broken schema, a 30,000-character description): ``"error"`` raises, naming each one,
    since a gateway that dropped it would hide the fault; ``"keep"`` forwards it on every
    request, unrouted, with one :class:`~toolgate.catalog.CatalogWarning` per tools array
    (an agent framework must not stop over one odd tool).

    >>> gate = ToolFilter(max_catalogs=32)
    >>> filtered = gate.filter(request, top_k=5)  # doctest: +SKIP
    >>> filtered.kept, filtered.dropped_count  # doctest: +SKIP
    (('get_forecast', 'search_flights'), 14)
    """

    def __init__(
        self,
        *,
        config: RouterConfig | None = None,
        embedder: Embedder | None = None,
        cache: EmbeddingCache | str | os.PathLike[str] | bool | None = True,
        max_catalogs: int = 16,
        unreadable: Literal["error", "keep"] = "error",
    ) -> None:
        """See the class docstring; the options are those of :meth:`Router.from_catalog`."""
        if isinstance(max_catalogs, bool) or not isinstance(max_catalogs, int) or max_catalogs < 1:
            raise InvalidInputError(f"max_catalogs must be an integer >= 1, got {max_catalogs!r}")
        if unreadable not in ("error", "keep"):
            raise InvalidInputError(f'unreadable must be "error" or "keep", got {unreadable!r}')
        self.unreadable = unreadable
        if config is not None and not isinstance(config, RouterConfig):
            raise InvalidInputError(f"config must be a RouterConfig, got {type(config).__name__}")
        self.config = config or RouterConfig()
        precision = self.config.precision
        # A gateway builds indexes inside request handling: no progress bar on its stderr.
        self._embedder: Lazy[Embedder] = Lazy(
            embedder, lambda: default_embedder(precision, progress=False)
        )
        from toolgate.embedding.embedder import resolve_cache

        # Opened once: a path or True would otherwise open a connection per router built.
        self._cache = resolve_cache(Path(cache) if isinstance(cache, os.PathLike) else cache, None)
        self._max_catalogs = max_catalogs
        self._lock = threading.Lock()
        self._routers: OrderedDict[str, _Routed] = OrderedDict()
        self._building: dict[str, threading.Lock] = {}

    def filter(
        self,
        request: Mapping[str, Any],
        *,
        top_k: int | None = None,
        threshold: float | DefaultType | None = DEFAULT,
        state: State | Mapping[str, Iterable[str]] | None = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
    ) -> FilteredRequest:
        """``request`` with only the tools routed for its latest user message (see the module).

        The options are :meth:`Router.route`'s. Earlier turns (the messages before that user
        message) are blended into the query. A tool the request's tool choice names
        (OpenAI, Anthropic, Gemini ``allowedFunctionNames``) is always kept, unless ``allow``
        / ``deny`` shut it out, which is an error: the request contradicts the policy. If no
        function tool is kept at all, the tools and tool-choice keys are removed, since
        providers refuse an empty tools array.
        """
        if not isinstance(request, Mapping):
            raise InvalidInputError(f"request must be a JSON object, got {type(request).__name__}")
        key, provider = request_shape(request)
        messages = messages_of(request, key)
        off, forced = read_tool_choice(request)
        turn = _Turn(request, key, messages, last_user_turn(messages, provider), forced)
        options = {
            "top_k": top_k,
            "threshold": threshold,
            "state": state,
            # Read twice (routing, then the tool choice and unreadable tools): made lists once.
            "allow": _listed(allow),
            "deny": _listed(deny),
            # A user's words are text: "select: a hotel" or "+1" must not act as query forms.
            "forms": False,
        }
        tools = request.get("tools")
        if not off and tools:
            return self._filter_tools(turn, tools, provider, options)
        if not off and turn.found is not None and "<toolname>" in turn.found[1]:
            return self._filter_tags(turn, options)
        return FilteredRequest(dict(request), _unrouted(), (), 0, provider)

    def _filter_tools(
        self, turn: _Turn, tools: Any, provider: str, options: dict[str, Any]
    ) -> FilteredRequest:
        """Route over the request's tools array and keep the routed entries, as given."""
        if not isinstance(tools, list):
            raise InvalidInputError(f"'tools' must be a list, got {type(tools).__name__}")
        slots, read = routable_tools(tools, provider)
        if not slots:  # only provider-side tools: nothing to route
            return FilteredRequest(dict(turn.request), _unrouted(), (), 0, provider)
        if turn.found is None:
            # Nothing to route on (a system prompt alone, an image alone): the provider takes
            # such a request as it is, so it goes on with all its tools.
            return FilteredRequest(dict(turn.request), _unrouted(), (), 0, provider)
        index, query = turn.found
        routable = {i for i, _ in slots}
        # A tool choice may name a provider-side tool (Anthropic's web_search): not routed.
        builtin = {t.get("name") for i, t in enumerate(tools) if i not in routable}
        function_tools = [tools[i] for i in sorted(routable)]
        result, kept, keep = self._route(
            (function_tools, provider), read, query, turn.messages[:index],
            turn.forced - builtin, options,
        )  # fmt: skip
        out = dict(turn.request)
        entries = kept_entries(tools, [slots[k] for k in keep], routable, provider == "gemini")
        kept_tools = [entry for _, entry in entries]
        if provider == "anthropic":
            kept_tools = carry_cache_marker(tools, kept_tools)
        if kept_tools:
            out["tools"] = kept_tools
        else:
            for name in TOOL_KEYS:
                out.pop(name, None)
        positions = tuple(i for i, _ in entries)
        return FilteredRequest(out, result, kept, len(slots) - len(keep), provider, positions)

    def _filter_tags(self, turn: _Turn, options: dict[str, Any]) -> FilteredRequest:
        """Route over the ``<toolname>`` tags of the user message and strip the others' tags."""
        assert turn.found is not None  # the caller found tags in it
        index, text = turn.found
        query = text_tags.user_query(text)
        if query is None:
            query = text_tags.strip_tool_tags(text).strip()
        if not query:
            raise InvalidInputError(
                f"{turn.key}[{index}] has <toolname> tags but no question to route on: "
                "put it in <userq> or beside the tags"
            )
        tags = text_tags.parse(text, DEFAULT_SERVER)
        result, kept, _ = self._route(
            (text, "text_tags"), lambda: tags, query, turn.messages[:index], turn.forced,
            options,
        )  # fmt: skip
        names = set(kept)
        dropped = sum(1 for tag in tags if tag.name not in names)  # tags go by name
        rewrite = text_rewriter(lambda body: keep_tags(body, names))
        out = dict(turn.request)
        conversation = turn.request[turn.key]
        if isinstance(conversation, str):
            out[turn.key] = rewrite({"content": conversation})["content"]
        else:
            out[turn.key] = [rewrite(m) if i == index else m for i, m in enumerate(conversation)]
        return FilteredRequest(out, result, kept, dropped, "text_tags")

    def _route(
        self,
        source: tuple[Any, str],
        read: Callable[[], Sequence[RawTool]],
        query: str,
        history: list[Any],
        forced: frozenset[str],
        options: dict[str, Any],
    ) -> tuple[RouteResult, tuple[str, ...], list[int]]:
        """Route ``query`` over the tools ``read`` gives (``source``: what they are read from,
        and as what): the result, the names kept, and the positions (among the tools read)
        to keep."""
        routed = self._router(*source, read)
        catalog = routed.catalog
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
        result = routed.router.route(query, history=history, **options)
        allow, deny = options.get("allow"), options.get("deny")
        chosen: set[int] = set()
        for name in forced:
            chosen.update(catalog.position(tool.id) for tool in catalog.with_name(name))
            if (tool := catalog.get_exposed(name)) is not None:
                chosen.add(catalog.position(tool.id))
        if shut := _shut_out(routed.scopes, sorted(chosen), allow, deny):
            listed = ", ".join(repr(catalog.tools[row].name) for row in shut)
            raise InvalidInputError(
                f"the request's tool choice names {listed}, which the allow / deny lists shut "
                "out: change the tool choice or the lists"
            )
        rows = sorted(chosen | {catalog.position(tool_id) for tool_id in result.ids})
        named = {routed.position_of_row[row]: catalog.tools[row].name for row in rows}
        # Unreadable tools are never ranked, but the caller's lists still apply to them.
        unreadable = list(range(len(routed.unreadable)))
        shut_unreadable = set(_shut_out(routed.unreadable_scopes, unreadable, allow, deny))
        for k, (position, name) in enumerate(
            zip(routed.unreadable, routed.unreadable_names_in_order, strict=True)
        ):
            if k not in shut_unreadable:
                named[position] = name
        positions = sorted(named)
        return result, tuple(named[p] for p in positions if named[p]), positions

    def _router(self, source: Any, reader: str, read: Callable[[], Sequence[RawTool]]) -> _Routed:
        """The catalog and router for the tools ``read`` gives from ``source``, built once
        however many threads ask at the same time.

        Keyed by a digest of ``source`` as the request gives it and of ``reader`` (how it is
        read: the same array reads differently as Gemini or Anthropic tools), so a request
        whose tools were seen before is neither read nor validated again: for a large array
        that is most of a call's time. Tools without a safe key are read afresh every time.
        """
        key = _digest(source, reader)
        if key is None:
            return self._build(read)
        with self._lock:
            found = self._routers.get(key)
            if found is not None:
                self._routers.move_to_end(key)
                return found
            building = self._building.setdefault(key, threading.Lock())
        try:
            with building:  # per tools array: other arrays' requests do not wait for it
                with self._lock:
                    found = self._routers.get(key)
                if found is None:
                    found = self._build(read)
                with self._lock:
                    self._routers[key] = found
                    self._routers.move_to_end(key)
                    while len(self._routers) > self._max_catalogs:
                        self._routers.popitem(last=False)
        finally:  # also when the build fails: a bad array must not leave its lock behind
            with self._lock:
                if self._building.get(key) is building:
                    del self._building[key]
        return found

    def _build(self, read: Callable[[], Sequence[RawTool]]) -> _Routed:
        raws = list(read())
        tools, offenders = build_tools(raws)
        unreadable: tuple[int, ...] = ()
        if offenders and self.unreadable == "error":
            raise InvalidToolsError(offenders, "the request's tools")
        if offenders:
            # Told apart by index: several text tags on one line share a position.
            _, by_index = build_tools([replace(raw, where=str(k)) for k, raw in enumerate(raws)])
            unreadable = tuple(sorted({int(offender.position) for offender in by_index}))
            readable = [k for k in range(len(raws)) if k not in set(unreadable)]
            tools, _ = build_tools([raws[k] for k in readable])
            warnings.warn(
                f"cannot index {len(offenders)} of the request's tools, so they are sent on "
                f"every request: {'; '.join(map(str, offenders))}",
                CatalogWarning,
                stacklevel=6,  # filter()'s caller: _build, _router, _route, _filter_*, filter
            )
        else:
            readable = list(range(len(raws)))
        catalog = Catalog(tools)
        router = Router.from_catalog(
            catalog, config=self.config, embedder=self._embedder.get(), cache=self._cache
        )
        names = tuple(raws[k].name if isinstance(raws[k].name, str) else "" for k in unreadable)
        scopes = ScopeMatcher([t.id for t in catalog], [t.name for t in catalog])
        unreadable_scopes = ScopeMatcher([f"{DEFAULT_SERVER}/{n}" for n in names], names)
        return _Routed(
            catalog, router, tuple(readable), unreadable, names, scopes, unreadable_scopes
        )


@dataclass(frozen=True)
class _Routed:
    """A tools array read and indexed: its catalog and router, the position among the tools
    read of each catalog row, and the positions and names of the tools it could not read
    (kept on every request when the filter keeps unreadable tools)."""

    catalog: Catalog
    router: Router
    position_of_row: tuple[int, ...]
    unreadable: tuple[int, ...]
    unreadable_names_in_order: tuple[str, ...]
    scopes: ScopeMatcher  # over the catalog's rows
    unreadable_scopes: ScopeMatcher  # over the unreadable tools, in order

    @property
    def unreadable_names(self) -> frozenset[str]:
        """The names of the unreadable tools that have one."""
        return frozenset(name for name in self.unreadable_names_in_order if name)


def _listed(patterns: Iterable[str] | None) -> Any:
    """``patterns`` as a list, so it can be read twice; a string stays (it is refused)."""
    return patterns if patterns is None or isinstance(patterns, str) else list(patterns)


def _shut_out(
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


def _digest(source: Any, reader: str) -> str | None:
    """A key for the tools array ``source`` read as ``reader``, or None if it has no safe one.

    marshal serialises the parsed JSON faster than ``json.dumps`` (keying is most of a
    repeated request's time) and, being loadable back, never gives two different arrays one
    key. Version 2 writes no back-references, so the bytes do not depend on which strings
    happen to be shared objects; the same tools with keys in another order only miss the
    cache. Other mappings and sequences (a client library's own types) are keyed by their
    plain JSON form; an array holding values that have none (whose text could only be a
    ``repr`` with a memory address in it) gets no key.
    """
    try:
        data = marshal.dumps(source, 2)
    except ValueError:
        try:
            data = marshal.dumps(_plain(source), 2)
        except ValueError:
            return None
    return hashlib.sha256(reader.encode() + b"\0" + data).hexdigest()


def _plain(value: Any) -> Any:
    """``value`` with mappings as dicts, sequences as lists and subclasses of ``str``, ``int``
    and ``float`` (a ``str`` enum from a model dump) as those types, which is how JSON
    writes them; ValueError past JSON's types."""
    if value is None or type(value) in (str, bool, int, float):
        return value
    for plain in (str, bool, int, float):
        if isinstance(value, plain):
            return plain.__str__(value) if plain is str else plain(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    raise ValueError(f"no JSON form for {type(value).__name__}")


def _unrouted() -> RouteResult:
    return RouteResult(query="", form="none", tools=())

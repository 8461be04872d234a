"""Gateway filtering: cut an LLM request's tools down to the ones routed for its user turn.

A gateway between an application and the model sees whole requests. :class:`ToolFilter` takes
the user's latest message as the query, routes over the tools the request itself carries, and
returns a copy of the request holding only the routed tools, in their original order, so the
tools array stays a stable prefix for prompt caching; their schemas and descriptions are
compacted (:mod:`toolgate.formats.compact`; every other key as given) unless
``compact=False``.

Shapes are told apart by their keys: OpenAI Chat Completions (``messages``, tools
``{"type": "function", "function": {...}}``), OpenAI Responses (``input``), Anthropic Messages
(``messages``, tools with ``input_schema``) and Gemini (``contents``, ``functionDeclarations``).
A request without a tools array whose last user message is a catalog of ``<toolname>`` tags
(each with its ``<tooldescription>``, or the question in ``<userq>``) is routed over those
tags; a message that only mentions a tag goes on as it is. Provider-side tools
(``web_search``, ``googleSearch``...) are never routed and always kept. A request that
defers tools to a tool search (``defer_loading``) goes with all its tools: the deferred ones
cost no context, and its search tool may be any of the others. The allow / deny lists hold
on every request: one not routed goes without the function tools they shut out. A function tool the
catalog cannot read is an error, never dropped: a gateway that forwarded the request without
it would hide the fault from the application.

>>> from toolgate.gateway import ToolFilter
>>> gate = ToolFilter()
>>> send(gate.filter(request, top_k=5).request)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from toolgate.arguments import check_count, shown
from toolgate.catalog.scopes import pattern_list
from toolgate.errors import (
    InvalidInputError,
)
from toolgate.forks import BoundToProcess
from toolgate.formats import genai_sdk, text_tags
from toolgate.formats.raw import DEFAULT_SERVER, RawTool
from toolgate.gateway.choosing import (
    choose,
    kept_searchable,
    refuse_shut_choice,
    refuse_unmet_requirement,
    shut_functions,
    shut_out_read,
)
from toolgate.gateway.filtered import (
    FilteredRequest,
    function_names,
    verify_by_name,
    verify_cut,
    verify_other,
)
from toolgate.gateway.hosted import verify_hosted
from toolgate.gateway.indexes import (
    Indexes,
    IndexInProgress,
    filter_off_loop,
    keyed,
)
from toolgate.gateway.layouts import Layouts, compacted
from toolgate.gateway.learning import learn_now, lesson_of, verified_call_failures
from toolgate.gateway.namespaces import cut_namespaces
from toolgate.gateway.router_store import RouterStore, default_max_stored
from toolgate.lazy import Lazy
from toolgate.promotion.budget import Budget
from toolgate.routing.config import DEFAULT, DefaultType, RouterConfig
from toolgate.routing.learned_store import LearnedStore, open_store
from toolgate.routing.result import RouteResult
from toolgate.routing.router import default_embedder
from toolgate.routing.state import State
from toolgate.verify import Verdict, verify_call, verify_name

if TYPE_CHECKING:
    from toolgate.embedding.cache import EmbeddingCache
    from toolgate.embedding.embedder import Embedder

from toolgate.formats.requests import (
    SHAPES,
    ToolChoice,
    asks_unreadably,
    called_tools,
    keep_tags,
    kept_entries,
    last_user_turn,
    messages_of,
    plain_messages,
    put_tools,
    read_slots,
    read_tool_choice,
    referenced_tools,
    request_shape,
    routable_tools,
    text_rewriter,
    unqualified_names,
)
from toolgate.unicode import lone_surrogate_at, trimmed

__all__ = ["FilteredRequest", "IndexInProgress", "ToolFilter", "filter_off_loop"]


@dataclass(frozen=True)
class _Turn:
    """What filtering needs of a request: its conversation and the user turn to route on."""

    request: Mapping[str, Any]
    key: str
    messages: list[Any]
    found: tuple[int, str] | None
    choice: ToolChoice
    wait: bool
    previous: frozenset[str] | None = None


class ToolFilter(BoundToProcess):
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
    (an agent framework must not stop over one odd tool). ``compact=False`` forwards the kept
    tools exactly as given instead of compacted.

    ``store`` is a directory where each tools array's index is saved and opened from, memory
    mapped: processes serving the same arrays (a gateway's workers) build each one once and
    share its pages. It keeps the ``max_stored`` most recently used (by default
    ``max(4 * max_catalogs, 64)``), deleting older ones no process uses
    (:mod:`~toolgate.gateway.router_store`).

    ``learn`` (a learned store, as :meth:`Router.learn` takes: a SQLite path, a
    ``postgresql://`` address or a :class:`~toolgate.routing.learned_store.LearnedStore`)
    makes every tools array's router learn from use: a call that passes :meth:`verify` counts
    as used for the user message it was routed on. A store that fails is logged, not raised:
    the verdict stands without it.

    >>> gate = ToolFilter(max_catalogs=32)
    >>> filtered = gate.filter(request, top_k=5)  # doctest: +SKIP
    >>> filtered.kept, filtered.dropped_count  # doctest: +SKIP
    (('get_forecast', 'search_flights'), 14)
    """

    _elsewhere = "make one there with ToolFilter(...)"

    def __init__(
        self,
        *,
        config: RouterConfig | None = None,
        embedder: Embedder | None = None,
        cache: EmbeddingCache | str | os.PathLike[str] | bool | None = True,
        max_catalogs: int = 16,
        unreadable: Literal["error", "keep"] = "error",
        store: str | os.PathLike[str] | None = None,
        compact: bool = True,
        learn: LearnedStore | str | os.PathLike[str] | None = None,
        max_stored: int | None = None,
    ) -> None:
        """See the class docstring; the options are those of :meth:`Router.from_catalog`."""
        self.compact = bool(compact)
        if isinstance(max_catalogs, bool) or not isinstance(max_catalogs, int) or max_catalogs < 1:
            raise InvalidInputError(f"max_catalogs must be an integer >= 1, got {max_catalogs!r}")
        if max_stored is None:
            max_stored = default_max_stored(max_catalogs)
        check_count("max_stored", max_stored, minimum=1)
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
        self._cache = resolve_cache(cache, None)
        self._layouts = Layouts(max_catalogs)
        self._indexes = Indexes(
            config=self.config,
            embedder=self._embedder,
            cache=self._cache,
            store=None if store is None else RouterStore(Path(store), max_stored),
            max_catalogs=max_catalogs,
            unreadable=unreadable,
            learn=None if learn is None else open_store(learn),
        )
        self._learn_failures = verified_call_failures()

    def load_model(self) -> None:
        """Load the embedding model now rather than at the first request that needs it (a
        server tells it is ready once it is); raises :class:`~toolgate.errors.ModelError`
        when it cannot be, and tries again at the next call or request."""
        self._embedder.get()

    @property
    def learns(self) -> bool:
        """Whether the routers of this filter learn from the calls :meth:`verify` passes."""
        return self._indexes.learns

    def filter(
        self,
        request: Mapping[str, Any],
        *,
        top_k: int | None = None,
        threshold: float | DefaultType | None = DEFAULT,
        state: State | Mapping[str, Iterable[str]] | None = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
        pinned: Iterable[str] | None = None,
        budget: Budget | None = None,
        query: str | None = None,
        wait: bool = True,
        previous: Iterable[str] | None = None,
        shape: str | None = None,
    ) -> FilteredRequest:
        """``request`` with only the tools routed for its latest user message (see the module):
        the last one that asks, not one answering tool calls (text beside tool results
        included), whose task goes on.

        The options are :meth:`Router.route`'s (``include``: names kept whenever the state
        and lists admit them, as if the query named them; ``pinned``: names kept so too, and
        never dropped by ``budget``). Earlier turns (the messages
        before that user message) are blended into the query; ``query`` routes on other
        text instead. A tool the request's tool choice names
        (OpenAI, Anthropic, Gemini ``allowedFunctionNames``) is always kept, unless ``allow``
        / ``deny`` shut it out, which is an error: the request contradicts the policy. A tool
        the task is using (called since that message, or named by a ``tool_reference``) is
        kept too, where the lists admit it. ``budget`` then drops the lowest-ranked tools
        past its caps (schema tokens as the request's provider counts them), never a chosen
        or used one. A request whose tool choice
        requires a call (``"required"``, ``{"type": "any"}``, mode ``ANY``) is never judged
        to need no tool, and is refused if routing keeps none of its tools. When the route
        keeps no function tool, those the conversation already called stay (Anthropic
        refuses tool calls in a conversation without their tools); with none of those either,
        the tools and tool-choice keys are removed, since providers refuse an empty tools
        array. google-genai's ``generate_content`` keyword
        arguments as a dict (``model``, ``contents``, ``config``: SDK objects or dicts) are
        filtered as the Gemini request they stand for, and come back in their own form.

        ``previous`` names the tools kept for the answer this request follows (an OpenAI
        Responses ``previous_response_id`` the caller remembers): a request with no user text
        to route on (only ``function_call_output`` items) keeps those, and the tools its
        conversation called, instead of going with all its tools.

        ``shape`` is the request shape the caller knows (a gateway's endpoint: ``"openai"``,
        ``"openai-responses"``, ``"anthropic"`` or ``"gemini"``), read where the body does
        not tell: a Responses request without ``input`` (its stored ``prompt`` holds the
        conversation) has nothing to route on.

        A request whose tools another thread is indexing waits for that build, unless
        ``wait`` is false: it then raises :class:`IndexInProgress` (a server handling many
        requests on a few threads must not spend one per request waiting).
        """
        sdk = genai_sdk.lift(request)
        if sdk is not None:
            filtered = self.filter(
                sdk.request, top_k=top_k, threshold=threshold, state=state, allow=allow,
                deny=deny, include=include, pinned=pinned, budget=budget, query=query,
                wait=wait, previous=previous, shape=shape,
            )  # fmt: skip
            restored = sdk.restore(filtered.request, filtered.positions)
            return replace(filtered, request=restored)
        if not isinstance(request, Mapping):
            raise InvalidInputError(f"request must be a JSON object, got {type(request).__name__}")
        if budget is not None and not isinstance(budget, Budget):
            raise InvalidInputError(f"budget must be a Budget, got {type(budget).__name__}")
        if not isinstance(wait, bool):
            raise InvalidInputError(f"wait must be True or False, got a {type(wait).__name__}")
        if shape is not None and shape not in SHAPES:
            raise InvalidInputError(f"shape must be one of {list(SHAPES)}, got {shape!r}")
        key, provider = request_shape(request, shape)
        messages = plain_messages(messages_of(request, key))
        choice = read_tool_choice(request)
        found = last_user_turn(messages, provider)
        if query is not None:
            if not isinstance(query, str) or not trimmed(query):
                raise InvalidInputError(f"query must be a non-empty string, got {query!r}")
            found = (len(messages) if found is None else found[0], trimmed(query))
        if previous is not None:
            previous = frozenset(_names("previous", previous))
            if found is None and asks_unreadably(messages, provider):
                # An image (audio, a file) alone asks anew, though toolgate cannot read it:
                # all the tools go, not those of the answer it follows.
                previous = None
        turn = _Turn(request, key, messages, found, choice, wait, previous)
        options = {
            "top_k": top_k,
            "threshold": threshold,
            "state": state,
            # Read twice (routing, then the tool choice and unreadable tools): made lists once.
            "allow": _listed(allow),
            "deny": _listed(deny),
            "include": _included(include, pinned),
            "pinned": () if pinned is None else tuple(_names("pinned", pinned)),
            # A user's words are text: "select: a hotel" or "+1" must not act as query forms.
            "forms": False,
            # A request that requires a call is not one to answer with no tool.
            "decide": not choice.required,
            "budget": budget,
        }
        tools = request.get("tools")
        if not choice.off and tools:
            return self._filter_tools(turn, tools, provider, options)
        tags = None
        if not choice.off and turn.found is not None:
            tags = text_tags.catalog_in(turn.found[1], DEFAULT_SERVER)
        if tags is not None:
            return self._filter_tags(turn, tags, options)
        return self._not_routed(turn, provider, options)

    def _filter_tools(
        self, turn: _Turn, tools: Any, provider: str, options: dict[str, Any]
    ) -> FilteredRequest:
        """Route over the request's tools array and keep the routed entries, as given."""
        if not isinstance(tools, list):
            raise InvalidInputError(f"'tools' must be a list, got {type(tools).__name__}")
        layout = self._layouts.get(tools, provider)
        if not layout.slots or layout.defers:
            # Only provider-side tools: nothing to route. Tools deferred to a tool search:
            # the client chose what loads up front, and its search tool (a plain custom
            # tool may be one) must stay, or the deferred ones can never load.
            return self._not_routed(turn, provider, options)
        query: str | None
        if turn.found is not None:
            index, query = turn.found  # routing reads its first PREFIX_CHARS (query_text)
            history, since = turn.messages[:index], turn.messages[index + 1 :]
        elif turn.previous is not None:
            # A follow-up of calls' results alone: the task goes on with the tools of the
            # answer it follows (routing on nothing).
            query, history, since = None, [], turn.messages
        else:
            # Nothing to route on (a system prompt alone, an image alone): the provider takes
            # such a request as it is, so it goes on with all its tools.
            return self._not_routed(turn, provider, options)
        slots, routable, builtin = layout.slots, layout.routable, layout.builtin
        routed = self._indexes.get(
            layout.key, provider, lambda: read_slots(tools, slots, provider), turn.wait,
            layout.size,
        )  # fmt: skip
        # Tools the conversation called stay declared when the route keeps none: Anthropic
        # (and Bedrock) refuse a conversation holding tool calls without its tools. Those
        # a tool reference names always stay (Anthropic expands each from the tools), and
        # so do those called since the request routed on: the task is using them (a call
        # that failed is retried), and the kept set only grows along an agent loop, which
        # keeps the tools prefix stable for prompt caching.
        in_use = referenced_tools(turn.messages) | called_tools(since)
        if turn.found is None and turn.previous is not None:
            in_use |= turn.previous
        # A tool choice may name a tool routing leaves alone (Anthropic's web_search, a tool
        # of a Responses namespace): not routed, unless a function tool has that name too.
        around = unqualified_names(builtin) if turn.choice.names else frozenset()
        forced = frozenset(
            n for n in turn.choice.names if n not in around or routed.catalog.with_name(n)
        )
        result, kept, keep = choose(
            routed, query, history, forced, options,
            in_use=in_use, fallback=lambda: called_tools(history), compact=self.compact,
        )  # fmt: skip
        out = dict(turn.request)
        # Legacy "functions" beside the tools are not routed, but the lists hold for them too.
        allow, deny = pattern_list(options["allow"]), pattern_list(options["deny"])
        shut = shut_functions(out, allow, deny)
        entries = kept_entries(tools, [slots[k] for k in keep], routable, provider == "gemini")
        # A namespace goes unrouted, but the lists hold for its functions.
        cut = cut_namespaces(entries, allow, deny)
        cut.refuse_choice(turn.choice.names, lambda name: bool(routed.catalog.with_name(name)))
        # A required call the tool choice allows among tools routing never drops (no function
        # tool, or one it names that routing leaves alone, a namespace's function left) can
        # be made.
        left_alone = turn.choice.unrouted or bool(turn.choice.names - forced) or bool(cut.left)
        if turn.choice.required and not kept and not left_alone:
            refuse_unmet_requirement(
                "routing kept none of its tools (the threshold, the allow / deny lists or the "
                "budget left them out)"
            )
        entries = kept_searchable(tools, cut.entries, provider, out.get("tool_choice"))
        kept_tools = [
            compacted(layout, tools, i, entry, provider)
            if self.compact and i in routable
            else entry
            for i, entry in entries
        ]
        put_tools(out, tools, kept_tools, provider)
        positions = tuple(i for i, _ in entries)
        return FilteredRequest(
            out, result.route, kept, len(slots) - len(keep) + len(shut) + len(cut.shut),
            provider, positions, result.budget, routed, result.active,
            _others=(builtin - cut.shut) | function_names(out), _shut=frozenset(shut) | cut.shut,
        )  # fmt: skip

    def _not_routed(self, turn: _Turn, provider: str, options: dict[str, Any]) -> FilteredRequest:
        """``turn``'s request, not routed, with all its tools (and legacy ``functions``) but
        the function tools the allow / deny lists shut out (a deferred one too: a tool search
        could load it)."""
        allow, deny = pattern_list(options["allow"]), pattern_list(options["deny"])
        out = dict(turn.request)
        tools = out.get("tools")
        functions = shut_functions(out, allow, deny)  # a Chat request may carry either
        unchanged = FilteredRequest(
            out, _unrouted(), (), len(functions), provider, _allow=allow, _deny=deny,
            _shut=frozenset(functions),
        )  # fmt: skip
        if (allow is None and deny is None) or not isinstance(tools, list):
            return unchanged
        slots = routable_tools(tools, provider, deferred=True)
        read = read_slots(tools, slots, provider)
        shut = shut_out_read(read, allow, deny)
        if chosen := [read[k].name for k in sorted(shut) if read[k].name in turn.choice.names]:
            refuse_shut_choice(chosen)
        keep = [slot for k, slot in enumerate(slots) if k not in shut]
        routable = frozenset(i for i, _ in slots)
        # A namespace goes unrouted, but the lists hold for its functions.
        cut = cut_namespaces(kept_entries(tools, keep, routable, provider == "gemini"), allow, deny)
        if not shut and not cut.shut:
            return unchanged
        offered = {read[k].name for k in range(len(read)) if k not in shut}
        cut.refuse_choice(turn.choice.names, offered.__contains__)
        if turn.choice.required and not keep and not cut.left and not turn.choice.unrouted:
            refuse_unmet_requirement("the allow / deny lists shut out all of its tools")
        entries = kept_searchable(tools, cut.entries, provider, out.get("tool_choice"))
        put_tools(out, tools, [entry for _, entry in entries], provider)
        positions = tuple(i for i, _ in entries)
        names = {read[k].name for k in shut if isinstance(read[k].name, str)}
        return replace(
            unchanged, dropped_count=len(functions) + len(shut) + len(cut.shut),
            positions=positions, _shut=unchanged._shut | names | cut.shut,
        )  # fmt: skip

    def _filter_tags(
        self, turn: _Turn, tags: list[RawTool], options: dict[str, Any]
    ) -> FilteredRequest:
        """Route over ``tags``, the ``<toolname>`` tags of the user message, and strip the
        others' tags."""
        assert turn.found is not None  # the caller found tags in it
        index, text = turn.found
        query = text_tags.user_query(text)
        if query is None:
            query = trimmed(text_tags.strip_tool_tags(text))
        if not query:
            raise InvalidInputError(
                f"{turn.key}[{index}] has <toolname> tags but no question to route on: "
                "put it in <userq> or beside the tags"
            )
        key, size = keyed(text, "text_tags")
        routed = self._indexes.get(key, "text_tags", lambda: tags, turn.wait, size)
        result, kept, _ = choose(routed, query, turn.messages[:index], turn.choice.names, options)
        names = set(kept)
        dropped = sum(1 for tag in tags if tag.name not in names)  # tags go by name
        rewrite = text_rewriter(lambda body: keep_tags(body, names))
        out = dict(turn.request)
        # A Responses request may hold no input (a stored prompt) when the caller gives the
        # query: there is nothing to rewrite.
        conversation = turn.request.get(turn.key)
        if isinstance(conversation, str):
            out[turn.key] = rewrite({"content": conversation})["content"]
        elif conversation is not None:
            # The message as read (an SDK object given is rewritten as its JSON).
            out[turn.key] = [
                rewrite(turn.messages[i]) if i == index else m for i, m in enumerate(conversation)
            ]
        return FilteredRequest(
            out, result.route, kept, dropped, "text_tags", (), result.budget, routed,
            result.active,
        )  # fmt: skip

    def verify(self, call: Any, filtered: FilteredRequest, *, learn: bool = True) -> Verdict:
        """Check a model's tool call against the tools ``filtered`` sent (see
        :func:`toolgate.verify.verify_call`): a call to a tool the filter left out is
        ``tool_not_available``, one to no tool of the request ``unknown_tool``. A call that
        passes is learned from when the filter learns, unless ``learn`` is false (a check
        of a call not yet whole, which will be checked again, or a caller that learns
        elsewhere: :func:`~toolgate.gateway.learning.lesson_of`). Learning is done before
        ``verify`` returns, in the caller's thread, and may wait on the store's lock (up to
        its busy timeout): an event loop should check with ``learn=False`` and hand the
        lesson to a :class:`~toolgate.routing.learning_queue.LearningQueue`, as the gateway
        does.

        ``call`` is a dict in any provider's shape or the SDK's own object. A tool the filter
        forwarded without reading it (``unreadable="keep"``) passes by name alone, and so does
        one the request was sent that is no function tool (Anthropic's ``bash``, an OpenAI
        custom tool): its input is the provider's to define. A hosted tool's call (a Responses
        ``web_search_call``, Anthropic's ``mcp_tool_use``) passes if the request offered that
        tool (:mod:`~toolgate.gateway.hosted`). When the filter routed nothing,
        the call is checked by name against the request's function tools, and refused if the
        allow / deny lists shut its name out.
        """
        if not isinstance(filtered, FilteredRequest):
            raise InvalidInputError(
                f"filtered must be what ToolFilter.filter returned, got {type(filtered).__name__}"
            )
        if (hosted := verify_hosted(call, filtered)) is not None:
            return hosted
        if (cut := verify_cut(call, filtered)) is not None:
            return cut
        routed = filtered._routed
        if routed is None:
            return verify_by_name(call, filtered)
        if (passed := verify_other(call, filtered._others)) is not None:
            return passed
        verdict = verify_call(routed.catalog, list(filtered._active), call)
        if verdict.error == "unknown_tool" and verdict.name in filtered._shut:
            # A legacy function the lists took out: no tool of the catalog, but the request's.
            return verify_name(call, verdict.available, known=filtered._shut)
        if (
            not verdict.ok
            and verdict.name in routed.unreadable_names
            and verdict.name in filtered.kept
        ):
            return Verdict(True, name=verdict.name, call_id=verdict.call_id)
        if learn and (lesson := lesson_of(filtered, verdict)) is not None:
            learn_now(lesson, self._learn_failures)
        return verdict


def _listed(patterns: Iterable[str] | None) -> Any:
    """``patterns`` as a list, so it can be read twice; a string or anything else that is no
    list stays as it is, for the router to refuse by name."""
    if isinstance(patterns, (str, bytes, Mapping)) or not isinstance(patterns, Iterable):
        return patterns
    return list(patterns)


def _included(include: Iterable[str] | None, pinned: Iterable[str] | None) -> Any:
    """The names routed as if the query named them: ``include``'s and the ``pinned`` ones."""
    if pinned is None:
        return _listed(include)
    listed = _listed(include)
    if listed is not None and not isinstance(listed, list):
        return listed  # no list: the router refuses it by name
    return [*(listed or ()), *_names("pinned", pinned)]


def _names(option: str, names: Iterable[str]) -> Iterable[str]:
    """``names``, checked to be strings (a lone string is refused: it is no list)."""
    if isinstance(names, (str, bytes, Mapping)) or not isinstance(names, Iterable):
        raise InvalidInputError(f"{option} must be a list of tool names, got {names!r}")
    listed = list(names)
    if not all(isinstance(name, str) for name in listed):
        raise InvalidInputError(f"{option} must be a list of tool names, got {listed!r}")
    for name in listed:
        # No tool name holds one (the catalog refuses them); named here, or the router
        # blames the include list pinned names are routed with.
        if (bad := lone_surrogate_at(name)) is not None:
            raise InvalidInputError(
                f"{option} entries must be tool names, got {shown(name)} (a lone surrogate "
                f"at character {bad})"
            )
    return listed


def _unrouted() -> RouteResult:
    return RouteResult(query="", form="none", tools=())

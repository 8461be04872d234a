"""LangChain and LangGraph: show the model, on each call, only the tools routed for the turn.

:class:`ToolgateMiddleware` plugs into ``langchain.agents.create_agent`` (LangChain >= 1.0) in
place of ``LLMToolSelectorMiddleware`` (whose ``max_tools`` is ``top_k`` here; ``always_include``
is the same), without its extra model call: before each model call it routes the latest user
message (earlier turns blended in) over the request's tools and hands the model only the
routed ones, in their original order.

:class:`ToolSelector` does the same for a graph built by hand: call it in the node that binds
tools (``model.bind_tools(selector.select(tools, state["messages"]))``; in an async node,
``await selector.aselect(...)``, which routes off the event loop).

Both go through :class:`toolgate.gateway.ToolFilter`: the tools become one OpenAI Chat
request, so a tool set seen before is not indexed again, a provider-side tool given as a dict
(``{"type": "web_search"}``) is always kept, and a tool the tool choice names stays (the
caller forced it, so routing does not overrule it).

The middleware also checks the model's tool calls before the agent runs them: a call to a
tool the model was not shown on that call is not run; the model gets the verdict of
:func:`toolgate.verify.verify_name` as the tool's error result instead (the tools it may
call, the closest name). A tool it asked for that exists is routed on its next call as if
the user had named it (still subject to ``allow`` / ``deny``), so it can recover.

>>> from langchain.agents import create_agent
>>> from toolgate.integrations.langchain import ToolgateMiddleware
>>> agent = create_agent(model, tools, middleware=[ToolgateMiddleware(top_k=5)])  # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from toolgate.arguments import check_count
from toolgate.errors import InvalidInputError
from toolgate.formats.compact import compact_entry
from toolgate.formats.raw import RawTool
from toolgate.gateway.choosing import shut_out_read
from toolgate.gateway.filter import ToolFilter, filter_off_loop
from toolgate.gateway.filtered import FilteredRequest
from toolgate.gateway.learning import learn_now, lesson_of, verified_call_failures
from toolgate.integrations import needs_extra
from toolgate.integrations.langchain_calls import OFFERED, asked_for, refusal
from toolgate.integrations.langchain_messages import openai_messages
from toolgate.routing.config import DEFAULT, DefaultType
from toolgate.routing.learned_store import LearnedStore, open_store
from toolgate.routing.learning_queue import LearningQueue, Lesson

with needs_extra("langchain"):
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
        ToolCallRequest,
    )
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain.agents.structured_output import ToolStrategy
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ToolMessage,
    )
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.types import Command
    from typing_extensions import NotRequired, TypedDict, Unpack

__all__ = ["SelectorOptions", "ToolSelector", "ToolgateMiddleware", "ToolgateState"]

AnyTool = BaseTool | dict[str, Any]
# LangChain's tool choices that name no tool, as OpenAI spells them.
_CHOICE_WORDS = {"auto": "auto", "any": "required", "required": "required", "none": "none"}


class SelectorOptions(TypedDict, total=False):
    """:class:`ToolSelector`'s options, which :class:`ToolgateMiddleware` takes too."""

    top_k: int
    always_include: Iterable[str]
    threshold: float | DefaultType | None
    allow: Iterable[str] | None
    deny: Iterable[str] | None
    tool_filter: ToolFilter | None
    learn: LearnedStore | str | os.PathLike[str] | None


class ToolSelector:
    """Picks the tools routed for a conversation's latest user message.

    ``top_k`` is the most tools routed per call; tools named in ``always_include`` are added
    to them (they do not count against ``top_k``, and ``allow`` / ``deny`` must let them
    through). ``threshold``, ``allow`` and ``deny`` are :meth:`toolgate.Router.route`'s
    (the threshold left out: the filter's configured one).
    ``tool_filter`` is the :class:`ToolFilter` to route through (its options: config,
    embedder, embedding cache, how many tool sets it keeps, and what becomes of a tool it
    cannot read: pass ``unreadable="keep"`` for the behaviour of the selector's own, which
    shows such a tool on every call instead of raising); one is made on first use
    otherwise, learning into ``learn`` when given (a learned store, as
    :meth:`toolgate.Router.learn` takes; see :class:`ToolgateMiddleware`). A selector is safe
    to share between threads.
    """

    def __init__(
        self,
        *,
        top_k: int = 5,
        always_include: Iterable[str] = (),
        threshold: float | DefaultType | None = DEFAULT,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        tool_filter: ToolFilter | None = None,
        learn: LearnedStore | str | os.PathLike[str] | None = None,
    ) -> None:
        """See the class docstring."""
        check_count("top_k", top_k, minimum=1)
        if tool_filter is not None and learn is not None:
            raise InvalidInputError("pass learn to the tool_filter given, not to the selector")
        if isinstance(always_include, str):
            raise InvalidInputError("always_include must be a list of tool names, not a string")
        if tool_filter is not None and not isinstance(tool_filter, ToolFilter):
            raise InvalidInputError(
                f"tool_filter must be a toolgate ToolFilter, got {type(tool_filter).__name__}"
            )
        self.top_k = top_k
        self.always_include = frozenset(always_include)
        self._options: dict[str, Any] = {
            "threshold": threshold,
            "allow": None if allow is None else list(allow),
            "deny": None if deny is None else list(deny),
        }
        # The lists are the operator's: a tool shown on every call must not pass them.
        included = sorted(self.always_include)
        if shut := shut_out_read([RawTool("tool_call", name=n) for n in included], *self.lists):
            denied = [included[i] for i in sorted(shut)]
            raise InvalidInputError(
                f"always_include names tools the allow / deny lists shut out: {denied}"
            )
        self._filter = tool_filter
        # Opened now: a bad store is the caller's error here, not at the first model call.
        self._learn = None if learn is None else open_store(learn)
        self._lock = threading.Lock()
        self._converted = _ConvertedTools()
        # What the async middleware's calls teach, learned by one worker thread (started by
        # the first lesson): an agent's step never waits on the store's lock.
        self._lessons = LearningQueue()
        self._learn_failures = verified_call_failures()  # the sync form's, learned in place
        # Stopped with the selector, once it has learned what waits: a selector made per
        # request left a thread, holding the last lesson's router, behind for each.
        weakref.finalize(self, self._lessons.finish).atexit = False

    @property
    def lists(self) -> tuple[list[str] | None, list[str] | None]:
        """The ``allow`` and ``deny`` lists routing applies."""
        return self._options["allow"], self._options["deny"]

    @property
    def tool_filter(self) -> ToolFilter:
        """The :class:`ToolFilter` routing goes through (made on first use: one that keeps
        the tools it cannot read, since an agent must not stop over one odd tool)."""
        with self._lock:
            if self._filter is None:
                self._filter = ToolFilter(unreadable="keep", learn=self._learn)
            return self._filter

    def select(
        self,
        tools: Sequence[AnyTool],
        messages: Sequence[BaseMessage | dict[str, Any]],
        *,
        tool_choice: Any = None,
        include: Iterable[str] | None = None,
        compact: bool = False,
    ) -> list[AnyTool]:
        """The tools of ``tools`` to show the model for ``messages``, in ``tools``' order.

        ``tools`` holds LangChain tools and tool dicts as ``bind_tools`` takes them;
        ``messages`` the conversation (LangChain messages or OpenAI-style dicts). With no
        user text to route on (no user message yet, an image alone) or with tool calling off
        (``tool_choice="none"``), every tool is kept that the ``allow`` / ``deny`` lists let
        through. So is a tool toolgate cannot index
        (a :class:`~toolgate.catalog.CatalogWarning` names it, once per tool list), unless
        the selector was given a ``tool_filter`` that raises for such tools. A tool the
        ``tool_choice`` names is always kept. ``include`` names tools to route as if the
        user had named them (the ``allow`` / ``deny`` lists still apply). A request the router
        judged to need none of the tools (``RouteResult.no_tool``, "thanks!") keeps only
        ``always_include``, the tool the ``tool_choice`` names and the tools the conversation
        already called. A tool choice that requires a call (``"any"``, ``"required"``,
        ``True``) is never judged so; if the ``threshold``, the ``allow`` / ``deny`` lists or
        the budget still leave no tool, it is an :class:`~toolgate.errors.InvalidInputError`
        (a required call must not silently become a text answer).
        ``compact`` returns each function tool as its compact OpenAI definition
        (:mod:`toolgate.formats.compact`) instead of the tool given: for a model request,
        not for a tool node, which runs the tools themselves. A LangChain tool with
        ``extras`` (provider settings such as Anthropic's ``cache_control``) is returned as
        given, since providers read those from the tool object only; and a definition binds
        as it is, so do not compact for ``bind_tools(..., strict=True)``.
        """
        return self._select(
            tools, messages, tool_choice=tool_choice, include=include, compact=compact
        )[0]

    async def aselect(
        self,
        tools: Sequence[AnyTool],
        messages: Sequence[BaseMessage | dict[str, Any]],
        *,
        tool_choice: Any = None,
        include: Iterable[str] | None = None,
        compact: bool = False,
    ) -> list[AnyTool]:
        """:meth:`select` for an async node: it routes in a worker thread, off the event loop
        (indexing new tools takes seconds), holding none while another indexes the same."""
        # Listed once: a call retried after another's indexing reads them again.
        include = None if include is None else list(include)
        options = {"tool_choice": tool_choice, "include": include, "compact": compact}
        call = partial(self._select, list(tools), messages, wait=False, **options)
        return (await filter_off_loop(call))[0]

    def _select(
        self,
        tools: Sequence[AnyTool],
        messages: Sequence[BaseMessage | dict[str, Any]],
        *,
        tool_choice: Any,
        include: Iterable[str] | None,
        compact: bool,
        wait: bool = True,
    ) -> tuple[list[AnyTool], FilteredRequest | None]:
        """:meth:`select`, and the filtered request behind it (None: nothing was routed);
        ``wait`` is :meth:`ToolFilter.filter`'s."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise InvalidInputError(
                f"messages must be a list of messages, got {type(messages).__name__}"
            )
        tools = list(tools)
        if self.always_include:
            names = {name for name in map(_tool_name, tools) if name is not None}
            if missing := sorted(self.always_include - names):
                raise InvalidInputError(
                    f"always_include names tools the request does not have: {missing}; "
                    f"it has {sorted(names)}"
                )
        if not tools:
            return [], None
        toolset = self._converted.get(tools)
        request: dict[str, Any] = {
            "messages": openai_messages(messages),
            "tools": toolset.definitions,
        }
        choice = _openai_tool_choice(tool_choice, toolset.builtin_names)
        if choice is not None:
            request["tool_choice"] = choice
        # Routed as pinned, not added after: a required call they can take is met, and
        # calls to them verify against the filtered request (learning included).
        pinned = sorted(self.always_include) or None
        filtered = self.tool_filter.filter(
            request, top_k=self.top_k, include=include, pinned=pinned, wait=wait, **self._options
        )
        if filtered.result.form == "none":
            # Not routed: as given, but for those the lists shut out (then in positions).
            if not filtered.dropped_count:
                return tools, None
            let_through = set(filtered.positions)
            return [tool for i, tool in enumerate(tools) if i in let_through], None
        kept = set(filtered.positions)
        if compact:
            definitions = toolset.definitions
            shown = [_shown(tools[i], definitions[i]) for i in range(len(tools)) if i in kept]
            return shown, filtered
        return [tool for i, tool in enumerate(tools) if i in kept], filtered

    def learn_from(self, message: Any, filtered: FilteredRequest | None) -> None:
        """Check each tool call of the model's ``message`` against ``filtered`` (the request
        it answered), so that a call that passes is learned from, when the filter learns."""
        for lesson in self._lessons_in(message, filtered):
            learn_now(lesson, self._learn_failures)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until what the async middleware's model calls taught is learned (at most
        ``timeout`` seconds); whether it was. Those lessons are learned by a worker thread,
        which a process leaving drops; a selector let go stops it once they are learned."""
        return self._lessons.join(timeout)

    def _lessons_in(self, message: Any, filtered: FilteredRequest | None) -> list[Lesson]:
        """What the tool calls of ``message`` that pass against ``filtered`` teach."""
        if filtered is None or not isinstance(message, AIMessage) or not self.tool_filter.learns:
            return []
        calls = [{"name": call["name"], "arguments": call["args"]} for call in message.tool_calls]
        verdicts = [self.tool_filter.verify(call, filtered, learn=False) for call in calls]
        return [lesson for v in verdicts if (lesson := lesson_of(filtered, v)) is not None]


class ToolgateState(AgentState[Any]):
    """The agent state :class:`ToolgateMiddleware` keeps: the names of the tools the latest
    model call was shown (None: that call was not narrowed), which its tool calls are
    checked against. Private to the agent: not in its input or output."""

    toolgate_offered: NotRequired[Annotated[list[str] | None, PrivateStateAttr]]


class ToolgateMiddleware(AgentMiddleware[ToolgateState, Any, Any]):
    """``create_agent`` middleware: each model call sees only the tools routed for its turn,
    and the agent runs only the calls it makes to those tools.

    Takes :class:`ToolSelector`'s options, or a ``selector`` to share one (and its indexes)
    between agents. When nothing is routed (a ``threshold`` no tool reaches, or a request the
    router judged to need none of the tools: ``RouteResult.no_tool``), the model is
    called without tools and without its tool choice; but a tool choice that requires a call
    (``"any"``, ``"required"``, ``True``) is never judged to need no tool, and if the
    ``threshold``, ``allow`` / ``deny`` or budget leave it no tool, the model call raises
    :class:`~toolgate.errors.InvalidInputError` (sync or async) instead of calling the
    model: a required call must not silently become a text answer. A
    tool call to a tool that call was not shown is answered with the verdict's error as
    its tool result, and the tool is not run (see the module). The model is shown each routed
    function tool as its compact OpenAI definition (which every LangChain chat model binds),
    unless ``compact=False``: the agent's tool node still runs the tools themselves, found by
    name. A tool with ``extras`` is shown as given (see :meth:`ToolSelector.select`), and so
    is every tool of a request that binds strictly (``strict`` in its model settings, or a
    structured output the agent may bind with ``strict=True``): a definition would not take
    it. A request holding a tool deferred to a tool search (``defer_loading`` in ``extras``)
    goes unrouted: list ``ProviderToolSearchMiddleware`` first, so routing sees the mark.
    """

    state_schema = ToolgateState

    def __init__(
        self,
        *,
        selector: ToolSelector | None = None,
        compact: bool = True,
        **options: Unpack[SelectorOptions],
    ) -> None:
        """See the class docstring."""
        super().__init__()
        self.compact = bool(compact)
        if selector is not None and options:
            raise InvalidInputError(
                f"pass either a selector or its options, not both (got {sorted(options)})"
            )
        self.selector = selector if selector is not None else ToolSelector(**options)

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ExtendedModelResponse:
        """Call ``handler`` with the request's tools cut down to the routed ones."""
        narrowed, filtered = self._narrowed(request)
        response = handler(narrowed)
        if filtered is not None and self.selector.tool_filter.learns:
            self._learn(response, filtered)
        return _recorded(response, request, narrowed)

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ExtendedModelResponse:
        """The async form; routing runs in a worker thread, off the event loop, and a call
        waiting for another's indexing of the same tools holds none (agents on one loop share
        a few). What the answer's calls teach is queued: the step never waits for the store
        (another process's write lock, up to its busy timeout; see
        :meth:`ToolSelector.drain`)."""
        narrowed, filtered = await filter_off_loop(partial(self._narrowed, request, wait=False))
        response = await handler(narrowed)
        selector = self.selector
        for message in _messages(response):
            for lesson in selector._lessons_in(message, filtered):
                selector._lessons.submit(lesson)
        return _recorded(response, request, narrowed)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the call through ``handler`` if the model was shown its tool, else refuse it."""
        refused = refusal(request, *self.selector.lists)
        return refused if refused is not None else handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """The async form of :meth:`wrap_tool_call`."""
        refused = refusal(request, *self.selector.lists)
        return refused if refused is not None else await handler(request)

    def _narrowed(
        self, request: ModelRequest, *, wait: bool = True
    ) -> tuple[ModelRequest, FilteredRequest | None]:
        """The request with its tools cut down, and the filtered request behind it; ``wait``
        is :meth:`ToolFilter.filter`'s."""
        if not request.tools:
            return request, None
        compact = self.compact and not _binds_strictly(request)
        tools, filtered = self.selector._select(
            request.tools,
            request.messages,
            tool_choice=request.tool_choice,
            include=asked_for(request.messages),
            compact=compact,
            wait=wait,
        )
        if len(tools) == len(request.tools) and not compact:
            return request, filtered
        if not tools:
            return request.override(tools=[], tool_choice=None), filtered
        return request.override(tools=tools), filtered

    def _learn(self, response: ModelResponse | AIMessage, filtered: FilteredRequest) -> None:
        """Learn from the tool calls of the model's answer (see :meth:`ToolSelector.learn_from`)."""
        for message in _messages(response):
            self.selector.learn_from(message, filtered)


def _messages(response: ModelResponse | AIMessage) -> list[Any]:
    """The messages of a model's answer."""
    return [response] if isinstance(response, AIMessage) else list(response.result)


def _binds_strictly(request: ModelRequest) -> bool:
    """Whether the agent may bind the request's tools with ``strict=True``: asked in its model
    settings, or for a structured output the provider enforces (the agent then sets it for
    OpenAI models), which a tool definition given as a dict passes through without."""
    if request.model_settings.get("strict"):
        return True
    return request.response_format is not None and not isinstance(
        request.response_format, ToolStrategy
    )


def _recorded(
    response: ModelResponse | AIMessage, request: ModelRequest, narrowed: ModelRequest
) -> ExtendedModelResponse:
    """The model's response, with the names of the tools it was shown kept in the state."""
    if isinstance(response, AIMessage):
        response = ModelResponse(result=[response])
    offered = None
    if request.tools:
        offered = [name for name in map(_tool_name, narrowed.tools) if name is not None]
    return ExtendedModelResponse(
        model_response=response, command=Command(update={OFFERED: offered})
    )


@dataclass(frozen=True)
class _ToolSet:
    """A tool list in the form routing takes.

    ``definitions`` is each tool as an OpenAI Chat tool, in order. ``builtin_names`` are the
    types of nameless provider tools (``{"type": "web_search"}``), which a tool choice may
    name. ``tools`` keeps the objects alive, so their ids stay theirs while the entry lives.
    """

    tools: tuple[AnyTool, ...]
    definitions: list[Any]
    builtin_names: frozenset[str]


class _ConvertedTools:
    """The :class:`_ToolSet` of the tool lists seen lately, so a call does not convert again.

    Keyed by each tool's identity, with its name and description, so a tool renamed or
    redescribed in place is converted again.
    """

    _SIZE = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Any, ...], _ToolSet] = OrderedDict()

    def get(self, tools: list[AnyTool]) -> _ToolSet:
        key = tuple(
            (id(t), t.name, t.description) if isinstance(t, BaseTool) else id(t) for t in tools
        )
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        toolset = _convert(tools)
        with self._lock:
            self._entries[key] = toolset
            while len(self._entries) > self._SIZE:
                self._entries.popitem(last=False)
        return toolset


def _convert(tools: list[AnyTool]) -> _ToolSet:
    definitions = [_definition(tool, i) for i, tool in enumerate(tools)]
    builtin = {
        str(d["type"])
        for d in definitions
        if "name" not in d and d.get("type") not in (None, "function", "custom")
    }
    return _ToolSet(tuple(tools), definitions, frozenset(builtin))


def _definition(tool: AnyTool, index: int) -> dict[str, Any]:
    """A tool as an OpenAI Chat tool; a dict goes as given (it may be a provider's tool). A
    tool deferred to the provider's tool search keeps ``defer_loading``, which the conversion
    drops: the filter leaves a request holding one unrouted, or the search could not load it."""
    if isinstance(tool, dict):
        return tool
    if not isinstance(tool, BaseTool):
        raise InvalidInputError(
            f"tools[{index}] must be a LangChain tool or a tool dict, got {type(tool).__name__}"
        )
    definition = convert_to_openai_tool(tool)
    extras = getattr(tool, "extras", None)
    if isinstance(extras, Mapping) and extras.get("defer_loading") is True:
        return {**definition, "defer_loading": True}
    return definition


def _shown(tool: AnyTool, definition: dict[str, Any]) -> AnyTool:
    """What a compacting call shows of ``tool``: its compact definition, or the tool itself
    when it has ``extras``, which providers read from the tool object alone (Anthropic's
    ``cache_control``, ``defer_loading``, ``input_examples``)."""
    if isinstance(tool, BaseTool) and getattr(tool, "extras", None):
        return tool
    return _compacted(definition)


def _compacted(definition: dict[str, Any]) -> dict[str, Any]:
    """A function tool's definition compacted (OpenAI Chat or Anthropic shape); any other
    (a provider's tool) as given."""
    if isinstance(definition.get("function"), dict):
        return compact_entry(definition, "openai")
    if "input_schema" in definition and "type" not in definition:
        return compact_entry(definition, "anthropic")
    return definition


def _tool_name(tool: Any) -> str | None:
    """The name a LangChain tool or an OpenAI / Anthropic tool dict goes by."""
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, dict):
        inner = tool.get("function", tool)
        name = inner.get("name") if isinstance(inner, dict) else None
        return name if isinstance(name, str) else None
    return None


def _openai_tool_choice(choice: Any, builtin_names: frozenset[str]) -> Any:
    """A LangChain tool choice (``"any"``, a tool name, a dict) as OpenAI Chat spells it.

    A provider-side tool (``"web_search"``) is never routed out, so choosing it forces nothing.
    """
    if choice is None or choice is False or isinstance(choice, dict):
        return choice or None
    if isinstance(choice, str):
        word = _CHOICE_WORDS.get(choice)
        if word is not None:
            return word
        if choice in builtin_names:
            return None
        return {"type": "function", "function": {"name": choice}}
    if choice is True:  # bind_tools(tool_choice=True): call the one tool there is
        return "required"
    raise InvalidInputError(
        f"tool_choice must be a tool name, 'auto', 'any', 'none' or a dict, got {choice!r}"
    )

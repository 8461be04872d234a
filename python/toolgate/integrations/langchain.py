"""LangChain and LangGraph: show the model, on each call, only the tools routed for the turn.

:class:`ToolgateMiddleware` plugs into ``langchain.agents.create_agent`` (LangChain >= 1.0) in
place of ``LLMToolSelectorMiddleware`` (whose ``max_tools`` is ``top_k`` here; ``always_include``
is the same), without its extra model call: before each model call it routes the latest user
message (earlier turns blended in) over the request's tools and hands the model only the
routed ones, in their original order.

:class:`ToolSelector` does the same for a graph built by hand: call it in the node that binds
tools (``model.bind_tools(selector.select(tools, state["messages"]))``).

Both go through :class:`toolgate.gateway.ToolFilter`: the tools become one OpenAI Chat
request, so a tool set seen before is not indexed again, a provider-side tool given as a dict
(``{"type": "web_search"}``) is always kept, and a tool the tool choice names stays.

>>> from langchain.agents import create_agent
>>> from toolgate.integrations.langchain import ToolgateMiddleware
>>> agent = create_agent(model, tools, middleware=[ToolgateMiddleware(top_k=5)])  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, convert_to_openai_messages
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from toolgate.config import DEFAULT, DefaultType
from toolgate.errors import InvalidInputError
from toolgate.gateway import ToolFilter

__all__ = ["ToolSelector", "ToolgateMiddleware"]

AnyTool = BaseTool | dict[str, Any]
# LangChain's tool choices that name no tool, as OpenAI spells them.
_CHOICE_WORDS = {"auto": "auto", "any": "required", "required": "required", "none": "none"}


class ToolSelector:
    """Picks the tools routed for a conversation's latest user message.

    ``top_k`` is the most tools routed per call; tools named in ``always_include`` are added
    to them (they do not count against ``top_k``). ``threshold``, ``allow`` and ``deny`` are
    :meth:`toolgate.Router.route`'s (the threshold left out: the filter's configured one).
    ``tool_filter`` is the :class:`ToolFilter` to route
    through (its options: config, embedder, embedding cache, how many tool sets it keeps);
    one is made on first use otherwise. A selector is safe to share between threads.
    """

    def __init__(
        self,
        *,
        top_k: int = 8,
        always_include: Iterable[str] = (),
        threshold: float | DefaultType | None = DEFAULT,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        tool_filter: ToolFilter | None = None,
    ) -> None:
        """See the class docstring."""
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise InvalidInputError(f"top_k must be an integer >= 1, got {top_k!r}")
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
        self._filter = tool_filter
        self._lock = threading.Lock()
        self._converted = _ConvertedTools()

    @property
    def tool_filter(self) -> ToolFilter:
        """The :class:`ToolFilter` routing goes through."""
        with self._lock:
            if self._filter is None:
                self._filter = ToolFilter()
            return self._filter

    def select(
        self,
        tools: Sequence[AnyTool],
        messages: Sequence[BaseMessage | dict[str, Any]],
        *,
        tool_choice: Any = None,
    ) -> list[AnyTool]:
        """The tools of ``tools`` to show the model for ``messages``, in ``tools``' order.

        ``tools`` holds LangChain tools and tool dicts as ``bind_tools`` takes them;
        ``messages`` the conversation (LangChain messages or OpenAI-style dicts). With no
        user message yet, or with tool calling off (``tool_choice="none"``), every tool is
        kept; a user message without text (an image alone) is an error.
        """
        tools = list(tools)
        names = {tool.name for tool in tools if isinstance(tool, BaseTool)}
        missing = sorted(self.always_include - names)
        if missing:
            raise InvalidInputError(
                f"always_include names tools the request does not have: {missing}; "
                f"it has {sorted(names)}"
            )
        conversation = convert_to_openai_messages(list(messages))
        if not tools or not any(message.get("role") == "user" for message in conversation):
            return tools
        definitions = self._converted.get(tools)
        request: dict[str, Any] = {"messages": conversation, "tools": definitions}
        choice = _openai_tool_choice(tool_choice)
        if choice is not None:
            request["tool_choice"] = choice
        filtered = self.tool_filter.filter(request, top_k=self.top_k, **self._options)
        if filtered.result.form == "none":  # nothing was routed: the request stands as given
            return tools
        kept = {id(definition) for definition in filtered.request.get("tools", ())}
        return [
            tool
            for tool, definition in zip(tools, definitions, strict=True)
            if id(definition) in kept
            or (isinstance(tool, BaseTool) and tool.name in self.always_include)
        ]


class ToolgateMiddleware(AgentMiddleware):
    """``create_agent`` middleware: each model call sees only the tools routed for its turn.

    Takes :class:`ToolSelector`'s options, or a ``selector`` to share one (and its indexes)
    between agents. When nothing is routed (a ``threshold`` no tool reaches), the model is
    called without tools, and a tool choice that would force a call is dropped with them.
    """

    def __init__(self, *, selector: ToolSelector | None = None, **options: Any) -> None:
        """See the class docstring."""
        super().__init__()
        if selector is not None and options:
            raise InvalidInputError(
                f"pass either a selector or its options, not both (got {sorted(options)})"
            )
        self.selector = selector if selector is not None else ToolSelector(**options)

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        """Call ``handler`` with the request's tools cut down to the routed ones."""
        return handler(self._narrowed(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """The async form; routing runs in a worker thread, off the event loop."""
        narrowed = await asyncio.to_thread(self._narrowed, request)
        return await handler(narrowed)

    def _narrowed(self, request: ModelRequest) -> ModelRequest:
        if not request.tools:
            return request
        tools = self.selector.select(
            request.tools, request.messages, tool_choice=request.tool_choice
        )
        if len(tools) == len(request.tools):
            return request
        if not tools:
            return request.override(tools=[], tool_choice=None)
        return request.override(tools=tools)


class _ConvertedTools:
    """OpenAI definitions of the tool lists seen lately, so a call does not convert again.

    Keyed by the identity of each tool in the list; the entry holds the tools themselves, so
    an id cannot be reused by a new object while its entry lives.
    """

    _SIZE = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, ...], tuple[list[AnyTool], list[Any]]] = OrderedDict()

    def get(self, tools: list[AnyTool]) -> list[Any]:
        key = tuple(map(id, tools))
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found[1]
        definitions = [_definition(tool, i) for i, tool in enumerate(tools)]
        with self._lock:
            self._entries[key] = (tools, definitions)
            while len(self._entries) > self._SIZE:
                self._entries.popitem(last=False)
        return definitions


def _definition(tool: AnyTool, index: int) -> Any:
    """A tool as an OpenAI Chat tool; a dict goes as given (it may be a provider's tool)."""
    if isinstance(tool, dict):
        return tool
    if not isinstance(tool, BaseTool):
        raise InvalidInputError(
            f"tools[{index}] must be a LangChain tool or a tool dict, got {type(tool).__name__}"
        )
    return convert_to_openai_tool(tool)


def _openai_tool_choice(choice: Any) -> Any:
    """A LangChain tool choice (``"any"``, a tool name, a dict) as OpenAI Chat spells it."""
    if choice is None or isinstance(choice, dict):
        return choice
    if isinstance(choice, str):
        word = _CHOICE_WORDS.get(choice)
        return word if word is not None else {"type": "function", "function": {"name": choice}}
    if choice is True:  # bind_tools(tool_choice=True): call the one tool there is
        return "required"
    raise InvalidInputError(
        f"tool_choice must be a tool name, 'auto', 'any', 'none' or a dict, got {choice!r}"
    )

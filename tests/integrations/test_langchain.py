"""The LangChain integration: ToolSelector on its own, and ToolgateMiddleware in create_agent."""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    HumanInTheLoopMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.structured_output import ProviderStrategy, ToolStrategy
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import BaseModel

from tests.gateway.conftest import CountingEmbedder
from toolgate import CatalogWarning, InvalidInputError
from toolgate.embedding.embedder import Embedder
from toolgate.formats.compact import compact_text
from toolgate.gateway.filter import ToolFilter
from toolgate.integrations import langchain as integration
from toolgate.integrations.langchain import ToolgateMiddleware, ToolSelector
from toolgate.integrations.langchain_messages import openai_messages
from toolgate.routing.learned_store import SqliteStore

# name, docstring; every tool takes one string argument
SPECS = [
    ("get_weather", "Get the current weather and a 7-day forecast for a city."),
    ("search_flights", "Search flights between two airports on a given date."),
    ("send_email", "Send an email to a recipient with a subject and a body."),
    ("create_event", "Create a calendar event with a title, start and end time."),
    ("convert_currency", "Convert an amount of money from one currency to another."),
    ("read_file", "Read a text file from the local disk."),
    ("book_hotel", "Book a hotel room in a city for a range of nights."),
    ("translate_text", "Translate text from one language into another."),
]
WEATHER = "Will it rain in Lisbon tomorrow? I need to know before I go out."


def make_tool(name: str, doc: str) -> BaseTool:
    def run(value: str) -> str:
        return f"{name}({value})"

    return StructuredTool.from_function(run, name=name, description=doc)


@pytest.fixture(scope="module")
def tools() -> list[BaseTool]:
    return [make_tool(name, doc) for name, doc in SPECS]


@pytest.fixture(scope="module")
def tool_filter() -> ToolFilter:
    # As a selector makes its own: tools it cannot read are kept, not an error.
    return ToolFilter(embedder=Embedder(precision="int8"), cache=None, unreadable="keep")


def names(tools: Sequence[Any]) -> list[str]:
    return [name_of(t) for t in tools]


def name_of(tool: Any) -> str:
    """A LangChain tool's name, a function definition's, or a provider tool's type."""
    if isinstance(tool, BaseTool):
        return tool.name
    if "function" in tool:
        return str(tool["function"]["name"])
    return str(tool.get("type", "?"))


def in_request_order(picked: Sequence[Any], tools: Sequence[Any]) -> bool:
    positions = [next(i for i, t in enumerate(tools) if t is p) for p in picked]
    return positions == sorted(positions)


def test_select_keeps_the_routed_tools_in_their_order(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    selector = ToolSelector(top_k=2, tool_filter=tool_filter)
    picked = selector.select(tools, [HumanMessage(WEATHER)])
    assert "get_weather" in names(picked)
    assert len(picked) == 2
    assert all(any(p is t for t in tools) for p in picked)  # the caller's own objects
    assert in_request_order(picked, tools)
    german = selector.select(tools, [HumanMessage("Put this paragraph into German for me.")])
    assert "translate_text" in names(german)
    assert "get_weather" not in names(german)


def test_earlier_turns_and_tool_results_are_read(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    selector = ToolSelector(top_k=3, tool_filter=tool_filter)
    messages = [
        HumanMessage("What's the forecast for Oslo this week?"),
        AIMessage("", tool_calls=[{"name": "get_weather", "args": {"value": "Oslo"}, "id": "c1"}]),
        ToolMessage("Rain all week.", tool_call_id="c1"),
        HumanMessage([{"type": "text", "text": "and for Bergen?"}]),
    ]
    assert "get_weather" in names(selector.select(tools, messages))


def test_always_include_is_added_and_checked(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    selector = ToolSelector(top_k=1, always_include=["read_file"], tool_filter=tool_filter)
    picked = names(selector.select(tools, [HumanMessage(WEATHER)]))
    assert picked == ["get_weather", "read_file"]
    strict = ToolSelector(always_include=["delete_repo"], tool_filter=tool_filter)
    with pytest.raises(InvalidInputError, match=r"does not have: \['delete_repo'\]"):
        strict.select(tools, [HumanMessage(WEATHER)])


def test_always_include_meets_a_required_call_routing_leaves_no_tool_for(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    # The tool shown on every call can take the required call, as a ToolFilter's pinned
    # tool does: a threshold no tool reaches is no reason to refuse the request.
    selector = ToolSelector(always_include=["read_file"], threshold=0.99, tool_filter=tool_filter)
    picked = selector.select(tools, [HumanMessage(WEATHER)], tool_choice="any")
    assert names(picked) == ["read_file"]
    # And a call to it is checked against what the model was shown: it passes.
    _, filtered = selector._select(
        tools, [HumanMessage(WEATHER)], tool_choice="any", include=None, compact=False
    )
    assert filtered is not None
    call = {"name": "read_file", "arguments": {"value": "notes.txt"}}
    assert tool_filter.verify(call, filtered, learn=False).ok


def test_provider_tools_given_as_dicts_are_always_kept(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    search = {"type": "web_search"}
    function = {
        "type": "function",
        "function": {
            "name": "list_repos",
            "description": "List the GitHub repositories of a user.",
            "parameters": {"type": "object", "properties": {"user": {"type": "string"}}},
        },
    }
    mixed: list[Any] = [search, *tools, function]
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    picked = selector.select(mixed, [HumanMessage(WEATHER)])
    assert picked[0] is search
    assert names(picked) == ["web_search", "get_weather"]
    repos = selector.select(mixed, [HumanMessage("Which repositories does octocat have?")])
    assert repos == [search, function]


def test_tool_choice_is_honoured(tools: list[BaseTool], tool_filter: ToolFilter) -> None:
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    forced = selector.select(tools, [HumanMessage(WEATHER)], tool_choice="translate_text")
    assert names(forced) == ["get_weather", "translate_text"]
    assert selector.select(tools, [HumanMessage(WEATHER)], tool_choice="none") == tools
    for choice in ("any", "auto", True, {"type": "function", "function": {"name": "read_file"}}):
        assert "get_weather" in names(
            selector.select(tools, [HumanMessage(WEATHER)], tool_choice=choice)
        )
    with pytest.raises(InvalidInputError, match="tool_choice must be"):
        selector.select(tools, [HumanMessage(WEATHER)], tool_choice=3)


def test_no_user_text_keeps_every_tool(tools: list[BaseTool], tool_filter: ToolFilter) -> None:
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    assert selector.select(tools, []) == tools
    assert selector.select([], [HumanMessage(WEATHER)]) == []
    image = [{"type": "image", "source_type": "url", "url": "https://x/cat.png"}]
    assert selector.select(tools, [HumanMessage(image)]) == tools  # type: ignore[arg-type]
    assert selector.select(tools, [HumanMessage("  ")]) == tools
    with pytest.raises(InvalidInputError, match="messages must be a list of messages, got str"):
        selector.select(tools, WEATHER)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "file", "url": "https://x/report.pdf"},
        {"type": "text-plain", "text": "minutes of the meeting", "mime_type": "text/plain"},
        {"type": "video", "url": "https://x/clip.mp4"},
        {"type": "audio", "url": "https://x/note.wav"},
        {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}},
        {"type": "media", "mime_type": "video/mp4", "data": b"0000"},
    ],
    ids=["file-url", "text-plain", "video", "audio-url", "anthropic-image-url", "gemini-media"],
)
def test_blocks_openai_chat_cannot_take_are_read_not_refused(
    tools: list[BaseTool], tool_filter: ToolFilter, block: dict[str, Any]
) -> None:
    # Standard and provider blocks the agent's own model takes, which LangChain's conversion
    # to OpenAI Chat refuses: its ValueError stopped every model call of the agent.
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    beside = HumanMessage([{"type": "text", "text": WEATHER}, block])
    assert names(selector.select(tools, [beside])) == ["get_weather"]
    earlier = [HumanMessage([block]), AIMessage("Noted."), HumanMessage(WEATHER)]
    assert names(selector.select(tools, earlier)) == ["get_weather"]
    # Alone in the latest turn, it is content toolgate cannot read: every tool is shown.
    alone = [HumanMessage(WEATHER), AIMessage("Sunny."), HumanMessage([block])]
    assert selector.select(tools, alone) == tools


def test_a_message_read_around_a_refused_block_keeps_all_it_converts_to() -> None:
    # LangChain converts a message of Anthropic tool_result blocks (and text) to several:
    # one "tool" message per result, then the user's. Read one by one (a block elsewhere
    # refused), each gave only its first, and the results after it and the user's words
    # were lost.
    turns = [
        HumanMessage([{"type": "text", "text": WEATHER}, {"type": "video", "url": "https://x/v"}]),
        AIMessage("", tool_calls=[
            {"name": "a", "args": {}, "id": "t1"}, {"name": "b", "args": {}, "id": "t2"}]),
        HumanMessage([
            {"type": "tool_result", "tool_use_id": "t1", "content": "r1"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "r2"},
            {"type": "text", "text": "Now book a hotel room."}]),
    ]  # fmt: skip
    read = openai_messages(turns)
    assert read[0]["content"][1] == {"type": "unreadable"}
    assert read[1:] == convert_to_openai_messages(turns[1:])


def test_a_message_langchain_cannot_read_is_a_toolgate_error(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    with pytest.raises(InvalidInputError, match=r"messages\[0\] .*'alien'"):
        selector.select(tools, [{"role": "alien", "content": "hi"}, HumanMessage(WEATHER)])


def test_aselect_routes_off_the_event_loop(
    tools: list[BaseTool], tool_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An async graph node's routing (seconds when a tool set is new) must not stall the
    event loop its other runs share."""
    selector = ToolSelector(top_k=2, tool_filter=tool_filter)
    routed_in: list[int] = []
    filter_request = tool_filter.filter

    def recording(*args: Any, **kwargs: Any) -> Any:
        routed_in.append(threading.get_ident())
        return filter_request(*args, **kwargs)

    monkeypatch.setattr(tool_filter, "filter", recording)

    async def main() -> tuple[int, list[Any]]:
        chat = [HumanMessage(WEATHER)]
        return threading.get_ident(), await selector.aselect(iter(tools), chat, compact=True)

    loop_thread, shown = asyncio.run(main())
    assert routed_in
    assert loop_thread not in routed_in
    assert shown == selector.select(tools, [HumanMessage(WEATHER)], compact=True)
    assert "get_weather" in names(shown)


def test_a_tool_list_seen_before_is_not_converted_again(
    tools: list[BaseTool], tool_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    converted: list[str] = []
    original = integration.convert_to_openai_tool

    def spy(tool: Any) -> dict[str, Any]:
        converted.append(tool.name)
        return original(tool)

    monkeypatch.setattr(integration, "convert_to_openai_tool", spy)
    selector = ToolSelector(top_k=2, tool_filter=tool_filter)
    first = selector.select(tools, [HumanMessage(WEATHER)])
    assert converted == [name for name, _ in SPECS]
    assert selector.select(list(tools), [HumanMessage(WEATHER)]) == first
    assert len(converted) == len(SPECS)  # a new list of the same tools: no new conversion
    selector.select(tools[:4], [HumanMessage(WEATHER)])
    assert len(converted) == len(SPECS) + 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"top_k": 0}, "top_k must be an integer >= 1, got 0"),
        ({"top_k": True}, "top_k must be an integer >= 1"),
        ({"always_include": "read_file"}, "always_include must be a list of tool names"),
        ({"tool_filter": object()}, "tool_filter must be a toolgate ToolFilter, got object"),
        ({"learn": 3}, "a learned store is a path, a postgresql:// address or a LearnedStore"),
        # The lists are the operator's: a tool shown on every call must not pass them.
        (
            {"always_include": ["read_file", "send_email"], "deny": ["send_*"]},
            r"always_include names tools the allow / deny lists shut out: \['send_email'\]",
        ),
        (
            {"always_include": ["read_file"], "allow": ["get_*"]},
            r"shut out: \['read_file'\]",
        ),
    ],
)
def test_bad_options_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        ToolSelector(**options)


def test_a_tool_of_another_kind_is_named_by_position(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    selector = ToolSelector(tool_filter=tool_filter)
    with pytest.raises(InvalidInputError, match=r"tools\[8\] must be a LangChain tool .* got str"):
        selector.select([*tools, "get_time"], [HumanMessage(WEATHER)])  # type: ignore[list-item]


def test_middleware_takes_a_selector_or_options_not_both(tool_filter: ToolFilter) -> None:
    selector = ToolSelector(tool_filter=tool_filter)
    assert ToolgateMiddleware(selector=selector).selector is selector
    assert ToolgateMiddleware(top_k=3).selector.top_k == 3
    with pytest.raises(InvalidInputError, match=r"either a selector or its options.*top_k"):
        ToolgateMiddleware(selector=selector, top_k=3)


def _request(tools: list[Any], text: str, **fields: Any) -> ModelRequest:  # type: ignore[type-arg]
    model = GenericFakeChatModel(messages=iter([AIMessage("ok")]))
    return ModelRequest(model=model, messages=[HumanMessage(text)], tools=tools, **fields)


def test_middleware_narrows_each_model_call(tools: list[BaseTool], tool_filter: ToolFilter) -> None:
    middleware = ToolgateMiddleware(selector=ToolSelector(top_k=2, tool_filter=tool_filter))
    seen: list[Any] = []
    response = ModelResponse(result=[AIMessage("response")])

    def handler(request: Any) -> ModelResponse:
        seen.append(request)
        return response

    original = _request(tools, WEATHER)
    result = middleware.wrap_model_call(original, handler)
    assert result.model_response is response
    assert "get_weather" in names(seen[0].tools)
    assert len(seen[0].tools) == 2
    assert original.tools == tools  # the request given is not modified
    # What the call was shown is kept in the agent's state, for its tool calls.
    assert result.command is not None
    assert result.command.update == {"toolgate_offered": names(seen[0].tools)}

    async def ahandler(request: Any) -> AIMessage:
        seen.append(request)
        return AIMessage("async response")

    result = asyncio.run(middleware.awrap_model_call(_request(tools, WEATHER), ahandler))
    assert result.model_response.result[0].content == "async response"
    assert names(seen[1].tools) == names(seen[0].tools)


def test_middleware_calls_without_tools_when_nothing_is_routed(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    selector = ToolSelector(top_k=2, threshold=0.99, tool_filter=tool_filter)
    middleware = ToolgateMiddleware(selector=selector)
    seen: list[Any] = []

    def handler(request: Any) -> ModelResponse:
        seen.append(request)
        return ModelResponse(result=[AIMessage("ok")])

    request = _request(tools, "Tell me a joke about penguins.", tool_choice="auto")
    result = middleware.wrap_model_call(request, handler)
    assert seen[0].tools == []
    assert seen[0].tool_choice is None  # a choice with no tools would be refused
    assert result.command is not None
    assert result.command.update == {"toolgate_offered": []}  # no call may run
    # A request without tools is passed on as it is, and its calls are not checked.
    bare = _request([], WEATHER)
    result = middleware.wrap_model_call(bare, handler)
    assert seen[1] is bare
    assert result.command is not None
    assert result.command.update == {"toolgate_offered": None}
    # A call the agent requires is not dropped in silence: the conflict is named.
    forced = _request(tools, "Tell me a joke about penguins.", tool_choice="any")
    with pytest.raises(InvalidInputError, match="requires a tool call, but routing kept none"):
        middleware.wrap_model_call(forced, handler)


def test_a_turn_that_needs_no_tool_is_shown_only_what_must_be_shown(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    chat = [HumanMessage("🙂")]
    assert ToolSelector(top_k=3, tool_filter=tool_filter).select(tools, chat) == []
    pinned = ToolSelector(top_k=3, always_include=["read_file"], tool_filter=tool_filter)
    assert names(pinned.select(tools, chat)) == ["read_file"]
    assert "get_weather" in names(pinned.select(tools, [HumanMessage(WEATHER)]))
    seen: list[Any] = []

    def handler(request: Any) -> ModelResponse:
        seen.append(request)
        return ModelResponse(result=[AIMessage("🙂")])

    middleware = ToolgateMiddleware(selector=ToolSelector(top_k=3, tool_filter=tool_filter))
    middleware.wrap_model_call(_request(tools, "🙂"), handler)
    assert seen[0].tools == []


def test_middleware_keeps_the_tool_the_tool_choice_names(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    middleware = ToolgateMiddleware(selector=ToolSelector(top_k=1, tool_filter=tool_filter))
    seen: list[Any] = []

    def handler(request: Any) -> ModelResponse:
        seen.append(request)
        return ModelResponse(result=[AIMessage("ok")])

    result = middleware.wrap_model_call(
        _request(tools, WEATHER, tool_choice="translate_text"), handler
    )
    assert names(seen[0].tools) == ["get_weather", "translate_text"]
    assert seen[0].tool_choice == "translate_text"
    assert result.command is not None
    assert "translate_text" in result.command.update["toolgate_offered"]


class RecordingModel(GenericFakeChatModel):
    """A fake chat model that records the tools of each bind_tools call."""

    bound: list[list[str]] = []  # noqa: RUF012 (pydantic field, one list per test)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        self.bound.append([name_of(t) for t in tools])
        return self


class ForceACall(AgentMiddleware):  # type: ignore[type-arg]
    """Sets a tool choice that requires a call, as an agent's own middleware may."""

    def __init__(self, choice: Any) -> None:
        super().__init__()
        self.choice = choice

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request.override(tool_choice=self.choice))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request.override(tool_choice=self.choice))


def test_async_model_calls_waiting_for_one_new_tool_set_hold_no_thread(
    tools: list[BaseTool], embedder: Embedder
) -> None:
    """Agents on one event loop share a few worker threads: calls waiting for one tool set's
    indexing must leave them to calls whose tools are indexed already."""
    held = CountingEmbedder(embedder)
    gate = ToolFilter(embedder=held, cache=None, unreadable="keep")
    middleware = ToolgateMiddleware(selector=ToolSelector(top_k=2, tool_filter=gate))

    async def handler(request: Any) -> AIMessage:
        return AIMessage("ok")

    def offered(result: Any) -> list[str]:
        return list(result.command.update["toolgate_offered"])

    asyncio.run(middleware.awrap_model_call(_request(tools, WEATHER), handler))  # indexed now
    release = threading.Event()
    held.batch_texts, held.hold = 0, release
    fresh = [make_tool(f"{name}_v2", doc) for name, doc in SPECS]

    async def main() -> tuple[bool, list[str], list[list[str]]]:
        threads = 2
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(threads))
        waiting = [
            asyncio.create_task(middleware.awrap_model_call(_request(fresh, WEATHER), handler))
            for _ in range(threads + 2)
        ]
        while held.batch_texts == 0:  # the new tool set is being indexed
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # every call for it has asked and waits
        try:
            answered = await asyncio.wait_for(
                middleware.awrap_model_call(_request(tools, WEATHER), handler), 30
            )
            still_waiting = not any(task.done() for task in waiting)
        finally:
            release.set()
        later = await asyncio.gather(*waiting)
        return still_waiting, offered(answered), [offered(result) for result in later]

    still_waiting, answered, later = asyncio.run(main())
    assert still_waiting
    assert "get_weather" in answered
    assert len(answered) == 2
    assert len(later) == 4
    assert all(len(shown) == 2 and "get_weather_v2" in shown for shown in later)


@pytest.mark.parametrize("choice", ["any", "required", True])
def test_a_required_call_routing_leaves_no_tool_for_raises_in_sync_and_async_agents(
    tools: list[BaseTool], tool_filter: ToolFilter, choice: Any
) -> None:
    model = RecordingModel(messages=iter([AIMessage("a joke, not a call")]), bound=[])
    selector = ToolSelector(top_k=2, threshold=0.99, tool_filter=tool_filter)
    middleware = [ForceACall(choice), ToolgateMiddleware(selector=selector)]
    agent = create_agent(model, tools, middleware=middleware)
    chat = {"messages": [HumanMessage("Tell me a joke about penguins.")]}
    with pytest.raises(InvalidInputError, match="requires a tool call, but routing kept none"):
        agent.invoke(chat)
    with pytest.raises(InvalidInputError, match="requires a tool call, but routing kept none"):
        asyncio.run(agent.ainvoke(chat))
    assert model.bound == []  # the model was never called, so never answered in text


def test_create_agent_binds_only_routed_tools(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    model = RecordingModel(messages=iter([AIMessage("It will rain.")]), bound=[])
    middleware = ToolgateMiddleware(selector=ToolSelector(top_k=2, tool_filter=tool_filter))
    agent = create_agent(model, tools, middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage(WEATHER)]})
    assert out["messages"][-1].content == "It will rain."
    assert len(model.bound) == 1
    assert "get_weather" in model.bound[0]
    assert len(model.bound[0]) == 2


def test_the_filter_configured_threshold_applies_unless_overridden(
    tools: list[BaseTool],
) -> None:
    from toolgate.routing.config import RouterConfig

    strict = ToolFilter(
        config=RouterConfig(threshold=0.99), embedder=Embedder(precision="int8"), cache=None
    )
    assert ToolSelector(tool_filter=strict).select(tools, [HumanMessage(WEATHER)]) == []
    lenient = ToolSelector(top_k=2, threshold=None, tool_filter=strict)
    assert "get_weather" in names(lenient.select(tools, [HumanMessage(WEATHER)]))


def test_dict_tools_can_be_always_included(tools: list[BaseTool], tool_filter: ToolFilter) -> None:
    repos = {
        "type": "function",
        "function": {"name": "list_repos", "description": "List a user's repositories."},
    }
    selector = ToolSelector(top_k=1, always_include=["list_repos"], tool_filter=tool_filter)
    picked = selector.select([*tools, repos], [HumanMessage(WEATHER)])
    assert picked[-1] is repos
    assert "get_weather" in names(picked)


def test_choosing_a_provider_tool_or_none_forces_nothing(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    search = {"type": "web_search"}
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    for choice in ("web_search", False, None):
        picked = selector.select([*tools, search], [HumanMessage(WEATHER)], tool_choice=choice)
        assert names(picked) == ["get_weather", "web_search"], choice


def test_a_tool_toolgate_cannot_index_is_always_shown(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    huge = make_tool("gitlab_issue", "Work with GitLab issues. " + "Details. " * 2000)
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    with pytest.warns(CatalogWarning, match=r"cannot index 1 of the request's tools.*gitlab"):
        picked = selector.select([*tools, huge], [HumanMessage(WEATHER)])
    assert names(picked) == ["get_weather", "gitlab_issue"]
    # Once per tool list: the same list again neither converts nor warns.
    assert selector.select([*tools, huge], [HumanMessage(WEATHER)]) == picked


def test_a_tool_changed_in_place_is_read_again(tool_filter: ToolFilter) -> None:
    mutable = [make_tool(name, doc) for name, doc in SPECS]
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    assert names(selector.select(mutable, [HumanMessage(WEATHER)])) == ["get_weather"]
    mutable[5].description = "Tell whether it will rain, and the forecast for any city."
    mutable[0].description = "Read a text file from the local disk."
    picked = names(selector.select(mutable, [HumanMessage(WEATHER)]))
    assert picked == ["read_file"]


def anthropic_dicts() -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"value": {"type": "string"}}}
    return [{"name": n, "description": d, "input_schema": schema} for n, d in SPECS]


def test_anthropic_dict_tools_are_routed_forced_and_kept_with_their_cache_marker(
    tool_filter: ToolFilter,
) -> None:
    dicts = anthropic_dicts()
    dicts[-1] = {**dicts[-1], "cache_control": {"type": "ephemeral"}}  # on a tool routed out
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    picked = selector.select(dicts, [HumanMessage(WEATHER)])
    assert picked == [dicts[0]]  # the caller's own dict, found by position
    forced = selector.select(dicts, [HumanMessage(WEATHER)], tool_choice="send_email")
    assert forced == [dicts[0], dicts[2]]


def test_unreadable_tools_of_any_shape_are_shown_and_can_be_chosen(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    huge = {**anthropic_dicts()[5], "description": "Read files. " + "More. " * 3000}
    dicts = [*anthropic_dicts()[:5], huge]
    selector = ToolSelector(top_k=1, tool_filter=tool_filter)
    with pytest.warns(CatalogWarning, match="read_file"):
        assert selector.select(dicts, [HumanMessage(WEATHER)]) == [dicts[0], huge]
    big_tool = make_tool("gitlab_issue", "GitLab issues, all of them. " + "Details. " * 2000)
    with pytest.warns(CatalogWarning, match="gitlab_issue"):
        chosen = selector.select(
            [*tools, big_tool], [HumanMessage(WEATHER)], tool_choice="gitlab_issue"
        )
    assert names(chosen) == ["get_weather", "gitlab_issue"]


def test_the_model_is_shown_compact_definitions_and_the_agent_still_runs_the_tools(
    tool_filter: ToolFilter,
) -> None:
    def lookup(city: str, units: str | None = None) -> str:
        """Get the current weather and a 7-day forecast for a city.

        Args:
            city: The city.
            units: metric or imperial.
        """
        return f"rain in {city}"

    weather = StructuredTool.from_function(lookup, name="get_weather")
    tools: list[Any] = [*(make_tool(n, d) for n, d in SPECS[1:]), weather]
    call = AIMessage(
        "", tool_calls=[{"name": "get_weather", "args": {"city": "Lisbon"}, "id": "1"}]
    )
    model = RecordingModel(messages=iter([call, AIMessage("It will rain.")]), bound=[])
    selector = ToolSelector(top_k=2, tool_filter=tool_filter)
    seen: list[Any] = []
    ToolgateMiddleware(selector=selector).wrap_model_call(_request(tools, WEATHER), seen.append)
    shown = next(t for t in seen[0].tools if name_of(t) == "get_weather")
    full = integration.convert_to_openai_tool(weather)["function"]
    assert "\n    " in full["description"]
    assert shown["function"]["description"] == compact_text(full["description"])
    assert "default" not in shown["function"]["parameters"]["properties"]["units"]
    assert shown["function"]["parameters"]["required"] == ["city"]
    plain = ToolgateMiddleware(selector=selector, compact=False)
    plain.wrap_model_call(_request(tools, WEATHER), seen.append)
    assert weather in seen[1].tools  # the tools themselves
    agent = create_agent(model, tools, middleware=[ToolgateMiddleware(selector=selector)])
    out = agent.invoke({"messages": [HumanMessage(WEATHER)]})
    ran = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in ran] == ["rain in Lisbon"]
    assert "get_weather" in model.bound[0]


def test_a_tool_with_provider_extras_is_shown_as_itself(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    extras = {"cache_control": {"type": "ephemeral"}}
    forecast = StructuredTool.from_function(
        lambda city: city, name="forecast", description="Weather forecast for a city: rain, wind",
        extras=extras,
    )  # fmt: skip
    every = [*tools, forecast]
    selector = ToolSelector(top_k=3, tool_filter=tool_filter)
    shown = selector.select(every, [HumanMessage(WEATHER)], compact=True)
    assert any(t is forecast for t in shown)  # providers read extras from the tool alone
    assert any(isinstance(t, dict) for t in shown)  # the others are still compacted
    seen: list[Any] = []
    ToolgateMiddleware(selector=selector).wrap_model_call(_request(every, WEATHER), seen.append)
    assert any(t is forecast for t in seen[0].tools)


def test_tools_deferred_to_a_tool_search_go_unrouted(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    """A tool deferred to the provider's tool search (``extras``, as LangChain's
    ProviderToolSearchMiddleware marks it) costs no context, and the search can load only
    what the request holds: such a request goes with its tools as given, as the gateway's
    does, the allow / deny lists still applied."""
    deferred = StructuredTool.from_function(
        lambda text: text, name="spell_check", description="Check the spelling of a text.",
        extras={"defer_loading": True},
    )  # fmt: skip
    search = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
    every = [*tools, deferred, search]
    selector = ToolSelector(top_k=2, tool_filter=tool_filter)
    assert selector.select(every, [HumanMessage(WEATHER)]) == every
    assert selector.select(every, [HumanMessage(WEATHER)], compact=True) == every
    seen: list[Any] = []
    ToolgateMiddleware(selector=selector).wrap_model_call(_request(every, WEATHER), seen.append)
    assert seen[0].tools == every
    denying = ToolSelector(top_k=2, deny=["send_email"], tool_filter=tool_filter)
    assert names(denying.select(every, [HumanMessage(WEATHER)])) == [
        name_of(t) for t in every if name_of(t) != "send_email"
    ]


def test_a_request_that_binds_strictly_is_shown_the_tools_themselves(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    class Answer(BaseModel):
        text: str

    middleware = ToolgateMiddleware(selector=ToolSelector(top_k=2, tool_filter=tool_filter))
    seen: list[Any] = []
    middleware.wrap_model_call(
        _request(tools, WEATHER, model_settings={"strict": True}), seen.append
    )
    middleware.wrap_model_call(
        _request(tools, WEATHER, response_format=ProviderStrategy(Answer)), seen.append
    )
    for request in seen:
        assert len(request.tools) == 2
        strict = [convert_to_openai_tool(t, strict=True)["function"] for t in request.tools]
        assert all(f.get("strict") is True for f in strict)  # a dict would pass as it is
    middleware.wrap_model_call(
        _request(tools, WEATHER, response_format=ToolStrategy(Answer)), seen.append
    )
    assert all(isinstance(t, dict) for t in seen[2].tools)  # no strict binding: compacted


def _calls(*names_and_ids: tuple[str, str]) -> AIMessage:
    return AIMessage(
        "", tool_calls=[{"name": n, "args": {"value": "x"}, "id": i} for n, i in names_and_ids]
    )


def _results(messages: list[Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


def test_the_agent_runs_no_call_to_a_tool_the_model_was_not_shown(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    model = RecordingModel(
        messages=iter(
            [
                _calls(("send_email", "c1"), ("get_weather", "c2"), ("delete_everything", "c3")),
                _calls(("send_email", "c4")),
                AIMessage("Done."),
            ]
        ),
        bound=[],
    )
    middleware = ToolgateMiddleware(selector=ToolSelector(top_k=2, tool_filter=tool_filter))
    agent = create_agent(model, tools, middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage(WEATHER)]})
    shown = model.bound[0]
    assert "send_email" not in shown
    results = _results(out["messages"])
    refused = json.loads(str(results["c1"].content))
    assert results["c1"].status == "error"
    assert refused["error"] == "tool_not_available"
    assert refused["available"] == shown  # the tools it may call: those it was shown
    assert "'send_email' is not available" in refused["message"]
    assert results["c2"].content == "get_weather(x)"  # a call to a tool shown runs
    unknown = json.loads(str(results["c3"].content))
    assert (unknown["error"], unknown["available"]) == ("unknown_tool", shown)
    # Asked for by name, send_email is routed on the next call, and its call then runs.
    assert "send_email" in model.bound[1]
    assert results["c4"].content == "send_email(x)"
    assert "toolgate_offered" not in out  # private to the agent


def test_a_denied_tool_is_never_run_however_often_the_model_asks(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    model = RecordingModel(
        messages=iter(
            [_calls(("send_email", "c1")), _calls(("send_email", "c2")), AIMessage("Done.")]
        ),
        bound=[],
    )
    selector = ToolSelector(top_k=2, deny=["send_email"], tool_filter=tool_filter)
    agent = create_agent(model, tools, middleware=[ToolgateMiddleware(selector=selector)])
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage(WEATHER)]}))
    results = _results(out["messages"])
    for call_id in ("c1", "c2"):
        assert results[call_id].status == "error"
        assert json.loads(str(results[call_id].content))["error"] == "tool_not_available"
    assert all("send_email" not in bound for bound in model.bound)


def test_the_lists_hold_when_there_is_nothing_to_route(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    """With no user text, the tools go unrouted, but the operator's lists still apply: a
    denied tool is neither shown nor run."""
    image = HumanMessage([{"type": "image", "source_type": "url", "url": "https://x/cat.png"}])
    selector = ToolSelector(top_k=2, deny=["send_email"], tool_filter=tool_filter)
    unrouted = selector.select(tools, [image])
    assert names(unrouted) == [t.name for t in tools if t.name != "send_email"]
    allowed = ToolSelector(top_k=2, allow=["get_*", "book_*"], tool_filter=tool_filter)
    assert names(allowed.select(tools, [image])) == ["get_weather", "book_hotel"]
    answers = [_calls(("send_email", "c1")), AIMessage("No.")]
    model = RecordingModel(messages=iter(answers), bound=[])
    agent = create_agent(model, tools, middleware=[ToolgateMiddleware(selector=selector)])
    out = agent.invoke({"messages": [image]})
    assert model.bound[0] == names(unrouted)
    refused = _results(out["messages"])["c1"]
    assert refused.status == "error"
    assert json.loads(str(refused.content))["error"] == "tool_not_available"


@pytest.mark.parametrize("hitl_first", [True, False])
def test_a_call_a_reviewer_edited_to_another_tool_runs(
    tools: list[BaseTool], tool_filter: ToolFilter, hitl_first: bool
) -> None:
    """The check is of the model's calls: a human reviewer's edit to a tool the model was
    not shown is the reviewer's choice, and runs whichever middleware is listed first."""
    model = RecordingModel(
        messages=iter([_calls(("get_weather", "c1"), ("send_email", "c2")), AIMessage("Done.")]),
        bound=[],
    )
    toolgate = ToolgateMiddleware(selector=ToolSelector(top_k=2, tool_filter=tool_filter))
    review = HumanInTheLoopMiddleware(interrupt_on={"get_weather": True})
    middleware = [review, toolgate] if hitl_first else [toolgate, review]
    agent = create_agent(model, tools, middleware=middleware, checkpointer=InMemorySaver())
    thread: Any = {"configurable": {"thread_id": "1"}}
    agent.invoke({"messages": [HumanMessage(WEATHER)]}, thread)
    shown = model.bound[0]
    assert "get_weather" in shown
    assert "translate_text" not in shown
    assert "send_email" not in shown
    edited = {"name": "translate_text", "args": {"value": "Lisbon"}}
    edit = {"type": "edit", "edited_action": edited}
    out = agent.invoke(Command(resume={"decisions": [edit]}), thread)
    results = _results(out["messages"])
    assert results["c1"].status != "error"
    assert str(results["c1"].content).endswith("translate_text(Lisbon)")
    # The model's own call to a tool it was not shown is still refused.
    assert results["c2"].status == "error"
    assert json.loads(str(results["c2"].content))["error"] == "tool_not_available"


def test_a_reviewer_edit_to_a_denied_tool_is_refused(
    tools: list[BaseTool], tool_filter: ToolFilter
) -> None:
    """The allow / deny lists are the operator's: they hold for an edited call too."""
    model = RecordingModel(
        messages=iter([_calls(("get_weather", "c1")), AIMessage("Ok.")]), bound=[]
    )
    selector = ToolSelector(top_k=2, tool_filter=tool_filter, deny=["translate_*"])
    review = HumanInTheLoopMiddleware(interrupt_on={"get_weather": True})
    middleware = [review, ToolgateMiddleware(selector=selector)]
    agent = create_agent(model, tools, middleware=middleware, checkpointer=InMemorySaver())
    thread: Any = {"configurable": {"thread_id": "1"}}
    agent.invoke({"messages": [HumanMessage(WEATHER)]}, thread)
    edited = {"name": "translate_text", "args": {"value": "Lisbon"}}
    out = agent.invoke(
        Command(resume={"decisions": [{"type": "edit", "edited_action": edited}]}), thread
    )
    refused = _results(out["messages"])["c1"]
    assert refused.status == "error"
    # HITL prefixes its own note to the result.
    assert "shut out by the allow / deny lists: not run" in str(refused.content)


def test_the_agent_learns_from_the_calls_its_model_makes(tools: list[BaseTool]) -> None:
    embedder = Embedder(precision="int8")
    learning = ToolFilter(embedder=embedder, cache=None, unreadable="keep", learn=":memory:")
    query = "write to Ann about the Lisbon hotel"
    selector = ToolSelector(top_k=5, tool_filter=learning)
    request = {"messages": [{"role": "user", "content": query}], "tools": _definitions(tools)}
    before = {tool.id: tool for tool in learning.filter(request, top_k=5).result.tools}
    # Shown (so its call runs and is learned), and ranked on its text alone.
    assert before["default/send_email"].reason == "ranked"
    model = RecordingModel(
        messages=iter([_calls(("send_email", "c1")), AIMessage("Sent.")]), bound=[]
    )
    agent = create_agent(model, tools, middleware=[ToolgateMiddleware(selector=selector)])
    agent.invoke({"messages": [HumanMessage(query)]})
    after = {tool.id: tool for tool in learning.filter(request, top_k=5).result.tools}
    assert after["default/send_email"].reason == "learned"
    assert after["default/send_email"].score > before["default/send_email"].score
    with pytest.raises(InvalidInputError, match="pass learn to the tool_filter"):
        ToolSelector(tool_filter=learning, learn=":memory:")


def _definitions(tools: list[BaseTool]) -> list[dict[str, Any]]:
    return [integration.convert_to_openai_tool(tool) for tool in tools]


def test_an_async_model_call_does_not_wait_for_a_locked_learned_store(
    tools: list[BaseTool], tmp_path: Any
) -> None:
    """The async middleware queues what a call teaches: another process writing the store
    (its lock held for up to the busy timeout) must not hold the agent's step, and a timeout
    around that step must not lose the model's answer to it."""
    path = tmp_path / "learned.sqlite3"
    store = SqliteStore(path, timeout_s=5.0)
    learning = ToolFilter(
        embedder=Embedder(precision="int8"), cache=None, unreadable="keep", learn=store
    )
    selector = ToolSelector(top_k=5, tool_filter=learning)
    middleware = ToolgateMiddleware(selector=selector)
    query = "write to Ann about the Lisbon hotel"
    request = {"messages": [{"role": "user", "content": query}], "tools": _definitions(tools)}

    async def handler(request: Any) -> AIMessage:
        return _calls(("send_email", "c1"))

    asyncio.run(middleware.awrap_model_call(_request(tools, query), handler))  # indexed now
    assert selector.drain(10)
    other = sqlite3.connect(path, timeout=0)
    other.execute("BEGIN IMMEDIATE")  # another worker writing: the store's lock is held

    async def step() -> float:
        started = time.monotonic()
        async with asyncio.timeout(3):
            await middleware.awrap_model_call(_request(tools, query), handler)
        return time.monotonic() - started

    try:
        assert asyncio.run(step()) < 2
    finally:
        other.rollback()
        other.close()
    assert selector.drain(10)
    learned = {t.id: t for t in learning.filter(request, top_k=5).result.tools}
    assert learned["default/send_email"].reason == "learned"


def test_a_selector_let_go_stops_its_learning_thread_once_its_lessons_are_learned(
    tools: list[BaseTool], tmp_path: Any
) -> None:
    """A middleware made per request (its own selector) left a learning thread, holding the
    last lesson's router, behind for each: the thread now learns what waits, then stops."""
    learning = ToolFilter(
        embedder=Embedder(precision="int8"),
        cache=None,
        unreadable="keep",
        learn=SqliteStore(tmp_path / "learned.sqlite3"),
    )
    middleware = ToolgateMiddleware(selector=ToolSelector(top_k=5, tool_filter=learning))
    query = "write to Ann about the Lisbon hotel"

    async def handler(request: Any) -> AIMessage:
        return _calls(("send_email", "c1"))

    asyncio.run(middleware.awrap_model_call(_request(tools, query), handler))
    worker = middleware.selector._lessons._worker
    assert worker is not None
    selector = weakref.ref(middleware.selector)
    del middleware
    gc.collect()
    assert selector() is None
    worker.join(30)
    assert not worker.is_alive()
    request = {"messages": [{"role": "user", "content": query}], "tools": _definitions(tools)}
    learned = {t.id: t for t in learning.filter(request, top_k=5).result.tools}
    assert learned["default/send_email"].reason == "learned"  # learned before it stopped

"""ToolFilter across an agent's turns: tools deferred to a tool search, tools a conversation
references or is using, and turns that answer the model instead of asking."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.gateway.conftest import SDK_CLIENTS, Served, sent_names
from tests.gateway.test_filter import TRIP, WEATHER, anthropic_tools, chat_tools, responses_tools
from toolgate.embedding.embedder import Embedder
from toolgate.gateway.filter import ToolFilter

# A client-side tool search, as Claude Code declares its own: a plain custom tool.
TOOL_SEARCH = {
    "name": "ToolSearch",
    "description": "Fetch full schema definitions for deferred tools so they can be called.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gate(embedder: Embedder) -> ToolFilter:
    return ToolFilter(embedder=embedder, cache=None)


def _names(tools: list[dict[str, Any]]) -> list[str]:
    return [t.get("name", t.get("type")) for t in tools]


def _deferred(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**tool, "defer_loading": True} for tool in tools]


def test_a_request_deferring_tools_to_a_search_goes_with_all_its_tools(gate: ToolFilter) -> None:
    # The search tool is an ordinary custom tool: routed out, the model cannot load the
    # deferred ones; and routing the deferred tools saves nothing (they are not in context).
    tools = [TOOL_SEARCH, *anthropic_tools()[:2], *_deferred(anthropic_tools()[2:])]
    request = {"messages": [{"role": "user", "content": TRIP}], "tools": tools}
    filtered = gate.filter(request, top_k=1)
    assert filtered.request["tools"] == tools
    assert filtered.dropped_count == 0
    # A call to a deferred tool the search loaded is a call to a tool the request offered.
    assert gate.verify({"type": "tool_use", "name": "book_hotel", "input": {}}, filtered)
    assert not gate.verify({"type": "tool_use", "name": "play_music", "input": {}}, filtered)


def test_a_server_side_tool_search_keeps_its_deferred_tools(gate: ToolFilter) -> None:
    # Anthropic's regex search, and OpenAI Responses' hosted one, which refuses a request
    # whose deferred tools were all removed ("requires at least one deferred tool").
    regex = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    tools = [regex, *anthropic_tools()[:3], *_deferred(anthropic_tools()[3:])]
    anthropic = {"messages": [{"role": "user", "content": TRIP}], "tools": tools}
    assert gate.filter(anthropic, top_k=1).request["tools"] == tools
    eager = [t for t in responses_tools() if t["name"] in ("get_weather", "book_hotel")]
    later = _deferred([t for t in responses_tools() if t not in eager])
    responses = {"input": TRIP, "tools": [{"type": "tool_search"}, *eager, *later]}
    filtered = gate.filter(responses, top_k=1)
    assert filtered.provider == "openai-responses"
    assert filtered.request["tools"] == responses["tools"]


def test_tools_a_tool_reference_names_are_kept(gate: ToolFilter) -> None:
    # Anthropic expands each tool_reference from the request's tools, and refuses the
    # request ("Tool reference ... not found") when the tool is not there.
    reference = {"type": "tool_reference", "tool_name": "translate_text"}
    searched = {
        "type": "tool_search_tool_result", "tool_use_id": "s1",
        "content": {"type": "tool_search_tool_search_result", "tool_references": [
            {"type": "tool_reference", "tool_name": "read_file"}]},
    }  # fmt: skip
    messages = [
        {"role": "user", "content": "Check what I have saved for my trip to Paris."},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {"query": "x"}},
            searched]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [reference]}]},
        {"role": "assistant", "content": "Which dates?"},
        {"role": "user", "content": WEATHER},
    ]  # fmt: skip
    request = {"messages": messages, "tools": [TOOL_SEARCH, *anthropic_tools()]}
    filtered = gate.filter(request, top_k=1)
    assert "get_weather" in filtered.kept
    assert {"translate_text", "read_file"} <= set(filtered.kept)
    assert {"translate_text", "read_file"} <= set(_names(filtered.request["tools"]))
    denied = gate.filter(request, top_k=1, deny=["translate_*"])
    assert "translate_text" not in denied.kept  # the caller's lists still apply


REMINDER = "<system-reminder>The todo list is empty. Keep answers short.</system-reminder>"


def test_a_turn_answering_calls_routes_on_the_request_and_keeps_the_tools_in_use(
    gate: ToolFilter,
) -> None:
    # Claude Code sends its reminders beside the tool results; Gemini clients add a text
    # part beside a functionResponse. Neither is a new request: the task goes on.
    anthropic = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "translate_text", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ERROR: no such language"},
            {"type": "text", "text": REMINDER}]},
    ]  # fmt: skip
    gemini = [
        {"role": "user", "parts": [{"text": WEATHER}]},
        {"role": "model", "parts": [{"functionCall": {"name": "translate_text", "args": {}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "translate_text", "response": {"error": "?"}}},
            {"text": REMINDER}]},
    ]  # fmt: skip
    declarations = [{"name": t["name"], "description": t["description"]} for t in anthropic_tools()]
    for request in (
        {"messages": anthropic, "tools": anthropic_tools()},
        {"contents": gemini, "tools": [{"functionDeclarations": declarations}]},
    ):
        filtered = gate.filter(request, top_k=1)
        assert filtered.result.query == WEATHER
        # The tool the task is using stays, though the route alone keeps another.
        assert filtered.kept == ("get_weather", "translate_text")


def test_a_user_message_after_tool_results_is_a_new_request(gate: ToolFilter) -> None:
    # OpenAI Chat answers calls in messages of their own: a user message after them asks.
    chat = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "translate_text", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "user", "content": "Now book me a hotel room in Lisbon for two nights."},
    ]  # fmt: skip
    filtered = gate.filter({"messages": chat, "tools": chat_tools()}, top_k=1)
    assert filtered.result.query == chat[-1]["content"]
    assert filtered.kept == ("book_hotel",)


def test_an_enforcing_gateway_lets_the_tool_in_use_be_called_again(enforcing: Served) -> None:
    served = enforcing
    client = anthropic.Anthropic(base_url=served.url, api_key="sk-ant-client", max_retries=0)
    SDK_CLIENTS.append(client)
    messages = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "translate_text", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ERROR: try again"},
            {"type": "text", "text": REMINDER}]},
    ]  # fmt: skip
    served.fake.script.tool = "translate_text"
    answer = client.messages.create(
        model="m", max_tokens=64, messages=messages, tools=anthropic_tools()
    )
    assert answer.content[0].name == "translate_text"  # not blocked: it was sent
    assert "translate_text" in sent_names(served.fake)

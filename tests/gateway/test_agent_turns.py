"""ToolFilter across an agent's turns: tools deferred to a tool search, tools a conversation
references or is using, and turns that answer the model instead of asking."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.test_filter import TRIP, WEATHER, anthropic_tools, responses_tools
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

"""ToolFilter.verify on the calls a provider makes to its hosted tools (web search, file
search, code interpreter, MCP servers...): passed when the request offered the tool, refused
with a reason naming it when not."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.test_filter import WEATHER, anthropic_tools, responses_tools
from toolgate.embedding.embedder import Embedder
from toolgate.gateway.filter import ToolFilter

MCP = {"type": "mcp", "server_label": "wiki", "server_url": "https://wiki.example/mcp",
       "allowed_tools": ["ask_question"]}  # fmt: skip
HOSTED = [
    {"type": "web_search_preview"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "image_generation"},
    MCP,
]
ITEMS = [
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "rain in Lisbon"}},
    {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["rain"]},
    {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "code": "1 + 1",
     "container_id": "cntr_1"},
    {"type": "image_generation_call", "id": "ig_1", "status": "completed"},
    {"type": "mcp_call", "id": "mcp_1", "server_label": "wiki", "name": "ask_question",
     "arguments": "{}"},
    {"type": "mcp_list_tools", "id": "ml_1", "server_label": "wiki", "tools": []},
]  # fmt: skip


@pytest.fixture(scope="module")
def gate(embedder: Embedder) -> ToolFilter:
    return ToolFilter(embedder=embedder, cache=None)


@pytest.mark.parametrize("routed", [True, False])
def test_responses_hosted_calls_pass_when_offered_and_are_refused_when_not(
    gate: ToolFilter, routed: bool
) -> None:
    options: dict[str, Any] = {"top_k": 1} if routed else {"deny": ["send_email"]}
    choice = {} if routed else {"tool_choice": "none"}
    offered = gate.filter({"input": WEATHER, "tools": [*responses_tools(), *HOSTED], **choice},
                          **options)  # fmt: skip
    plain = gate.filter({"input": WEATHER, "tools": responses_tools(), **choice}, **options)
    for item in ITEMS:
        verdict = gate.verify(item, offered)
        assert verdict.ok, (item["type"], verdict)
        assert verdict.call_id == item["id"]
        refused = gate.verify(item, plain)
        assert refused.error == "unknown_tool", (item["type"], refused)
        assert "did not offer" in refused.message
    other_server = {**ITEMS[4], "server_label": "crm"}
    assert "'crm'" in gate.verify(other_server, offered).message
    not_allowed = gate.verify({**ITEMS[4], "name": "delete_page"}, offered)
    assert not_allowed.error == "tool_not_available"
    assert "allowed_tools" in not_allowed.message


def test_anthropic_server_and_mcp_tool_uses_are_checked_against_the_request(
    gate: ToolFilter,
) -> None:
    search = {"type": "web_search_20250305", "name": "web_search"}
    servers = [{"type": "url", "url": "https://wiki.example/mcp", "name": "wiki",
                "tool_configuration": {"allowed_tools": ["ask_question"]}}]  # fmt: skip
    request = {"messages": [{"role": "user", "content": WEATHER}], "mcp_servers": servers,
               "tools": [*anthropic_tools(), search]}  # fmt: skip
    filtered = gate.filter(request, top_k=1)
    server_use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                  "input": {"query": "rain"}}  # fmt: skip
    mcp_use = {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "ask_question",
               "server_name": "wiki", "input": {}}  # fmt: skip
    assert gate.verify(server_use, filtered).ok
    assert gate.verify(mcp_use, filtered).ok
    fetch = gate.verify({**server_use, "name": "web_fetch"}, filtered)
    assert fetch.error == "unknown_tool"
    assert "did not offer" in fetch.message
    assert gate.verify({**mcp_use, "server_name": "crm"}, filtered).error == "unknown_tool"
    assert gate.verify({**mcp_use, "name": "delete_page"}, filtered).error == "tool_not_available"
    # The current MCP connector: a toolset in the tools names the server and its tools' config.
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "wiki",
        "default_config": {"enabled": False},
        "configs": {"ask_question": {"enabled": True}},
    }
    newer = {**request, "tools": [*anthropic_tools(), toolset],
             "mcp_servers": [{**servers[0], "tool_configuration": None}]}  # fmt: skip
    filtered = gate.filter(newer, top_k=1)
    assert gate.verify(mcp_use, filtered).ok
    assert gate.verify({**mcp_use, "name": "delete_page"}, filtered).error == "tool_not_available"


def test_a_hosted_calls_made_up_names_are_cut_short_in_the_message(gate: ToolFilter) -> None:
    # The names are the model's, of any length, and the message goes back to it (as an
    # unknown function tool's name is cut short by verify).
    long = "x" * 5_000
    request = {"messages": [{"role": "user", "content": WEATHER}],
               "tools": anthropic_tools(), "mcp_servers": []}  # fmt: skip
    filtered = gate.filter(request, top_k=1)
    offered = gate.filter({"input": WEATHER, "tools": [*responses_tools(), MCP]}, top_k=1)
    mcp_use = {"type": "mcp_tool_use", "id": "m1", "name": "a", "server_name": long, "input": {}}
    refusals = [
        gate.verify({"type": "server_tool_use", "id": "s1", "name": long, "input": {}}, filtered),
        gate.verify(mcp_use, filtered),
        gate.verify({**ITEMS[4], "server_label": long}, offered),
        gate.verify({**ITEMS[4], "name": long}, offered),
    ]
    assert [v.error for v in refusals] == [*["unknown_tool"] * 3, "tool_not_available"]
    assert all(len(v.message or "") < 300 for v in refusals), [len(v.message) for v in refusals]
    assert refusals[0].name == long  # the verdict's name still holds what was called

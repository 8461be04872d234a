"""The MCP proxy in-process: search_tools / call_tool over upstream servers."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

import toolgate
from tests.fixtures.mcp import (
    Calls,
    PagedClient,
    calendar_server,
    found_tools,
    github_server,
    log_server,
    mcp_tool,
    run,
    text_of,
)
from toolgate import InvalidInputError
from toolgate.embedding.embedder import Embedder
from toolgate.errors import ModelNotFoundError
from toolgate.integrations.mcp import router as router_module
from toolgate.integrations.mcp.proxy import McpProxy
from toolgate.integrations.mcp.router import McpRouter
from toolgate.routing.config import RouterConfig
from toolgate.telemetry.recorder import Telemetry
from toolgate.telemetry.usage import UsageStats

NOTE_TOOL = mcp_tool("add_note", "Save a note.")


async def connected(
    embedder: Embedder,
    clients: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    **options: Any,
) -> McpProxy:
    """A proxy in front of ``clients``; ``options`` are :class:`McpProxy`'s."""
    # The top 3 as they rank: these tests are about the proxy, not about selection.
    plain = RouterConfig(adaptive=False)
    router = McpRouter(top_k=3, embedder=embedder, cache=None, overrides=overrides, config=plain)
    await router.connect(clients)
    return McpProxy(router, **options)


def call_create_issue(embedder: Embedder, arguments: str) -> tuple[CallToolResult, Calls]:
    """``call_tool`` of GitHub's ``create_issue`` through a proxy with ``arguments`` as the
    model wrote them: the answer, and the calls that reached the server."""
    calls: Calls = Counter()
    answers: list[CallToolResult] = []

    async def main() -> None:
        async with Client(github_server(calls)) as github:
            proxy = await connected(embedder, {"github": github})
            async with Client(proxy.server) as client:
                call = {"name": "create_issue", "arguments": arguments}
                answers.append(await client.call_tool("call_tool", call))

    run(main)
    return answers[0], calls


@pytest.mark.parametrize(
    "arguments",
    ["[" * 100_000 + "]" * 100_000, '{"n": ' + "9" * 5_000 + "}", '{"repo": '],
    ids=["nested past the parser", "5,000 digits", "not JSON"],
)
def test_call_tool_arguments_a_model_wrote_badly_are_a_tool_error(
    embedder: Embedder, arguments: str
) -> None:
    answer, calls = call_create_issue(embedder, arguments)
    assert answer.is_error
    assert "takes 'name'" in json.loads(text_of(answer))["message"]
    assert calls == Counter()


@pytest.mark.parametrize(
    ("arguments", "found"),
    [
        ('{"repo": "a/b", "title": "\\ud800"}', "a lone surrogate at title"),
        ('{"repo": "a/b", "title": "x", "\\udfff": 1}', "a key with a lone surrogate"),
        ('{"repo": "a/b", "title": "x", "n": NaN}', "NaN or Infinity at n"),
    ],
)
def test_arguments_no_json_text_holds_are_refused_not_sent(
    embedder: Embedder, arguments: str, found: str
) -> None:
    answer, calls = call_create_issue(embedder, arguments)
    assert answer.is_error
    body = json.loads(text_of(answer))
    assert body["error"] == "invalid_arguments"
    assert found in body["message"]
    assert calls == Counter()  # over stdio, the failed write would close the connection


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28, and the handshake era
def test_a_client_searches_then_calls_through_the_proxy(embedder: Embedder, mode: str) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        async with (
            Client(github_server(calls)) as github,
            Client(calendar_server(calls)) as calendar,
        ):
            proxy = await connected(embedder, {"github": github, "calendar": calendar})
            async with Client(proxy.server, mode=mode) as client:
                assert client.server_info is not None
                assert (client.server_info.name, client.server_info.version) == (
                    "toolgate",
                    toolgate.__version__,
                )
                listed = await client.list_tools()
                assert [t.name for t in listed.tools] == ["search_tools", "call_tool"]

                found = await client.call_tool("search_tools", {"query": "open a GitHub issue"})
                tools = found_tools(found)
                assert len(tools) == 3
                assert tools[0]["name"] == "create_issue"
                assert tools[0]["inputSchema"]["required"] == ["repo", "title"]

                arguments = {"repo": "acme/web", "title": "Flaky login"}
                done = await client.call_tool(
                    "call_tool", {"name": "create_issue", "arguments": arguments}
                )
                assert not done.is_error
                assert text_of(done) == "opened 'Flaky login' in acme/web"
                # The answer is the proxy's: the upstream's name is not passed off as its.
                server_info = (done.meta or {}).get("io.modelcontextprotocol/serverInfo")
                assert server_info is None or server_info["name"] == "toolgate"

                # select: loads tools by name, as ToolSearch does.
                picked = await client.call_tool("search_tools", {"query": "select:create_event"})
                assert [t["name"] for t in found_tools(picked)] == ["create_event"]
            assert calls == Counter({"create_issue": 1})

    run(main)


def test_calls_the_proxy_refuses_never_reach_a_server(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        async with Client(github_server(calls)) as github:
            proxy = await connected(embedder, {"github": github})
            async with Client(proxy.server) as client:
                typo = await client.call_tool(
                    "call_tool", {"name": "create_isue", "arguments": {"repo": "a/b"}}
                )
                body = json.loads(text_of(typo))
                assert typo.is_error
                assert body == {
                    "error": "unknown_tool",
                    "message": "There is no tool 'create_isue'. Did you mean 'create_issue'? "
                    "Find tools with search_tools.",
                    "closest": "create_issue",
                }  # no list of available tools: through the proxy, that is every tool

                bad = await client.call_tool(
                    "call_tool", {"name": "create_issue", "arguments": {"repo": "a/b"}}
                )
                assert json.loads(text_of(bad))["error"] == "invalid_arguments"

                for misuse in ({"arguments": {}}, {"name": "create_issue", "arguments": [1]}):
                    wrong = await client.call_tool("call_tool", misuse)
                    assert wrong.is_error
                    assert "takes 'name'" in json.loads(text_of(wrong))["message"]
                empty = await client.call_tool("search_tools", {"query": "  "})
                assert "non-empty string" in json.loads(text_of(empty))["message"]
                nothing = await client.call_tool("search_tools", {"query": "select:"})
                assert "names no tool" in json.loads(text_of(nothing))["message"]
                missing = await client.call_tool("search_tools", {"query": "select:open_pr"})
                assert text_of(missing).splitlines()[-1] == "No tool is named: open_pr."
            assert calls == Counter()

    run(main)


def test_pinned_tools_are_listed_and_called_directly(embedder: Embedder) -> None:
    async def main() -> None:
        tools = [
            mcp_tool("search_tools", "Search calendar events by their text."),
            mcp_tool("create_event", "Create a calendar event."),
        ]
        calendar = PagedClient([tools], [None])
        # A pinned tool takes a meta tool's name: the meta tool steps aside.
        pins = {"calendar/search_tools": {"pinned": True}}
        proxy = await connected(embedder, {"calendar": calendar}, overrides=pins)
        async with Client(proxy.server) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["toolgate_search_tools", "call_tool", "search_tools"]
            direct = await client.call_tool("search_tools", {"id": "offsite"})
            assert text_of(direct) == "ran search_tools"
            found = await client.call_tool("toolgate_search_tools", {"query": "new event"})
            assert found_tools(found)[0]["name"] == "create_event"
            empty = await client.call_tool("toolgate_search_tools", {"query": ""})
            message = json.loads(text_of(empty))["message"]
            assert message == "toolgate_search_tools takes 'query', a non-empty string"
        assert calendar.called == [("search_tools", {"id": "offsite"})]

    run(main)


def test_a_search_selecting_a_pinned_tool_says_it_is_listed(embedder: Embedder) -> None:
    async def main() -> None:
        tools = [
            mcp_tool("list_events", "List calendar events."),
            mcp_tool("create_event", "Create a calendar event."),
        ]
        pins = {"calendar/create_event": {"pinned": True}}
        calendar = PagedClient([tools], [None])
        proxy = await connected(embedder, {"calendar": calendar}, overrides=pins)
        async with Client(proxy.server) as client:
            found = await client.call_tool("search_tools", {"query": "select:create_event"})
            assert found.structured_content == {"tools": []}
            # Selected exactly: never "no tool matched" for a tool the client lists already.
            assert text_of(found) == "Already listed (call it directly): create_event."

    run(main)


def test_a_search_overtaken_by_a_refresh_answers_from_the_tools_now(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        tools = [
            mcp_tool("list_events", "List calendar events."),
            mcp_tool("create_event", "Create a calendar event."),
        ]
        calendar = PagedClient([tools], [None])
        proxy = await connected(embedder, {"calendar": calendar})
        routed = router_module.route_search

        async def overtaken(*args: Any, **options: Any) -> Any:
            found = await routed(*args, **options)
            # Another client's turn lists the calendar again meanwhile: create_event is gone.
            calendar.pages = [tools[:1]]
            await proxy.router.refresh(["calendar"])
            return found

        monkeypatch.setattr(router_module, "route_search", overtaken)
        async with Client(proxy.server) as client:
            found = await client.call_tool("search_tools", {"query": "select:create_event"})
        # An answer, from the tools as they are now, never a KeyError for the tool gone.
        assert not found.is_error
        assert found.structured_content == {"tools": []}
        assert text_of(found).startswith("No tool matched.")

    run(main)


def test_another_server_cannot_take_a_qualified_name_over(embedder: Embedder) -> None:
    async def main() -> None:
        a = PagedClient([[mcp_tool("x", "A's x.")]], [None])
        b = PagedClient([[mcp_tool("x", "B's x.")]], [None])
        c = PagedClient([[mcp_tool("other", "Other.")]], [None])
        proxy = await connected(embedder, {"a": a, "b": b, "c": c})
        # c lists a tool named as a's is exposed, and says its tools changed.
        c.pages[0].append(mcp_tool("a__x", "C's own tool named a__x."))
        proxy.router.mark_changed("c")
        async with Client(proxy.server) as client:
            found = await client.call_tool("search_tools", {"query": "select:a/x,c/a__x"})
            names = {(t["server"], t["name"]) for t in found_tools(found)}
            assert names == {("a", "a__x"), ("c", "c__a__x")}
            for name in ("a__x", "c__a__x", "b__x"):
                await client.call_tool("call_tool", {"name": name, "arguments": {}})
        assert a.called == [("x", {})]
        assert c.called == [("a__x", {})]
        assert b.called == [("x", {})]

    run(main)


def test_an_upstream_tool_named_as_the_search_tool_is_found_and_called(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        tools = [
            mcp_tool("search_tools", "Search the shop's catalogue of power tools."),
            mcp_tool("buy", "Buy a product."),
        ]
        shop = PagedClient([tools], [None])
        proxy = await connected(embedder, {"shop": shop})
        async with Client(proxy.server) as client:
            # The proxy's search keeps its name; the shop's is found under another.
            found = await client.call_tool("search_tools", {"query": "search the catalogue"})
            assert "shop__search_tools" in [t["name"] for t in found_tools(found)]
            call = {"name": "shop__search_tools", "arguments": {"id": "drill"}}
            done = await client.call_tool("call_tool", call)
            assert text_of(done) == "ran search_tools"
        assert shop.called == [("search_tools", {"id": "drill"})]

    run(main)


def test_pinned_tools_are_listed_as_their_servers_list_them(embedder: Embedder) -> None:
    passed_on = {
        "outputSchema": {"type": "object", "properties": {"temp": {"type": "number"}}},
        "icons": [{"src": "https://example.com/weather.png"}],
        "_meta": {"vendor/x": 1},
    }

    async def main() -> None:
        tools = [
            {**mcp_tool("weather", "Get the weather for a city."), **passed_on},
            {**mcp_tool("forecast", "Get the forecast."), "icons": "not a list"},
        ]
        pins = {"w/weather": {"pinned": True}, "w/forecast": {"pinned": True}}
        proxy = await connected(embedder, {"w": PagedClient([tools], [None])}, overrides=pins)
        async with Client(proxy.server) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
        weather = listed["weather"].model_dump(mode="json", by_alias=True, exclude_none=True)
        assert {key: weather.get(key) for key in passed_on} == passed_on
        assert listed["forecast"].icons is None  # not MCP's shape: left out, not the listing

    run(main)


class BrokenClient(PagedClient):
    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        raise ConnectionError("upstream went away")


def test_a_proxy_that_failed_to_get_ready_tells_its_client_why(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    async def failed() -> None:
        raise ModelNotFoundError("the embedding model is not prepared; run it")

    errors: list[MCPError] = []

    async def main() -> None:
        proxy = McpProxy(McpRouter(embedder=embedder, cache=None), ready=failed)
        async with Client(proxy.server) as client:
            with pytest.raises(MCPError) as raised:
                await client.list_tools()
            errors.append(raised.value)

    run(main)
    assert "the embedding model is not prepared; run it" in str(errors[0])
    assert "Traceback" not in caplog.text  # the SDK logs no handler's failure


def test_an_upstream_failure_is_a_tool_error_for_the_model(embedder: Embedder) -> None:
    async def main() -> None:
        notes = BrokenClient([[mcp_tool("add_note", "Save a new note.")]], [None])
        proxy = await connected(embedder, {"notes": notes})
        async with Client(proxy.server) as client:
            failed = await client.call_tool("call_tool", {"name": "add_note", "arguments": {}})
            assert failed.is_error
            body = json.loads(text_of(failed))
            assert body["error"] == "upstream_error"
            assert "ConnectionError: upstream went away" in body["message"]

    run(main)


class GarbledClient(PagedClient):
    """An upstream whose answer its reader cannot parse: the error holds the raw bytes."""

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        raw = "{not json " + "x" * 5000
        raise ValueError(f"1 validation error for JSONRPCMessage\n  input_value={raw!r}")


def test_a_failure_the_model_is_shown_names_it_without_the_bytes(embedder: Embedder) -> None:
    async def main() -> None:
        notes = GarbledClient([[mcp_tool("add_note", "Save a new note.")]], [None])
        proxy = await connected(embedder, {"notes": notes})
        async with Client(proxy.server) as client:
            failed = await client.call_tool("call_tool", {"name": "add_note", "arguments": {}})
            message = json.loads(text_of(failed))["message"]
            assert "1 validation error for JSONRPCMessage" in message
            assert "not json" not in message  # what a broken upstream sent stays out
            assert len(message) < 400

    run(main)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [("read_log", {"chars": 20_000}), ("list_events", {"count": 2_000})],
    ids=["one big block", "many small blocks"],
)
def test_a_result_over_its_servers_limit_is_a_tool_error_in_its_place(
    embedder: Embedder, tool: str, arguments: dict[str, Any]
) -> None:
    async def main() -> None:
        async with Client(log_server()) as logs:
            limits = {"logs": 10_000}
            proxy = await connected(embedder, {"logs": logs}, max_result_bytes=limits)
            async with Client(proxy.server) as client:
                small = {"chars": 100} if tool == "read_log" else {"count": 10}
                fits = await client.call_tool("call_tool", {"name": tool, "arguments": small})
                assert not fits.is_error
                dropped = await client.call_tool(
                    "call_tool", {"name": tool, "arguments": arguments}
                )
                assert dropped.is_error
                body = json.loads(text_of(dropped))
                assert body["error"] == "result_too_large"
                assert (body["servers"], body["limit"]) == (["logs"], 10_000)
                assert body["bytes"] > 10_000
                assert body["message"].startswith(
                    f"The result of {tool!r} from server 'logs' is {body['bytes']:,} bytes, "
                    "more than the 10,000 bytes the proxy passes on"
                )

    run(main)


def test_a_results_limit_is_checked(embedder: Embedder) -> None:
    async def main() -> None:
        async with Client(log_server()) as logs:
            with pytest.raises(InvalidInputError, match="max_result_bytes must be an integer"):
                await connected(embedder, {"logs": logs}, max_result_bytes=4.5)
            with pytest.raises(InvalidInputError, match=r"max_result_bytes\['logs'\] must be"):
                await connected(embedder, {"logs": logs}, max_result_bytes={"logs": 4})

    run(main)


def test_call_tool_takes_arguments_as_models_send_them(embedder: Embedder) -> None:
    async def main() -> None:
        notes = PagedClient([[mcp_tool("add_note", "Save a new note.")]], [None])
        proxy = await connected(embedder, {"notes": notes})
        async with Client(proxy.server) as client:
            for arguments in ('{"id": "n1"}', None, ""):
                done = await client.call_tool(
                    "call_tool", {"name": "add_note", "arguments": arguments}
                )
                assert text_of(done) == "ran add_note"
            # The search tool, called through call_tool, searches.
            found = await client.call_tool(
                "call_tool", {"name": "search_tools", "arguments": {"query": "save a note"}}
            )
            assert found_tools(found)[0]["name"] == "add_note"
            assert found_tools(found)[0]["server"] == "notes"
        assert notes.called == [("add_note", {"id": "n1"}), ("add_note", {}), ("add_note", {})]

    run(main)


def test_the_proxy_keeps_to_its_allow_and_deny_lists(embedder: Embedder) -> None:
    async def main() -> None:
        tools = [
            mcp_tool("delete_note", "Delete a note for good."),
            mcp_tool("add_note", "Save a new note."),
        ]
        notes = PagedClient([tools], [None])
        router = McpRouter(embedder=embedder, cache=None, config=RouterConfig(top_k=2))
        await router.connect({"notes": notes})
        proxy = McpProxy(router, deny=["delete_*"])
        assert proxy.top_k == 2  # the router's configured top_k
        async with Client(proxy.server) as client:
            found = await client.call_tool("search_tools", {"query": "delete a note"})
            assert [t["name"] for t in found_tools(found)] == ["add_note"]
            refused = await client.call_tool("call_tool", {"name": "delete_note", "arguments": {}})
            body = json.loads(text_of(refused))
            assert body["error"] == "tool_not_available"
            assert body["message"].startswith("Tool 'delete_note' is not available.")
        assert notes.called == []

    run(main)


def test_a_search_query_of_megabytes_is_refused(embedder: Embedder) -> None:
    async def main() -> None:
        proxy = await connected(embedder, {"notes": PagedClient([[NOTE_TOOL]], [None])})
        refused = await proxy.call_tool("search_tools", {"query": "note " * 2_000})
        assert refused.is_error
        message = json.loads(text_of(refused))["message"]
        assert message.startswith("search_tools's query has 10,000 characters, more than 8,000")
        found = await proxy.call_tool("search_tools", {"query": "note " * 1_000})
        assert not found.is_error

    run(main)


def test_a_search_answers_with_structured_content_and_compact_schemas(
    embedder: Embedder,
) -> None:
    generated = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "title": "add_noteArguments",
        "properties": {"text": {"type": "string", "title": "Text"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    note = {**mcp_tool("add_note", "Save  a note.\n\n"), "inputSchema": generated}

    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None)
        await router.connect(
            {"notes": PagedClient([[note, mcp_tool("list_notes", "List")]], [None])}
        )
        async with Client(McpProxy(router).server) as client:
            found = await client.call_tool("search_tools", {"query": "select:add_note"})
            tools = found_tools(found)
            assert found.structured_content == {"tools": tools}
            assert tools == [
                {
                    "name": "add_note",
                    "description": "Save a note.",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"text": {"type": "string"}},
                        "required": ["text"],
                        "additionalProperties": False,
                    },
                    "server": "notes",
                }
            ]
            # The call is still checked against the full schema.
            refused = await client.call_tool(
                "call_tool", {"name": "add_note", "arguments": {"text": "x", "extra": 1}}
            )
            assert json.loads(text_of(refused))["error"] == "invalid_arguments"

    run(main)


def test_searches_are_logged_as_searches(embedder: Embedder) -> None:
    async def main() -> None:
        usage = UsageStats()
        router = McpRouter(embedder=embedder, cache=None, telemetry=Telemetry([usage]))
        await router.connect({"notes": PagedClient([[NOTE_TOOL]], [None])})
        proxy = McpProxy(router)
        for query in ("save a note", "select:add_note", "", "select:"):
            await proxy.call_tool("search_tools", {"query": query})
        await proxy.call_tool("call_tool", {"name": "add_note", "arguments": {}})
        # Counted as searches, as `toolgate stats --events` shows them; not as calls.
        assert (usage.search_calls, usage.search_invalid) == (2, 2)
        assert usage.called == Counter({"notes/add_note": 1})
        assert usage.routed == Counter({"notes/add_note": 2})

    run(main)


def test_a_search_answers_with_structured_content_too(embedder: Embedder) -> None:
    async def main() -> None:
        tools = [NOTE_TOOL, mcp_tool("delete_note", "Delete a note for good.")]
        proxy = await connected(embedder, {"notes": PagedClient([tools], [None])})
        async with Client(proxy.server) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            schema = listed["search_tools"].output_schema
            assert schema is not None
            # The client checks each answer against the schema: these pass it.
            found = await client.call_tool("search_tools", {"query": "select:add_note,nope"})
            assert found.structured_content == {
                "tools": json.loads(text_of(found).splitlines()[-1]),  # as the text has them
                "unknown": ["nope"],
            }
            assert found.structured_content["tools"][0]["name"] == "add_note"
            assert found.structured_content["tools"][0]["server"] == "notes"
            none = await client.call_tool("search_tools", {"query": "+calendar"})
            assert none.structured_content == {"tools": []}
            Draft202012Validator(schema).validate(none.structured_content)

    run(main)


class _SlowLegacyClient:
    """A legacy client connection that takes a while to take each notice."""

    def __init__(self) -> None:
        self.told = 0

    async def send_tool_list_changed(self) -> None:
        await anyio.sleep(0.05)
        self.told += 1


def test_a_storm_of_changes_is_told_to_each_client_once_more_not_once_each(
    embedder: Embedder,
) -> None:
    client = _SlowLegacyClient()

    async def main() -> None:
        proxy = McpProxy(McpRouter(embedder=embedder, cache=None))
        proxy._legacy_clients.add(client)
        async with anyio.create_task_group() as group:
            for _ in range(500):  # a server sending notice after notice
                group.start_soon(proxy.announce, "tools")
        assert client.told == 2  # the first, and one for all that came while it was sent
        await proxy.announce("tools")  # a later change is told again
        assert client.told == 3

    run(main)

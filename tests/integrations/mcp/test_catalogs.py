"""McpRouter's servers (the ``mcp`` SDK's, and client doubles): connecting, every page of
a listing, listing again when a server changed, and the failures and timeouts on the way."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from contextlib import nullcontext
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import MCPServer
from mcp.types import PaginatedRequestParams, ToolListChangedNotification

from tests.fixtures.mcp import (
    Calls,
    PagedClient,
    github_server,
    mcp_tool,
    run,
    text_of,
)
from tests.gateway.conftest import CountingEmbedder
from tests.integrations.mcp.router_helpers import PAGES, anthropic_call
from toolgate import CatalogError, CatalogWarning, InvalidInputError
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp import catalogs, listing
from toolgate.integrations.mcp.router import McpRouter


def test_a_list_changed_notification_is_listed_again_on_the_next_turn(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=2, embedder=embedder, cache=None)
        heard: list[str] = []

        async def host_handler(message: Any) -> None:
            heard.append(type(message).__name__)

        # The initialize handshake (legacy mode) is where servers send notifications.
        async with Client(
            github_server(calls),
            mode="legacy",
            message_handler=router.message_handler("github", then=host_handler),
        ) as github:
            first = await router.connect({"github": github})
            assert "github/publish_release" not in first.catalog

            promotion = await router.tools("enable the release tools", format="anthropic")
            outcome = await router.call(anthropic_call("enable_releases", {}), promotion)
            assert text_of(outcome.result) == "release tools enabled"
            with anyio.fail_after(5):
                while not router.changed:
                    await anyio.sleep(0.01)
            assert router.changed == {"github"}
            assert heard == ["ToolListChangedNotification"]  # passed on to the host's own

            promotion = await router.tools("publish release v2.0 of acme/web")
            assert router.changed == frozenset()
            assert "github/publish_release" in promotion.active_ids
            assert router.router is not first
            assert router.router.catalog.diff(first.catalog).to_dict() == {
                "added": [],
                "removed": ["github/publish_release"],
                "changed": [],
            }

            call = {
                "id": "c1",
                "function": {
                    "name": "publish_release",
                    "arguments": json.dumps({"repo": "acme/web", "tag": "v2.0"}),
                },
            }
            outcome = await router.call(call, promotion)
            assert text_of(outcome.result) == "published v2.0"

            # Nothing changed: the same router stays.
            assert await router.refresh(["github"]) is router.router

    run(main)


def test_a_watched_server_is_listed_again_after_a_listen_event(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=2, embedder=embedder, cache=None)
        async with Client(github_server(calls, modern=True)) as github:
            assert github.protocol_version == "2026-07-28"
            await router.connect({"github": github})
            async with anyio.create_task_group() as group:
                await group.start(router.watch, "github")
                # No replay on the stream: a change before it opened is listed next turn.
                assert router.changed == {"github"}
                promotion = await router.tools("enable the release tools")
                await router.call({"name": "enable_releases", "arguments": {}}, promotion)
                with anyio.fail_after(5):
                    while not router.changed:
                        await anyio.sleep(0.01)
                promotion = await router.tools("publish release v2.0 of acme/web")
                assert "github/publish_release" in promotion.active_ids
                group.cancel_scope.cancel()

        async with Client(github_server(calls), mode="legacy") as legacy:
            router = McpRouter(embedder=embedder, cache=None)
            await router.connect({"github": legacy, "billing": PagedClient(PAGES, [None] * 3)})
            with pytest.raises(InvalidInputError, match=r"'github': .*2026-07-28.*message_handler"):
                await router.watch("github")
            with pytest.raises(InvalidInputError, match=r"'billing': PagedClient has no listen"):
                await router.watch("billing")

    run(main)


class ParamsClient(PagedClient):
    """Pages asked for as the 2.x ClientSession takes them: ``params=``."""

    async def list_tools(  # type: ignore[override]
        self, *, params: PaginatedRequestParams | None = None
    ) -> dict[str, Any]:
        return await super().list_tools(None if params is None else params.cursor)


@pytest.mark.parametrize("client_type", [PagedClient, ParamsClient])
def test_every_page_of_a_listing_is_read(embedder: Embedder, client_type: type) -> None:
    async def main() -> None:
        client = client_type(PAGES, ["p2", "p3", None])
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        built = await router.connect({"billing": client})
        assert built.catalog.ids == [
            "billing/list_invoices",
            "billing/refund_payment",
            "billing/create_customer",
        ]
        assert client.asked == [None, "p2", "p3"]

        promotion = await router.tools("refund the payment for order 1182")
        assert promotion.active_ids == ("billing/refund_payment",)
        outcome = await router.call(
            {"name": "refund_payment", "arguments": {"id": "1182"}}, promotion
        )
        assert text_of(outcome.result) == "ran refund_payment"  # a dict result, validated
        assert client.called == [("refund_payment", {"id": "1182"})]

    run(main)


def test_a_listing_that_never_ends_is_an_error_naming_the_server(embedder: Embedder) -> None:
    async def main() -> None:
        looping = PagedClient(PAGES, ["p2", "p2", None])  # page 2 points back at itself
        with pytest.raises(CatalogError, match=r"'billing'.*page 2 repeats cursor 'p2'"):
            await McpRouter(embedder=embedder, cache=None).connect({"billing": looping})

    run(main)


def tools_named(prefix: str, count: int, description: str = "A tool.") -> list[dict[str, Any]]:
    return [mcp_tool(f"{prefix}_{i}", description) for i in range(count)]


def test_a_listing_past_the_bounds_is_an_error_naming_the_server(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def connect(client: PagedClient) -> None:
        await McpRouter(embedder=embedder, cache=None).connect({"flood": client})

    async def main() -> None:
        # Two pages of 5,001 tools: stopped on the second, before any is embedded.
        many = PagedClient([tools_named("a", 5_001), tools_named("b", 5_001)], ["p2", None])
        with pytest.raises(CatalogError, match="'flood': tools/list lists more than 10,000 tools"):
            await connect(many)
        monkeypatch.setattr(listing, "MAX_LISTING_CHARS", 50_000)
        wordy = PagedClient([tools_named("c", 10, "word " * 2_000)], [None])
        with pytest.raises(
            CatalogError, match="'flood': tools/list takes more than 50,000 characters of JSON"
        ):
            await connect(wordy)

    run(main)


class FlakyClient(PagedClient):
    def __init__(self, failures: int) -> None:
        super().__init__(
            [[mcp_tool("get_forecast", "Get the weather forecast for a city.")]], [None]
        )
        self.failures = failures

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("server went away")
        return await super().list_tools(cursor)


def test_a_server_that_cannot_be_listed_is_an_error_or_retried_when_lenient(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        billing = PagedClient(PAGES, ["p2", "p3", None])
        with pytest.raises(CatalogError, match=r"'weather': tools/list failed: Connection"):
            await McpRouter(embedder=embedder, cache=None).connect(
                {"billing": billing, "weather": FlakyClient(failures=1)}
            )

        router = McpRouter(top_k=1, embedder=embedder, cache=None, lenient=True, retry_after=0)
        with pytest.warns(CatalogWarning, match=r"'weather'.*stay as last listed"):
            built = await router.connect({"billing": billing, "weather": FlakyClient(1)})
        assert built.catalog.servers == ["billing"]
        assert router.changed == {"weather"}

        promotion = await router.tools("what is the weather forecast for Oslo")
        assert router.changed == frozenset()
        assert promotion.active_ids == ("weather/get_forecast",)

    run(main)


class LateClient(FlakyClient):
    """Fails its first ``failures`` listings; answers the next ones once ``answer`` is set."""

    def __init__(self, name: str, answer: anyio.Event, failures: int = 1) -> None:
        super().__init__(failures)
        self.pages = [[mcp_tool(name, f"Do {name} for a city.")]]
        self.answer = answer

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        if not self.failures:
            await self.answer.wait()
        return await super().list_tools(cursor)


class SignallingClient(LateClient):
    """A :class:`LateClient` that sets ``listed`` once it has answered a listing."""

    def __init__(self, name: str, answer: anyio.Event, listed: anyio.Event) -> None:
        super().__init__(name, answer)
        self.listed = listed

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        page = await super().list_tools(cursor)
        self.listed.set()  # a failed listing raised above
        return page


def test_servers_keep_the_hosts_order_whatever_their_listings_history(
    embedder: Embedder,
) -> None:
    # The catalog's order sets its version (the learned memory's scope), the order promoted
    # tools go in and how exact ties break: it must be the host's order of its servers, not
    # which server failed its first listing or answered first when listed again.
    async def main() -> None:
        billing = PagedClient(PAGES, ["p2", "p3", None])
        healthy = McpRouter(embedder=embedder, cache=None)
        ready = anyio.Event()
        ready.set()
        news_now = LateClient("get_news", ready, failures=0)
        weather_now = LateClient("get_forecast", ready, failures=0)
        await healthy.connect({"news": news_now, "billing": billing, "weather": weather_now})
        router = McpRouter(embedder=embedder, cache=None, lenient=True, retry_after=0)
        # Both fail at connect; listed again, weather answers first, news once it has.
        weather_listed = anyio.Event()
        news = LateClient("get_news", weather_listed)
        weather = SignallingClient("get_forecast", ready, weather_listed)
        with pytest.warns(CatalogWarning, match="tools/list failed"):
            await router.connect({"news": news, "billing": billing, "weather": weather})
        assert router.router.catalog.servers == ["billing"]
        await router.update()
        assert router.changed == frozenset()
        assert router.router.catalog.servers == healthy.router.catalog.servers
        assert router.router.catalog.version == healthy.router.catalog.version

    run(main)


def test_a_failed_refresh_keeps_the_old_tools_and_is_tried_again(embedder: Embedder) -> None:
    async def main() -> None:
        weather = FlakyClient(failures=0)
        router = McpRouter(top_k=1, embedder=embedder, cache=None, retry_after=0)
        first = await router.connect({"weather": weather})
        weather.failures = 1
        router.mark_changed("weather")
        # Strict, but a turn never fails for a server it lists again: it warns.
        with pytest.warns(CatalogWarning, match="'weather': tools/list failed"):
            kept = await router.tools("weather in Oslo")
        assert kept.active_ids == ("weather/get_forecast",)
        assert router.router is first
        assert router.changed == {"weather"}
        weather.failures = 1
        with pytest.raises(CatalogError, match="'weather': tools/list failed"):
            await router.refresh(["weather"])  # asked for: an error
        weather.pages[0].append(mcp_tool("get_air_quality", "Get the air quality index."))
        promotion = await router.tools("air quality index in Oslo")
        assert router.changed == frozenset()
        assert promotion.active_ids == ("weather/get_air_quality",)

    run(main)


def test_servers_come_and_go(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=2, embedder=embedder, cache=None)
        billing = PagedClient(PAGES, ["p2", "p3", None])
        await router.connect({"billing": billing})
        await router.add_server("weather", FlakyClient(failures=0))
        assert router.servers == ["billing", "weather"]
        promotion = await router.tools("weather forecast for Oslo")
        assert "weather/get_forecast" in promotion.active_ids

        await router.remove_server("weather")
        assert router.router.catalog.servers == ["billing"]
        # A call from the turn before the server left: refused in-band, not forwarded.
        gone = await router.call({"name": "get_forecast", "arguments": {}}, promotion)
        assert not gone.forwarded
        body = json.loads(text_of(gone.result))
        assert body["error"] == "tool_not_available"
        assert "'weather' was disconnected" in body["message"]

        await router.remove_server("billing")  # the last one: nothing left to route
        assert len(router.router.catalog) == 0
        assert (await router.tools("weather forecast for Oslo")).active_ids == ()
        await router.add_server("billing", billing)

        with pytest.raises(InvalidInputError, match="'billing' is already connected"):
            await router.add_server("billing", billing)
        with pytest.raises(InvalidInputError, match=r"no server 'weather'"):
            await router.remove_server("weather")
        with pytest.raises(InvalidInputError, match=r"no server 'nope'; connected: \['billing'\]"):
            await router.refresh(["nope"])

    run(main)


class HeldClient(FlakyClient):
    """Lists its tools once ``release`` is set, after ``held`` says a listing has begun."""

    def __init__(self) -> None:
        super().__init__(failures=0)
        self.held, self.release = anyio.Event(), anyio.Event()

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        if self.asked:  # connect's listing is answered at once, the next ones are held
            self.held.set()
            await self.release.wait()
        return await super().list_tools(cursor)


def test_a_server_removed_while_it_is_listed_again_stays_removed(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=2, embedder=embedder, cache=None)
        weather = HeldClient()
        billing = PagedClient(PAGES, ["p2", "p3", None])
        await router.connect({"billing": billing, "weather": weather})
        router.mark_changed("weather")
        async with anyio.create_task_group() as group:
            group.start_soon(router.tools, "weather forecast for Oslo")  # lists weather again
            await weather.held.wait()
            await router.remove_server("weather")  # the host disconnects it meanwhile
            weather.release.set()
        # The listing that was under way brings none of the removed server's tools back:
        # they would be offered on every turn, and every call to them refused.
        assert router.router.catalog.servers == ["billing"]
        assert router.servers == ["billing"]
        promotion = await router.tools("weather forecast for Oslo")
        assert "weather/get_forecast" not in promotion.active_ids

        readded = HeldClient()
        await router.add_server("weather", readded)
        router.mark_changed("weather")
        async with anyio.create_task_group() as group:
            group.start_soon(router.tools, "weather forecast for Oslo")
            await readded.held.wait()
            await router.remove_server("weather")
            await router.add_server("weather", FlakyClient(failures=0))  # another connection
            readded.release.set()
        # The old connection's listing does not replace what the new one listed.
        assert router.client("weather") is not readded
        assert "weather/get_forecast" in router.router.catalog

    run(main)


def test_a_listing_is_read_past_the_clients_response_cache(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        server = github_server(calls)
        server_cached = MCPServer("notes", cache_hints={"tools/list": CacheHint(ttl_ms=600_000)})

        @server_cached.tool()
        def add_note(title: str) -> str:
            """Save a new note."""
            return "saved"

        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        async with Client(server_cached) as notes, Client(server) as github:
            await router.connect({"notes": notes, "github": github})
            server_cached.add_tool(
                lambda title: "deleted",
                name="delete_note",
                description="Delete a note by its title.",
            )
            router.mark_changed("notes")
            promotion = await router.tools("delete the note about groceries")
            assert promotion.active_ids == ("notes/delete_note",)

    run(main)


class HangingClient(PagedClient):
    """Lists its pages once, then never answers again."""

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        if len(self.asked) >= len(self.pages):
            self.asked.append(cursor)
            await anyio.sleep_forever()
        return await super().list_tools(cursor)


def test_a_server_that_stops_answering_does_not_hold_up_turns(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(
            top_k=1, embedder=embedder, cache=None, lenient=True, list_timeout=0.2, retry_after=60
        )
        hanging = HangingClient(PAGES, ["p2", "p3", None])
        await router.connect({"billing": hanging})
        router.mark_changed("billing")
        with pytest.warns(CatalogWarning, match=r"'billing': tools/list took over 0.2 s"):
            first = await router.tools("refund a payment")
        assert first.active_ids == ("billing/refund_payment",)  # the tools listed before
        for _ in range(3):  # waiting out retry_after: not listed, not waited for
            await router.tools("refund a payment")
        assert len(hanging.asked) == 4  # connect's three pages, then the one that hung
        assert router.changed == {"billing"}

        strict = McpRouter(top_k=1, embedder=embedder, cache=None, list_timeout=0.2)
        await strict.connect({"billing": HangingClient(PAGES, ["p2", "p3", None])})
        with pytest.raises(CatalogError, match=r"took over 0\.2 s"):
            await strict.refresh(["billing"])

    run(main)


def test_notices_about_servers_not_connected_are_ignored(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        await router.connect({"billing": PagedClient(PAGES, ["p2", "p3", None])})
        await router.message_handler("jira")(ToolListChangedNotification())
        assert router.changed == {"jira"}
        await router.tools("refund a payment")
        assert router.changed == frozenset()

    run(main)


def test_connecting_twice_at_once_connects_once(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None)
        outcomes: list[str] = []

        async def connect(name: str) -> None:
            try:
                await router.connect({name: PagedClient(PAGES, ["p2", "p3", None])})
                outcomes.append(name)
            except InvalidInputError as exc:
                outcomes.append(str(exc))

        async with anyio.create_task_group() as group:
            group.start_soon(connect, "a")
            group.start_soon(connect, "b")
        refused = "already connected; use add_server to add a server"
        assert sorted(outcomes) == sorted([*router.servers, refused])
        assert len(router.servers) == 1

    run(main)


def test_a_repeated_tool_across_pages_is_kept_once(embedder: Embedder) -> None:
    async def main() -> None:
        shifted = [PAGES[0], PAGES[0] + PAGES[1], PAGES[2]]  # page 2 repeats page 1's tool
        router = McpRouter(embedder=embedder, cache=None)
        built = await router.connect({"billing": PagedClient(shifted, ["p2", "p3", None])})
        assert len(built.catalog) == 3

    run(main)


class NoticingClient(PagedClient):
    """Hears of a change while its listing is read (the notice arrives mid-listing)."""

    def __init__(self, router: McpRouter) -> None:
        super().__init__(PAGES, ["p2", "p3", None])
        self.router = router

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        if cursor == "p3":
            self.router.mark_changed("billing")
        return await super().list_tools(cursor)


def test_a_change_heard_while_connecting_is_listed_next_turn(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        await router.connect({"billing": NoticingClient(router)})
        assert router.changed == {"billing"}

    run(main)


def test_a_turn_does_not_wait_for_another_servers_listing(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None, list_timeout=5, retry_after=60)
        hanging = HangingClient(PAGES, ["p2", "p3", None])
        weather = FlakyClient(failures=0)
        await router.connect({"billing": hanging, "weather": weather})
        elapsed: dict[str, float] = {}

        async def turn(name: str, query: str) -> None:
            start = anyio.current_time()
            with pytest.warns(CatalogWarning) if name == "billing" else nullcontext():
                await router.tools(query)
            elapsed[name] = anyio.current_time() - start

        router.mark_changed("billing")
        async with anyio.create_task_group() as group:
            group.start_soon(turn, "billing", "refund a payment")  # lists billing: hangs 5 s
            await anyio.sleep(0.2)
            router.mark_changed("weather")
            group.start_soon(turn, "weather", "weather forecast for Oslo")
        assert elapsed["weather"] < 2.5 < elapsed["billing"]

    run(main)


def test_timeouts_and_cursors_are_read_with_care(embedder: Embedder) -> None:
    with pytest.raises(InvalidInputError, match="list_timeout must be seconds > 0"):
        McpRouter(list_timeout=0)

    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None)
        built = await router.connect({"billing": PagedClient(PAGES[:1], [""])})  # "": the end
        assert built.catalog.ids == ["billing/list_invoices"]

    run(main)


def test_a_reconnected_server_is_called_through_its_new_client(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        old, new = PagedClient(PAGES, ["p2", "p3", None]), PagedClient(PAGES, ["p2", "p3", None])
        await router.connect({"billing": old})
        await router.replace_client("billing", new)
        assert router.client("billing") is new
        assert router.changed == {"billing"}  # a restarted server may list other tools
        promotion = await router.tools("refund a payment")
        await router.call({"name": "refund_payment", "arguments": {}}, promotion)
        assert (old.called, new.called) == ([], [("refund_payment", {})])
        with pytest.raises(InvalidInputError, match="no server 'nope'"):
            await router.replace_client("nope", new)

    run(main)


def test_prepare_loads_the_model_once_for_the_first_connect(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    def default_embedder(precision: str, *, progress: bool | None = None) -> Embedder:
        made.append(precision)
        return embedder

    monkeypatch.setattr(catalogs, "default_embedder", default_embedder)

    async def main() -> None:
        router = McpRouter(cache=None)
        async with anyio.create_task_group() as group:  # a host starting its servers meanwhile
            group.start_soon(router.prepare)
            group.start_soon(router.prepare)
        assert made == ["int8"]  # the default precision
        await router.connect({"notes": PagedClient([[mcp_tool("add_note", "Save.")]], [None])})
        assert made == ["int8"]  # the model prepared is the one connect used

    run(main)


def _said(heard: pytest.WarningsRecorder) -> str:
    return "\n".join(str(warning.message) for warning in heard)


def _self_pinned(name: str, description: str) -> dict[str, Any]:
    return {**mcp_tool(name, description), "_meta": {"toolgate": {"pinned": True}}}


@pytest.mark.parametrize("lenient", [False, True])
def test_a_server_pinning_its_own_tool_is_warned_of_never_an_error(
    embedder: Embedder, lenient: bool
) -> None:
    async def main() -> None:
        docs = PagedClient([[_self_pinned("get_page", "Fetch a documentation page.")]], [None])
        router = McpRouter(top_k=1, embedder=embedder, cache=None, lenient=lenient)
        with pytest.warns(CatalogWarning, match="server 'docs': tool 'get_page' pins itself"):
            built = await router.connect({"docs": docs, "billing": PagedClient(PAGES, [None])})
        assert built.catalog.ids == ["docs/get_page", "billing/list_invoices"]
        assert built.catalog.pinned_ids == ()

        # A later listing (list_changed heard, then a turn) is read the same way.
        docs.pages[0].append(_self_pinned("search_docs", "Search the documentation."))
        router.mark_changed("docs")
        with pytest.warns(CatalogWarning) as heard:  # of each tool that pins itself
            await router.tools("search the docs")
        assert "tool 'search_docs' pins itself" in _said(heard)
        assert "docs/search_docs" in router.router.catalog
        assert router.router.catalog.pinned_ids == ()
        # And so is a refresh the host asks for, which raises for bad tools when strict.
        docs.pages[0].append(_self_pinned("get_toc", "Get the table of contents."))
        with pytest.warns(CatalogWarning) as heard:
            refreshed = await router.refresh(["docs"])
        assert "tool 'get_toc' pins itself" in _said(heard)
        assert refreshed.catalog.pinned_ids == ()

    run(main)


def test_the_hosts_override_pins_a_tool_that_pins_itself(embedder: Embedder) -> None:
    async def main() -> None:
        docs = PagedClient([[_self_pinned("get_page", "Fetch a documentation page.")]], [None])
        pin = {"docs/get_page": {"pinned": True}}
        router = McpRouter(embedder=embedder, cache=None, overrides=pin)
        built = await router.connect({"docs": docs})  # no warning: the host decided
        assert built.catalog.pinned_ids == ("docs/get_page",)

    run(main)


def test_a_connect_retried_after_a_timeout_joins_the_build_the_timeout_left_running(
    embedder: Embedder,
) -> None:
    """asyncio's cancellation does not stop a build on its worker thread: a host retrying
    connect under asyncio.timeout started a build per attempt beside the others, and with a
    timeout shorter than a build (they slow each other down) none ever finished."""
    once = CountingEmbedder(embedder)  # what one build embeds (the embedder's own texts once)
    for counted in (embedder, once):
        anyio.run(
            McpRouter(top_k=2, embedder=counted, cache=None).connect,  # type: ignore[arg-type]
            {"billing": PagedClient(PAGES, ["p2", "p3", None])},
        )
    release = threading.Event()
    held = CountingEmbedder(embedder, hold=release)
    router = McpRouter(top_k=2, embedder=held, cache=None)  # type: ignore[arg-type]

    async def attempt(timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await router.connect({"billing": PagedClient(PAGES, ["p2", "p3", None])})
        except TimeoutError:
            return False
        return True

    async def main() -> list[bool]:
        tries = [await attempt(0.3), await attempt(0.3)]  # the first build is held meanwhile
        release.set()
        return [*tries, await attempt(60)]

    assert asyncio.run(main()) == [False, False, True]
    assert "billing/refund_payment" in router.router.catalog
    assert held.batch_texts == once.batch_texts  # built once for the three attempts

"""The MCP integration: McpRouter in front of real in-process MCP servers (the ``mcp`` SDK)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import PaginatedRequestParams
from tests.mcp_fixtures import (
    Calls,
    PagedClient,
    calendar_server,
    github_server,
    mcp_tool,
    run,
    text_of,
)

from toolgate import CatalogError, CatalogWarning, InvalidInputError
from toolgate.embed import Embedder
from toolgate.integrations.mcp import McpRouter


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(precision="int8")


def anthropic_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}


def exposed(promotion: Any) -> list[str]:
    return [tool["function"]["name"] if "function" in tool else tool["name"]
            for tool in promotion.tools]  # fmt: skip


def test_routes_a_turn_and_forwards_the_call_to_its_server(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=2, embedder=embedder, cache=None)
        async with (
            Client(github_server(calls)) as github,
            Client(calendar_server(calls)) as calendar,
        ):
            await router.connect({"github": github, "calendar": calendar})
            assert router.servers == ["github", "calendar"]
            promotion = await router.tools(
                "open an issue about the flaky login test in acme/web", format="anthropic"
            )
            assert "github/create_issue" in promotion.active_ids
            assert len(promotion.tools) == 2

            call = anthropic_call("create_issue", {"repo": "acme/web", "title": "Flaky login"})
            outcome = await router.call(call, promotion)
            assert outcome.forwarded
            assert outcome.server == "github"
            assert outcome.verdict.tool_id == "github/create_issue"
            assert not outcome.result.is_error
            assert text_of(outcome.result) == "opened 'Flaky login' in acme/web"
            assert calls == Counter({"create_issue": 1})

    run(main)


def test_a_name_two_servers_share_reaches_the_right_server_under_its_own_name(
    embedder: Embedder,
) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=3, embedder=embedder, cache=None)
        async with (
            Client(github_server(calls)) as github,
            Client(calendar_server(calls)) as calendar,
        ):
            await router.connect({"github": github, "calendar": calendar})
            promotion = await router.tools("search my calendar events for the offsite")
            names = exposed(promotion)
            assert "calendar/search" in promotion.active_ids
            calendar_search = router.router.catalog["calendar/search"].exposed_name
            assert calendar_search != "search"  # renamed apart from github's search
            assert calendar_search in names

            call = {"type": "function", "function": {"name": calendar_search,
                    "arguments": json.dumps({"text": "offsite"})}}  # fmt: skip
            outcome = await router.call({"id": "c1", **call}, promotion)
            assert outcome.server == "calendar"
            assert text_of(outcome.result) == "events matching 'offsite'"
            assert calls == Counter({"calendar.search": 1})

    run(main)


def test_a_refused_call_never_reaches_a_server(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        async with Client(github_server(calls)) as github:
            await router.connect({"github": github})
            promotion = await router.tools("open an issue in acme/web", format="anthropic")
            assert promotion.active_ids == ("github/create_issue",)

            # Not offered this turn.
            merge = await router.call(
                anthropic_call("merge_pull_request", {"repo": "acme/web", "number": 7}),
                promotion,
            )
            assert not merge.forwarded
            assert merge.result.is_error
            body = json.loads(text_of(merge.result))
            assert body["error"] == "tool_not_available"
            assert body["available"] == ["create_issue"]

            # Offered, but the arguments break its schema.
            bad = await router.call(anthropic_call("create_issue", {"repo": "acme/web"}), promotion)
            assert not bad.forwarded
            assert json.loads(text_of(bad.result))["error"] == "invalid_arguments"
            assert calls == Counter()

    run(main)


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
                "added": [], "removed": ["github/publish_release"], "changed": [],
            }  # fmt: skip

            call = {"id": "c1", "function": {"name": "publish_release",
                    "arguments": json.dumps({"repo": "acme/web", "tag": "v2.0"})}}  # fmt: skip
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


PAGES = [
    [mcp_tool("list_invoices", "List the invoices of a customer.")],
    [mcp_tool("refund_payment", "Refund a card payment in full or in part.")],
    [mcp_tool("create_customer", "Create a customer record.")],
]


@pytest.mark.parametrize("client_type", [PagedClient, ParamsClient])
def test_every_page_of_a_listing_is_read(embedder: Embedder, client_type: type) -> None:
    async def main() -> None:
        client = client_type(PAGES, ["p2", "p3", None])
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        built = await router.connect({"billing": client})
        assert built.catalog.ids == [
            "billing/list_invoices", "billing/refund_payment", "billing/create_customer",
        ]  # fmt: skip
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


class FlakyClient(PagedClient):
    def __init__(self, failures: int) -> None:
        super().__init__([[mcp_tool("get_forecast", "Get the weather forecast for a city.")]],
                         [None])  # fmt: skip
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

        router = McpRouter(top_k=1, embedder=embedder, cache=None, lenient=True)
        with pytest.warns(CatalogWarning, match=r"'weather'.*listed again on the next turn"):
            built = await router.connect({"billing": billing, "weather": FlakyClient(1)})
        assert built.catalog.servers == ["billing"]
        assert router.changed == {"weather"}

        promotion = await router.tools("what is the weather forecast for Oslo")
        assert router.changed == frozenset()
        assert promotion.active_ids == ("weather/get_forecast",)

    run(main)


def test_a_failed_refresh_keeps_the_old_tools_and_is_tried_again(embedder: Embedder) -> None:
    async def main() -> None:
        weather = FlakyClient(failures=0)
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        first = await router.connect({"weather": weather})
        weather.failures = 1
        router.mark_changed("weather")
        with pytest.raises(CatalogError, match="'weather': tools/list failed"):
            await router.tools("weather in Oslo")
        assert router.router is first
        assert router.changed == {"weather"}
        weather.pages[0].append(mcp_tool("get_air_quality", "Get the air quality index."))
        promotion = await router.tools("air quality index in Oslo")
        assert router.changed == frozenset()
        assert promotion.active_ids == ("weather/get_air_quality",)

    run(main)


def test_tool_search_answers_in_band_and_its_finds_come_next_turn(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=2, embedder=embedder, cache=None)
        async with Client(github_server(calls)) as github:
            await router.connect({"github": github})
            promotion = await router.tools("open an issue in acme/web", pool="digest")
            assert promotion.search_tool_name == "tool_search"
            assert "tool_search" in exposed(promotion)

            search = {"name": "tool_search", "arguments": {"query": "merge a pull request"}}
            outcome = await router.call(search, promotion)
            assert not outcome.forwarded
            assert outcome.found[0] == "github/merge_pull_request"
            lines = text_of(outcome.result).splitlines()
            assert lines[0] == "- merge_pull_request: Merge a pull request."
            assert lines[-1] == "These tools are available on your next turn."

            follow_up = await router.tools("go ahead", include=outcome.found)
            assert "github/merge_pull_request" in follow_up.active_ids
            merge = {"name": "merge_pull_request", "arguments": {"repo": "a/b", "number": 7}}
            assert (await router.call(merge, follow_up)).forwarded
            assert calls == Counter({"merge_pull_request": 1})

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


def test_a_promotion_from_tools_no_longer_loaded_is_refused(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None)
        billing = PagedClient(PAGES, ["p2", "p3", None])
        await router.connect({"billing": billing})
        old = await router.tools("refund a payment")
        for n in range(5):  # each a new catalog version; only the last few are kept
            billing.pages[0] = [mcp_tool("list_invoices", f"List the invoices, take {n}.")]
            await router.refresh(["billing"])
        with pytest.raises(InvalidInputError, match="no longer loaded"):
            await router.call({"name": "refund_payment", "arguments": {}}, old)
        assert billing.called == []

    run(main)


def test_bad_input_is_named(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None)
        with pytest.raises(InvalidInputError, match="not connected"):
            await router.tools("anything")
        with pytest.raises(InvalidInputError, match="servers must map server names"):
            await router.connect([PagedClient(PAGES, ["p2", "p3", None])])  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match=r"server 'x': expected a connected MCP client"):
            await router.connect({"x": object()})  # type: ignore[dict-item]
        with pytest.raises(InvalidInputError, match="server names must be non-empty strings"):
            await router.connect({" ": PagedClient(PAGES, ["p2", "p3", None])})
        with pytest.raises(InvalidInputError, match="top_k must be an integer >= 1"):
            McpRouter(top_k=0)

        await router.connect({"billing": PagedClient(PAGES, ["p2", "p3", None])})
        with pytest.raises(InvalidInputError, match="already connected"):
            await router.connect({"billing": PagedClient(PAGES, ["p2", "p3", None])})
        with pytest.raises(InvalidInputError, match="takes the turn's Promotion"):
            await router.call({"name": "x"}, router.router.route("refund"))  # type: ignore[arg-type]

    run(main)

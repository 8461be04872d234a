"""McpRouter in front of real in-process MCP servers (the ``mcp`` SDK): turns, calls and
``tool_search`` answers."""

from __future__ import annotations

import copy
import json
import pickle
import threading
from collections import Counter
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult

from tests.fixtures.mcp import (
    Calls,
    PagedClient,
    calendar_server,
    github_server,
    mcp_tool,
    run,
    text_of,
)
from tests.integrations.mcp.router_helpers import PAGES, anthropic_call
from toolgate import Budget, CatalogError, InvalidInputError
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp import calls as calls_module
from toolgate.integrations.mcp.router import CallOutcome, McpRouter
from toolgate.promotion.discovery import TOOL_SEARCH_ID
from toolgate.routing import router as router_module
from toolgate.routing.config import RouterConfig
from toolgate.telemetry import MemorySink, Telemetry, UsageStats
from toolgate.telemetry.events import VerifyEvent
from toolgate.verify import Verdict


def exposed(promotion: Any) -> list[str]:
    return [
        tool["function"]["name"] if "function" in tool else tool["name"] for tool in promotion.tools
    ]


def test_routes_a_turn_and_forwards_the_call_to_its_server(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        # The top 2 as they rank, listed in a full pool (no search tool among the tools).
        plain = RouterConfig(adaptive=False)
        router = McpRouter(top_k=2, embedder=embedder, cache=None, config=plain)
        async with (
            Client(github_server(calls)) as github,
            Client(calendar_server(calls)) as calendar,
        ):
            await router.connect({"github": github, "calendar": calendar})
            assert router.servers == ["github", "calendar"]
            promotion = await router.tools(
                "open an issue about the flaky login test in acme/web",
                format="anthropic",
                pool="full",
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

            call = {
                "type": "function",
                "function": {"name": calendar_search, "arguments": json.dumps({"text": "offsite"})},
            }
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
            # A full pool: no tool_search among the tools offered.
            promotion = await router.tools(
                "open an issue in acme/web", format="anthropic", pool="full"
            )
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


def test_a_call_holding_too_many_values_is_refused_before_it_is_walked_through(
    embedder: Embedder,
) -> None:
    # Checking each value takes microseconds of Python on the event loop, which every
    # other session shares: 3 million stalled it for seconds. The check stops at the limit.
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        async with Client(github_server(calls)) as github:
            await router.connect({"github": github})
            call = {"name": "search", "arguments": {"query": "x", "ids": [0] * 3_000_000}}
            outcome = await router.call_any(call)
            assert not outcome.forwarded
            body = json.loads(text_of(outcome.result))
            assert body["error"] == "malformed_call"
            assert "more than 100,000 values" in body["message"]
            assert calls == Counter()

    run(main)


def test_calls_are_checked_off_the_event_loop(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Even within the limit on values, checking a large call holds the loop, which every
    # session shares, for a tenth of a second or more: it is checked in a worker thread.
    calls: Calls = Counter()
    checked_in: list[int] = []
    # The check is the router's (Router.checked), the JSON check the forwarder's.
    verify, problem = router_module.verify_call, calls_module.json_problem

    def spied_verify(*args: Any, **kwargs: Any) -> Any:
        checked_in.append(threading.get_ident())
        return verify(*args, **kwargs)

    def spied_problem(*args: Any, **kwargs: Any) -> Any:
        checked_in.append(threading.get_ident())
        return problem(*args, **kwargs)

    monkeypatch.setattr(router_module, "verify_call", spied_verify)
    monkeypatch.setattr(calls_module, "json_problem", spied_problem)

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        async with Client(github_server(calls)) as github:
            await router.connect({"github": github})
            promotion = await router.tools("search code", pool="full")
            call = {"name": "search", "arguments": {"query": "x"}}
            assert (await router.call(call, promotion)).forwarded
            assert (await router.call_any(call)).forwarded
            assert len(checked_in) == 4  # each call's verify, and its arguments' JSON check
            assert threading.get_ident() not in checked_in
            assert calls == Counter({"github.search": 2})

    run(main)


def test_tool_search_answers_in_band_and_its_finds_come_next_turn(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        async with Client(github_server(calls)) as github:
            await router.connect({"github": github})
            promotion = await router.tools("open an issue in acme/web", pool="digest")
            assert promotion.active_ids == ("github/create_issue",)
            assert "tool_search" in exposed(promotion)

            async def search(query: str, **scope: Any) -> Any:
                call = {"name": "tool_search", "arguments": {"query": query}}
                return await router.call(call, promotion, **scope)

            outcome = await search("merge a pull request")
            assert not outcome.forwarded
            assert outcome.found == ("github/merge_pull_request",)
            assert text_of(outcome.result).splitlines() == [
                "- merge_pull_request: Merge a pull request.",
                "These tools are available on your next turn.",
            ]

            # What the turn offers already is not found again; unknown names are told.
            again = await search("select:create_issue,open_pr")
            assert again.found == ()
            assert text_of(again.result).splitlines()[1:] == ["No tool is named: open_pr."]
            typo = await search("select:merge_pull_requst")
            assert text_of(typo.result).splitlines()[-1] == (
                "No tool is named: merge_pull_requst (did you mean 'merge_pull_request'?)."
            )
            # The turn's allow / deny lists hold for searches too.
            assert (await search("merge a pull request", deny=["merge_*"])).found[:1] != (
                "github/merge_pull_request",
            )
            # A query the router cannot read is the model's to fix, in-band.
            for query in ("select:", "  "):
                bad = await search(query)
                body = json.loads(text_of(bad.result))
                assert (body["error"], body["path"]) == ("invalid_arguments", "query")

            follow_up = await router.tools("go ahead", include=outcome.found)
            assert "github/merge_pull_request" in follow_up.active_ids
            merge = {"name": "merge_pull_request", "arguments": {"repo": "a/b", "number": 7}}
            assert (await router.call(merge, follow_up)).forwarded
            assert calls == Counter({"merge_pull_request": 1})

    run(main)


def test_a_search_says_why_a_tool_it_selects_comes_no_later(embedder: Embedder) -> None:
    calls: Calls = Counter()
    write = {"github/merge_pull_request": {"requires": {"scopes": ["github:write"]}}}

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None, overrides=write)
        async with Client(github_server(calls)) as github:
            await router.connect({"github": github})
            promotion = await router.tools("open an issue in acme/web", pool="digest")
            assert promotion.active_ids == ("github/create_issue",)

            async def search(query: str) -> list[str]:
                call = {"name": "tool_search", "arguments": {"query": query}}
                outcome = await router.call(call, promotion)
                assert outcome.found == ()
                return text_of(outcome.result).splitlines()

            # Selected exactly, so never "no tool matched": one is callable now, the other
            # needs what the agent's state lacks.
            assert await search("select:create_issue") == [
                "Already available this turn (call it directly): create_issue."
            ]
            assert await search("select:merge_pull_request") == [
                "Not available in the current state: merge_pull_request "
                "(requires scope:github:write)."
            ]

    run(main)


def test_a_refused_real_tool_is_promised_for_the_next_turn(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        billing = PagedClient(PAGES, ["p2", "p3", None])
        await router.connect({"billing": billing})
        promotion = await router.tools("refund the payment for order 1182")
        assert promotion.active_ids == ("billing/refund_payment",)
        asked = await router.call({"name": "create_customer", "arguments": {}}, promotion)
        assert not asked.forwarded
        assert asked.found == ("billing/create_customer",)
        invented = await router.call({"name": "create_invoice", "arguments": {}}, promotion)
        assert invented.found == ()
        follow_up = await router.tools("yes, do it", include=asked.found)
        assert "billing/create_customer" in follow_up.active_ids

    run(main)


def test_checking_a_refused_tool_for_the_next_turn_routes_nothing_in_telemetry(
    embedder: Embedder,
) -> None:
    # Whether the host's scope admits the tool is routed as a select: of it; reported,
    # UsageStats counted a tool the model was never shown as routed.
    async def main() -> None:
        usage, sink = UsageStats(), MemorySink()
        router = McpRouter(
            top_k=1, embedder=embedder, cache=None, telemetry=Telemetry([usage, sink])
        )
        await router.connect({"billing": PagedClient(PAGES, ["p2", "p3", None])})
        promotion = await router.tools("refund the payment for order 1182")
        assert promotion.active_ids == ("billing/refund_payment",)
        asked = await router.call({"name": "create_customer", "arguments": {}}, promotion)
        assert asked.found == ("billing/create_customer",)
        assert [e.kind for e in sink.events] == ["route", "promote", "verify"]
        assert usage.routed == Counter({"billing/refund_payment": 1})
        assert usage.misses == Counter({"billing/create_customer": 1})

    run(main)


def test_a_turn_with_no_text_gets_the_pinned_and_promised_tools(embedder: Embedder) -> None:
    async def main() -> None:
        pins = {"billing/list_invoices": {"pinned": True}}
        router = McpRouter(top_k=1, embedder=embedder, cache=None, overrides=pins)
        await router.connect({"billing": PagedClient(PAGES, ["p2", "p3", None])})
        image_only = await router.tools(" \n", include=["billing/create_customer"], pool="full")
        assert set(image_only.active_ids) == {"billing/list_invoices", "billing/create_customer"}
        # A zero-width space alone shows no text either: route() reads it as empty.
        invisible = await router.tools("\u200b", include=["billing/create_customer"], pool="full")
        assert invisible.active_ids == image_only.active_ids
        assert "refund_payment" in image_only.pool_text
        denied = await router.tools("", deny=["list_*"], pool="full")
        assert denied.active_ids == ()
        assert "list_invoices" not in denied.pool_text

    run(main)


def test_a_turn_with_no_text_gets_a_promised_tool_whose_name_holds_a_comma(
    embedder: Embedder,
) -> None:
    # Such a turn selects what it must send: by a "select:" of ids joined with commas,
    # "s/a,b" came back as s/a and s/b, and the promised tool was not sent.
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        tools = [mcp_tool("a,b", "Both."), mcp_tool("a", "First."), mcp_tool("b", "Second.")]
        await router.connect({"s": PagedClient([tools], [None])})
        image_only = await router.tools("", include=["s/a,b"], pool="full")
        assert image_only.active_ids == ("s/a,b",)

    run(main)


def test_max_tools_leaves_the_search_tool_out_of_the_count(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=3, embedder=embedder, cache=None)
        await router.connect({"billing": PagedClient(PAGES, ["p2", "p3", None])})
        query = "refund the last payment of this customer"
        one = Budget(max_tools=1)
        digest = await router.tools(query, format="anthropic", pool="digest", budget=one)
        full = await router.tools(query, format="anthropic", pool="full", budget=one)
        assert exposed(digest) == ["tool_search", *exposed(full)]
        assert len(full.active_ids) == 1

    run(main)


def test_a_call_is_checked_against_the_tools_as_they_are_now(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=3, embedder=embedder, cache=None)
        billing = PagedClient([list(PAGES[0] + PAGES[1] + PAGES[2])], [None])
        await router.connect({"billing": billing})
        turn = await router.tools("refund a payment or list invoices")
        assert {"billing/refund_payment", "billing/list_invoices"} <= set(turn.active_ids)

        # The server drops one tool and makes another's argument required, mid-turn.
        stricter = mcp_tool("refund_payment", "Refund a card payment in full or in part.")
        stricter["inputSchema"]["required"] = ["id"]
        billing.pages[0] = [stricter, PAGES[2][0]]
        await router.refresh(["billing"])
        gone = await router.call({"name": "list_invoices", "arguments": {}}, turn)
        assert "its server 'billing' removed it" in json.loads(text_of(gone.result))["message"]
        bad = await router.call({"name": "refund_payment", "arguments": {}}, turn)
        assert json.loads(text_of(bad.result))["error"] == "invalid_arguments"
        good = await router.call({"name": "refund_payment", "arguments": {"id": "7"}}, turn)
        assert good.forwarded

        # A promotion older than the routers kept is checked against the current tools.
        for n in range(10):
            billing.pages[0] = [stricter, mcp_tool("create_customer", f"Create a customer {n}.")]
            await router.refresh(["billing"])
        old = await router.call({"name": "refund_payment", "arguments": {"id": "8"}}, turn)
        assert old.forwarded
        stale = await router.call({"name": "list_invoices", "arguments": {}}, turn)
        assert json.loads(text_of(stale.result))["error"] == "unknown_tool"
        assert billing.called == [("refund_payment", {"id": "7"}), ("refund_payment", {"id": "8"})]

    run(main)


def test_each_call_is_reported_once_with_the_verdict_it_ends_with(embedder: Embedder) -> None:
    # A call whose check passed but which was then refused (its tool removed since, or
    # changed and checked again) was reported at its check: counted as a successful call,
    # and again for the re-check. A search its query fails counted as a search made.
    async def main() -> None:
        usage, sink = UsageStats(), MemorySink()
        router = McpRouter(
            top_k=3, embedder=embedder, cache=None, telemetry=Telemetry([usage, sink])
        )
        billing = PagedClient([list(PAGES[0] + PAGES[1] + PAGES[2])], [None])
        await router.connect({"billing": billing})
        turn = await router.tools("refund a payment or list invoices", pool="digest")
        assert {"billing/refund_payment", "billing/list_invoices"} <= set(turn.active_ids)
        stricter = mcp_tool("refund_payment", "Refund a card payment in full or in part.")
        stricter["inputSchema"]["required"] = ["id"]
        billing.pages[0] = [stricter, PAGES[2][0]]
        await router.refresh(["billing"])
        for name, arguments in [
            ("list_invoices", {}),
            ("refund_payment", {}),
            ("refund_payment", {"id": "7"}),
            ("tool_search", {"query": " "}),
        ]:
            await router.call({"name": name, "arguments": arguments}, turn, turn_id="t1")
        reported = [(e.tool_id, e.error) for e in sink.events if isinstance(e, VerifyEvent)]
        assert reported == [
            ("billing/list_invoices", "tool_not_available"),
            ("billing/refund_payment", "invalid_arguments"),
            ("billing/refund_payment", None),
            (TOOL_SEARCH_ID, "invalid_arguments"),
        ]
        assert usage.called == Counter({"billing/refund_payment": 1})
        assert usage.invalid == Counter({"billing/refund_payment": 1})
        assert (usage.search_calls, usage.search_invalid) == (0, 1)
        assert billing.called == [("refund_payment", {"id": "7"})]

    run(main)


class OddClient(PagedClient):
    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return None


def test_a_server_answering_a_call_with_no_result_is_named(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        await router.connect({"odd": OddClient(PAGES, ["p2", "p3", None])})
        promotion = await router.tools("refund a payment")
        call = {"name": "refund_payment", "arguments": {}}
        with pytest.raises(CatalogError, match="MCP server 'odd': tools/call returned NoneType"):
            await router.call(call, promotion)

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
        with pytest.raises(InvalidInputError, match="not the string 'billing'"):
            await router.refresh("billing")
        with pytest.raises(InvalidInputError, match="takes the turn's Promotion"):
            await router.call({"name": "x"}, router.router.route("refund"))  # type: ignore[arg-type]
        for text in ("refund a payment", ""):  # a turn with no text reads include too
            with pytest.raises(InvalidInputError, match="include entries must be tool ids"):
                await router.tools(text, include=[5])  # type: ignore[list-item]

    run(main)


def test_the_hosts_scope_is_checked_and_never_blamed_on_the_model(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        await router.connect({"billing": PagedClient(PAGES, ["p2", "p3", None])})
        for bad in ({"deny": "refund_*"}, {"allow": 5}, {"include": "billing/refund_payment"}):
            with pytest.raises(InvalidInputError, match="must be a list"):
                await router.tools("refund a payment", **bad)
        promotion = await router.tools("refund a payment", pool="digest")
        search = {"name": "tool_search", "arguments": {"query": "create a customer"}}
        with pytest.raises(InvalidInputError, match="allow/deny must be a list"):
            await router.call(search, promotion, deny="create_*")  # type: ignore[arg-type]

        # A tool the deny list shuts out is refused, and not promised for the next turn.
        asked = await router.call(
            {"name": "create_customer", "arguments": {}}, promotion, deny=["create_*"]
        )
        assert asked.found == ()
        assert "Ask for" not in json.loads(text_of(asked.result))["message"]

    run(main)


def test_a_search_reads_the_tools_as_they_are_now(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        billing = PagedClient([list(PAGES[0] + PAGES[1])], [None])
        await router.connect({"billing": billing})
        turn = await router.tools("refund a payment", pool="digest")
        billing.pages[0] = [*billing.pages[0], PAGES[2][0]]  # create_customer, added since
        router.mark_changed("billing")
        search = {"name": "tool_search", "arguments": {"query": "create a customer record"}}
        outcome = await router.call(search, turn)
        assert outcome.found == ("billing/create_customer",)

    run(main)


def test_a_search_names_the_tools_the_turn_offers_as_the_turn_showed_them(
    embedder: Embedder,
) -> None:
    # A server listing a tool of the same name since the turn began qualifies the name of
    # the turn's tool in the current tools: told to call that one, the model was refused.
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        billing = PagedClient([list(PAGES[1])], [None])
        shop = PagedClient([[mcp_tool("list_orders", "List the orders of the shop.")]], [None])
        await router.connect({"billing": billing, "shop": shop})
        turn = await router.tools("refund a payment", pool="digest")
        assert exposed(turn) == ["tool_search", "refund_payment"]
        shop.pages[0].append(mcp_tool("refund_payment", "Refund a shop order."))
        router.mark_changed("shop")
        search = {"name": "tool_search", "arguments": {"query": "select:billing/refund_payment"}}
        answer = text_of((await router.call(search, turn)).result)
        assert "Already available this turn (call it directly): refund_payment." in answer
        call = anthropic_call("refund_payment", {})
        assert (await router.call(call, turn)).forwarded

    run(main)


def test_a_router_of_live_servers_refuses_pickling_saying_what_to_do(embedder: Embedder) -> None:
    router = McpRouter(embedder=embedder, cache=None)
    for copied in (pickle.dumps, copy.deepcopy):
        with pytest.raises(TypeError, match=r"^cannot pickle .* toolgate McpRouter: .*connect"):
            copied(router)


def test_an_outcome_hashes_as_it_compares() -> None:
    verdict = Verdict(True, tool_id="github/search", arguments={"query": "x"})
    outcome = CallOutcome(CallToolResult(content=[]), verdict, server="github")
    twin = copy.deepcopy(outcome)
    assert twin == outcome
    assert hash(twin) == hash(outcome)

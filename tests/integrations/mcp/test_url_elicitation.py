"""An upstream that needs the user to open a page (MCP 2025-11-25's URL-mode elicitation):
its ``URLElicitationRequiredError`` reaches the proxy's client, and so does its notice that
the page was done with."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pytest
from mcp import Client, UrlElicitationRequiredError
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    URL_ELICITATION_REQUIRED,
    ElicitCompleteNotification,
    ElicitRequestURLParams,
    ElicitResult,
)

from tests.fixtures.mcp import run, text_of
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp.proxy import McpProxy
from toolgate.integrations.mcp.relay import UpstreamRequests
from toolgate.integrations.mcp.router import McpRouter

SIGN_IN = ElicitRequestURLParams(
    message="Sign in to your drive.",
    url="https://drive.example/connect?elicitation=drive-1",
    elicitation_id="drive-1",
)

RECENT = "drive://recent"


def drive() -> MCPServer:
    """An upstream whose tool needs the user to sign in on a page first."""
    server = MCPServer("drive")

    @server.tool()
    def list_drive_files(folder: str) -> str:
        """List the files of a folder of the user's drive."""
        raise UrlElicitationRequiredError([SIGN_IN])

    @server.prompt()
    def summarize_drive() -> str:
        """Summarize the user's drive (it too needs the user signed in)."""
        raise UrlElicitationRequiredError([SIGN_IN])

    @server.resource(RECENT, name="recent")
    def recent_files() -> str:
        raise UrlElicitationRequiredError([SIGN_IN])

    @server.tool()
    async def open_payment_page(ctx: Context) -> str:
        """Have the user pay on the payment provider's page."""
        answer = await ctx.elicit_url("Pay.", "https://pay.example/p", "pay-1")
        return f"payment page {answer.action}ed"

    @server.tool()
    async def finish_sign_in(elicitation: str, ctx: Context) -> str:
        """What the server does once the user is done with a page: it says so."""
        await ctx.session.send_elicit_complete(elicitation)
        return "told"

    return server


async def take_url(_ctx: Any, _params: Any) -> ElicitResult:
    """A client that takes elicitations, URL-mode ones included (the SDK's client then
    says it takes both modes)."""
    return ElicitResult(action="accept")


@asynccontextmanager
async def drive_proxy(embedder: Embedder) -> AsyncIterator[McpProxy]:
    """The proxy in front of ``drive``, over a 2025-11-25 connection (the last protocol with
    ``URLElicitationRequiredError``), hearing its notices as ``toolgate mcp-proxy`` does."""
    requests = UpstreamRequests(one_client=True)
    proxies: list[McpProxy] = []

    async def heard(message: Any) -> None:
        await proxies[0].heard("drive", message)

    options = {"message_handler": heard, **requests.callbacks("drive")}
    async with Client(drive(), mode="legacy", **options) as upstream:
        router = McpRouter(embedder=embedder, cache=None)
        await router.connect({"drive": upstream})
        proxies.append(McpProxy(router, requests=requests))
        yield proxies[0]


@asynccontextmanager
async def proxied(embedder: Embedder, **client_options: Any) -> AsyncIterator[Client]:
    """A handshake-era client of the proxy in front of ``drive``."""
    async with (
        drive_proxy(embedder) as proxy,
        Client(proxy.server, mode="legacy", **client_options) as client,
    ):
        yield client


def listing() -> dict[str, Any]:
    return {"name": "list_drive_files", "arguments": {"folder": "reports"}}


def test_a_url_elicitation_required_reaches_a_client_that_takes_them(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        async with proxied(embedder, elicitation_callback=take_url) as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("call_tool", listing())
            # The client shows the page to the user and calls again once it is done with.
            assert raised.value.code == URL_ELICITATION_REQUIRED
            assert raised.value.data == {
                "elicitations": [SIGN_IN.model_dump(by_alias=True, exclude_none=True)]
            }

    run(main)


def test_a_url_elicitation_required_is_named_to_a_model_whose_client_cannot_show_it(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        async with proxied(embedder) as client:
            result = await client.call_tool("call_tool", listing())
            assert result.is_error
            body = json.loads(text_of(result))
            assert body["error"] == "url_elicitation_required"
            assert body["urls"] == [SIGN_IN.url]
            # What the page is for, and what to do, in the server's words and the proxy's.
            assert SIGN_IN.message in body["message"]
            assert SIGN_IN.url in body["message"]
            assert "then call" in body["message"]

    run(main)


def test_a_prompts_url_elicitation_required_is_an_error_a_client_without_them_reads(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        async with proxied(embedder) as client:  # it takes no elicitation
            (prompt,) = (await client.list_prompts()).prompts
            asks = (partial(client.get_prompt, prompt.name), partial(client.read_resource, RECENT))
            for ask in asks:
                with pytest.raises(MCPError) as raised:
                    await ask()
                # Not the code only a client that takes URL-mode elicitations knows, but an
                # error whose words tell the user which page to open.
                assert raised.value.code == INTERNAL_ERROR
                assert SIGN_IN.message in raised.value.message
                assert SIGN_IN.url in raised.value.message
                assert "'drive'" in raised.value.message

    run(main)


class Notices:
    """A client's ``message_handler``, keeping the ids of the pages it is told are done."""

    def __init__(self) -> None:
        self.done: list[str] = []

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ElicitCompleteNotification):
            self.done.append(message.params.elicitation_id)


def test_a_page_done_with_is_told_to_the_client_it_was_sent_to_alone(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        async with drive_proxy(embedder) as proxy, AsyncExitStack() as stack:
            heard = [Notices(), Notices()]
            first, other = [
                await stack.enter_async_context(
                    Client(
                        proxy.server, mode="legacy", message_handler=notices,
                        elicitation_callback=take_url,
                    )
                )
                for notices in heard
            ]  # fmt: skip
            with pytest.raises(MCPError):
                await first.call_tool("call_tool", listing())
            paid = await first.call_tool("call_tool", {"name": "open_payment_page"})
            assert text_of(paid) == "payment page accepted"
            # A page the proxy sent no client is told to none (MCP: a client ignores an id it
            # does not know, and a server tells only the client it asked).
            for page in ("unknown-1", "drive-1", "pay-1", "drive-1"):
                done = await other.call_tool(
                    "call_tool", {"name": "finish_sign_in", "arguments": {"elicitation": page}}
                )
                assert text_of(done) == "told"
            with anyio.fail_after(5):
                while len(heard[0].done) < 2:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.1)  # time for one more, which must not come
            assert heard[0].done == ["drive-1", "pay-1"]  # once each
            assert heard[1].done == []

    run(main)


def test_a_page_sent_to_two_clients_is_told_done_to_both(embedder: Embedder) -> None:
    async def main() -> None:
        # The upstream names its sign-in page once for its session, which is the proxy's
        # whichever client it is shown to: each client sent it waits for its notice.
        async with drive_proxy(embedder) as proxy, AsyncExitStack() as stack:
            heard = [Notices(), Notices(), Notices()]
            clients = [
                await stack.enter_async_context(
                    Client(
                        proxy.server, mode="legacy", message_handler=notices,
                        elicitation_callback=take_url,
                    )
                )
                for notices in heard
            ]  # fmt: skip
            for client in clients[:2]:
                with pytest.raises(MCPError):
                    await client.call_tool("call_tool", listing())
            finish = {"name": "finish_sign_in", "arguments": {"elicitation": "drive-1"}}
            for _ in range(2):  # the second notice finds no client waiting
                assert text_of(await clients[2].call_tool("call_tool", finish)) == "told"
            with anyio.fail_after(5):
                while len(heard[0].done) + len(heard[1].done) < 2:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.1)  # time for one more, which must not come
            assert [notices.done for notices in heard] == [["drive-1"], ["drive-1"], []]

    run(main)


def test_a_page_a_prompt_needs_is_told_done_to_the_client_sent_it(embedder: Embedder) -> None:
    async def main() -> None:
        # A prompt (or a resource) may need the page too: its error is passed on as it is,
        # and the page remembered as a tool call's is, for the upstream's "done" notice.
        async with drive_proxy(embedder) as proxy, AsyncExitStack() as stack:
            heard = Notices()
            client = await stack.enter_async_context(
                Client(
                    proxy.server, mode="legacy", message_handler=heard,
                    elicitation_callback=take_url,
                )
            )  # fmt: skip
            (prompt,) = (await client.list_prompts()).prompts
            with pytest.raises(MCPError) as raised:
                await client.get_prompt(prompt.name)
            assert raised.value.code == URL_ELICITATION_REQUIRED
            finish = {"name": "finish_sign_in", "arguments": {"elicitation": "drive-1"}}
            assert text_of(await client.call_tool("call_tool", finish)) == "told"
            with anyio.fail_after(5):
                while not heard.done:
                    await anyio.sleep(0.01)
            assert heard.done == ["drive-1"]

    run(main)

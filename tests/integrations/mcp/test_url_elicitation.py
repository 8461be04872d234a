"""An upstream that needs the user to open a page (MCP 2025-11-25's URL-mode elicitation):
its ``URLElicitationRequiredError`` reaches the proxy's client, and so does its notice that
the page was done with."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import Client, UrlElicitationRequiredError
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import URL_ELICITATION_REQUIRED, ElicitRequestURLParams, ElicitResult

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


def drive() -> MCPServer:
    """An upstream whose tool needs the user to sign in on a page first."""
    server = MCPServer("drive")

    @server.tool()
    def list_drive_files(folder: str) -> str:
        """List the files of a folder of the user's drive."""
        raise UrlElicitationRequiredError([SIGN_IN])

    return server


async def take_url(_ctx: Any, _params: Any) -> ElicitResult:
    """A client that takes elicitations, URL-mode ones included (the SDK's client then
    says it takes both modes)."""
    return ElicitResult(action="accept")


@asynccontextmanager
async def proxied(embedder: Embedder, **client_options: Any) -> AsyncIterator[Client]:
    """A handshake-era client of the proxy in front of ``drive``, over a 2025-11-25
    connection (the last protocol with ``URLElicitationRequiredError``)."""
    requests = UpstreamRequests(one_client=True)
    async with Client(drive(), mode="legacy", **requests.callbacks("drive")) as upstream:
        router = McpRouter(embedder=embedder, cache=None)
        await router.connect({"drive": upstream})
        proxy = McpProxy(router, requests=requests)
        async with Client(proxy.server, mode="legacy", **client_options) as client:
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

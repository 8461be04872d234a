"""What the MCP integrations add to a turn, against using the router directly.

GitHub's MCP server listing (117 tools, ``../shared/data/catalogs``) is served by an in-memory
client, so the times are toolgate's own, not a transport's. Every entry runs through one
``anyio`` blocking portal (an event loop in a thread), peers included, so the portal's cost
is the same on both sides of each ratio:

* group ``mcp turn``: ``McpRouter.tools(text)`` against ``Router.route`` + ``Router.promote``
  on the same router (``route + promote``): the worker-thread hop and the refresh check;
* group ``mcp call``: ``McpRouter.call(tool_call, promotion)`` (verify, then forward) against
  the client's own ``call_tool`` (``client.call_tool``);
* group ``mcp-proxy call``: a client's call of an upstream tool through the proxy
  (``call_tool``: verify, then forward with progress and requests for input relayed), against
  the client calling the upstream itself; both in memory, the upstream an ``MCPServer``;
* group ``mcp-proxy transport``: one ``search_tools`` call to the proxy's server over
  Streamable HTTP on loopback (``toolgate mcp-proxy --http``), against the same call over the
  SDK's in-memory transport (``proxy in memory``): what serving over HTTP costs a request.

The query is the same every call, so its embedding is memoised and the overhead is not
hidden behind the model. The notes give the tokens a client of ``toolgate mcp-proxy`` sees
(the listing and one search) against the whole listing:

    .venv/bin/python -m pytest benches/bench_mcp.py -q -p no:cacheprovider \\
        -o python_files='bench_*.py'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from pytest_benchmark.fixture import BenchmarkFixture

from toolgate.embedding.embedder import Embedder
from toolgate.formats.tokens import count_tools
from toolgate.integrations.mcp.http import HttpListener, serve_over_http
from toolgate.integrations.mcp.proxy import McpProxy
from toolgate.integrations.mcp.relay import UpstreamRequests
from toolgate.integrations.mcp.router import McpRouter
from toolgate.promotion.promote import Promotion

if TYPE_CHECKING:
    from benches.conftest import RatioTable

LISTING = (
    Path(__file__).resolve().parents[2] / "shared/data/catalogs/github-mcp-server.tools-list.json"
)
QUERY = "open a pull request for my branch"
CALL = {"name": "create_pull_request", "arguments": {"owner": "acme", "repo": "web",
        "title": "Fix the login test", "head": "fix-login", "base": "main"}}  # fmt: skip


class ListedClient:
    """An MCP client whose server lists ``tools`` and answers every call at once."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.tools = tools

    async def list_tools(self) -> dict[str, Any]:
        return {"tools": self.tools}

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return {"content": [{"type": "text", "text": f"{name} done"}]}


@pytest.fixture(scope="module")
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as running:
        yield running


@pytest.fixture(scope="module")
def github(portal: BlockingPortal) -> tuple[McpRouter, ListedClient]:
    listing = json.loads(LISTING.read_text(encoding="utf-8"))
    client = ListedClient(listing.get("tools") or listing["result"]["tools"])
    router = McpRouter(top_k=5, embedder=Embedder(precision="int8"), cache=None)
    portal.call(router.connect, {"github": client})
    return router, client


@dataclass
class Bench:
    """One benchmark's fixtures: the portal, the router and its client, and the timer."""

    benchmark: BenchmarkFixture
    table: RatioTable
    portal: BlockingPortal
    mcp: McpRouter
    client: ListedClient

    def time(self, group: str, name: str, fn: Callable[[], Any]) -> None:
        self.benchmark.group = group
        self.benchmark.pedantic(fn, rounds=300, warmup_rounds=20, iterations=1)
        self.table.record(group, name, self.benchmark.stats.stats.min)


@pytest.fixture
def bench(
    benchmark: BenchmarkFixture,
    ratio_table: RatioTable,
    portal: BlockingPortal,
    github: tuple[McpRouter, ListedClient],
) -> Bench:
    return Bench(benchmark, ratio_table, portal, *github)


def test_route_and_promote(bench: Bench) -> None:
    router = bench.mcp.router

    def turn() -> Promotion:
        return router.promote(router.route(QUERY, top_k=5, forms=False), format="anthropic")

    bench.time("mcp turn", "route + promote", lambda: bench.portal.call(turn))


def test_mcp_router_tools(bench: Bench) -> None:
    def turn() -> Promotion:
        return bench.portal.call(lambda: bench.mcp.tools(QUERY, format="anthropic"))

    bench.time("mcp turn", "McpRouter.tools", turn)
    assert "github/create_pull_request" in turn().active_ids


def test_client_call_tool(bench: Bench) -> None:
    name, arguments = str(CALL["name"]), dict(CALL["arguments"])

    def call() -> Any:
        return bench.portal.call(lambda: bench.client.call_tool(name, arguments))

    bench.time("mcp call", "client.call_tool", call)


def test_mcp_router_call(bench: Bench) -> None:
    promotion = bench.portal.call(lambda: bench.mcp.tools(QUERY, format="anthropic"))

    def call() -> Any:
        return bench.portal.call(lambda: bench.mcp.call(CALL, promotion))

    bench.time("mcp call", "McpRouter.call", call)
    assert call().forwarded


def test_proxy_tokens(ratio_table: RatioTable, github: tuple[McpRouter, ListedClient]) -> None:
    """Tokens (o200k, MCP JSON) a proxy client sees, against the whole listing."""
    mcp = github[0]
    proxy = McpProxy(mcp, top_k=5)
    whole = count_tools(mcp.router.catalog.to_provider("mcp"), "mcp", "o200k_base")
    listed = count_tools(proxy.list_tools(), "mcp", "o200k_base")
    result = anyio.run(proxy.call_tool, "search_tools", {"query": QUERY})
    found = json.loads(result.content[0].text.split("\n", 1)[1])
    searched = count_tools(found, "mcp", "o200k_base")
    ratio_table.notes.append(
        f"mcp-proxy, GitHub MCP ({len(mcp.router.catalog)} tools): whole listing {whole} "
        f"tokens; proxy listing {listed} ({listed / whole:.3f}x); one search of "
        f"{len(found)} tools {searched} ({searched / whole:.3f}x)"
    )
    assert listed < whole / 50


def _entered(stack: ExitStack, portal: BlockingPortal, client: Client) -> Client:
    """``client`` connected through ``portal``, to be closed with ``stack``."""
    entered: Client = stack.enter_context(portal.wrap_async_context_manager(client))
    return entered


@pytest.fixture(scope="module")
def proxy_clients(
    portal: BlockingPortal, github: tuple[McpRouter, ListedClient]
) -> Iterator[dict[str, Client]]:
    """Clients of one proxy: in memory, and over HTTP on a free loopback port."""
    proxy = McpProxy(github[0], top_k=5)
    listener = HttpListener(port=0)
    stops: list[Callable[[], None]] = []
    with listener.bind() as sock, ExitStack() as stack:
        serving = portal.start_task_soon(
            serve_over_http, proxy.server, listener, sock, stops.append
        )
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        http = stack.enter_context(portal.wrap_async_context_manager(httpx2.AsyncClient()))
        over_http = Client(streamable_http_client(url, http_client=http))
        enter = partial(_entered, stack, portal)
        yield {
            "proxy in memory": enter(Client(proxy.server)),
            "proxy over HTTP": enter(over_http),
        }
        stack.close()
        portal.call(stops[0])
        serving.result(timeout=30)


@pytest.mark.parametrize("transport", ["proxy in memory", "proxy over HTTP"])
def test_proxy_search(bench: Bench, proxy_clients: dict[str, Client], transport: str) -> None:
    client = proxy_clients[transport]

    def search() -> Any:
        return bench.portal.call(client.call_tool, "search_tools", {"query": QUERY})

    bench.time("mcp-proxy transport", transport, search)
    # The found tools' names, read from the structured answer: the text's JSON is compact.
    found = [tool["name"] for tool in search().structured_content["tools"]]
    assert "create_pull_request" in found


@pytest.fixture(scope="module")
def upstream_clients(portal: BlockingPortal) -> Iterator[dict[str, Client]]:
    """A client of an ``MCPServer`` with GitHub's ``create_pull_request``, and a client of a
    proxy in front of it (all in memory)."""
    upstream = MCPServer("github")

    @upstream.tool()
    def create_pull_request(owner: str, repo: str, title: str, head: str, base: str) -> str:
        """Open a pull request."""
        return f"opened {title!r} in {owner}/{repo}"

    with ExitStack() as stack:
        enter = partial(_entered, stack, portal)
        direct = enter(Client(upstream))
        requests = UpstreamRequests()
        behind = enter(Client(upstream, **requests.callbacks("github")))
        router = McpRouter(top_k=5, embedder=Embedder(precision="int8"), cache=None)
        portal.call(router.connect, {"github": behind})
        proxied = enter(Client(McpProxy(router, requests=requests).server))
        yield {"upstream directly": direct, "through the proxy": proxied}


@pytest.mark.parametrize("route", ["upstream directly", "through the proxy"])
def test_proxy_call(bench: Bench, upstream_clients: dict[str, Client], route: str) -> None:
    client = upstream_clients[route]
    name, arguments = str(CALL["name"]), dict(CALL["arguments"])
    proxied = {"name": name, "arguments": arguments}

    def call() -> Any:
        if route == "upstream directly":
            return bench.portal.call(client.call_tool, name, arguments)
        return bench.portal.call(client.call_tool, "call_tool", proxied)

    bench.time("mcp-proxy call", route, call)
    assert call().content[0].text == "opened 'Fix the login test' in acme/web"

"""Reading MCP servers' listings (``tools/list``, ``prompts/list``, ...): every page, fresh,
as plain JSON; several servers' tools at once, each within a timeout."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
from mcp.types import PaginatedRequestParams

from toolgate.errors import CatalogError

__all__ = [
    "MAX_LISTED_ITEMS",
    "MAX_LISTING_CHARS",
    "MAX_PAGES",
    "McpClient",
    "list_every_page",
    "list_server_tools",
    "list_servers_tools",
    "plain",
]

#: Pages of one listing read from one server before its listing is taken to never end.
MAX_PAGES = 1000

#: The most items (tools, prompts, resources, templates) one listing of one server may hold:
#: each tool is embedded and each item is passed on to every client, and no server written
#: for people lists this many.
MAX_LISTED_ITEMS = 10_000

#: The most characters of JSON one listing of one server may take, its items together: far
#: past 10,000 tools of the size servers write, far short of what would fill the proxy's
#: memory.
MAX_LISTING_CHARS = 64 << 20


class McpClient(Protocol):
    """What toolgate needs of a connected client (``mcp.Client``, ``mcp.ClientSession``):
    ``tools/list`` and ``tools/call``. Later pages are asked for with ``cursor=``
    (``mcp.Client``) or ``params=`` (``ClientSession``), as the method takes."""

    async def list_tools(self) -> Any:
        """The first page of the server's tools (a ``ListToolsResult`` or its JSON form)."""

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = ...) -> Any:
        """Call the server's tool ``name`` with ``arguments``."""


async def list_server_tools(server: str, client: McpClient) -> list[Any]:
    """Every tool ``server`` lists, page after page, as JSON objects.

    A tool repeated verbatim on a later page (a listing that shifted while it was read) is
    kept once; two different tools under one name are left for the catalog to report.
    """
    return await list_every_page(server, client.list_tools, method="tools/list", key="tools")


async def list_servers_tools(
    clients: Mapping[str, McpClient], timeout: float | None
) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """Each server's tools, listed concurrently, each within ``timeout`` seconds (``None``:
    no limit); and, for each server that could not be listed, why, naming it."""
    listed: dict[str, list[Any]] = {}
    failed: dict[str, str] = {}

    async def list_one(name: str, client: McpClient) -> None:
        try:
            with anyio.fail_after(timeout):
                listed[name] = await list_server_tools(name, client)
        except TimeoutError:
            failed[name] = f"MCP server {name!r}: tools/list took over {timeout} s"
        except CatalogError as exc:
            failed[name] = str(exc)
        except Exception as exc:  # the SDK's and the transport's errors alike
            failed[name] = f"MCP server {name!r}: tools/list failed: {exc!r}"

    async with anyio.create_task_group() as group:
        for name, client in clients.items():
            group.start_soon(list_one, name, client)
    return listed, failed


async def list_every_page(
    server: str, list_page: Callable[..., Awaitable[Any]], *, method: str, key: str
) -> list[Any]:
    """Every item of one of ``server``'s listings, page after page, as JSON objects.

    ``list_page`` is the client's method for ``method`` (``client.list_prompts`` for
    ``prompts/list``); ``key`` names the items in a page (``prompts``). An item repeated
    verbatim on a later page is kept once. A listing of more than :data:`MAX_LISTED_ITEMS`
    items or :data:`MAX_LISTING_CHARS` characters of JSON is a :class:`CatalogError`.
    """
    read_page = _page_reader(list_page)
    items: list[Any] = []
    seen: set[str] = set()
    chars = 0
    cursor: str | None = None
    cursors: set[str] = set()
    for page_number in range(1, MAX_PAGES + 1):
        page = plain(await read_page(cursor), f"MCP server {server!r}: {method}")
        page_items = page.get(key)
        if not isinstance(page_items, list):
            raise CatalogError(
                f"MCP server {server!r}: {method} page {page_number} has no {key!r} list"
            )
        for item in page_items:
            digest = json.dumps(item, sort_keys=True, default=repr)
            if digest not in seen:
                seen.add(digest)
                items.append(item)
                chars += len(digest)
                _check_bounds(server, method, key, len(items), chars)
        cursor = page.get("nextCursor")
        if not cursor:  # absent, null or empty: the last page
            return items
        if cursor in cursors:
            raise CatalogError(
                f"MCP server {server!r}: {method} page {page_number} repeats cursor "
                f"{cursor!r}, so the listing never ends"
            )
        cursors.add(cursor)
    raise CatalogError(f"MCP server {server!r}: {method} goes on past {MAX_PAGES} pages")


def _check_bounds(server: str, method: str, key: str, count: int, chars: int) -> None:
    """Stop a listing that has grown past :data:`MAX_LISTED_ITEMS` items or
    :data:`MAX_LISTING_CHARS` characters, as soon as it does (a page may hold millions)."""
    if count > MAX_LISTED_ITEMS:
        raise CatalogError(
            f"MCP server {server!r}: {method} lists more than {MAX_LISTED_ITEMS:,} {key}, "
            "more than toolgate reads from one server"
        )
    if chars > MAX_LISTING_CHARS:
        raise CatalogError(
            f"MCP server {server!r}: {method} takes more than {MAX_LISTING_CHARS:,} "
            "characters of JSON, more than toolgate reads from one server"
        )


def _page_reader(
    list_page: Callable[..., Awaitable[Any]],
) -> Callable[[str | None], Awaitable[Any]]:
    """``read(cursor)``: one page, past the client's response cache where it keeps one (a
    listing is read because it changed, or to answer a client now, so a cached page could
    be stale)."""
    try:
        parameters = inspect.signature(list_page).parameters
    except (TypeError, ValueError):  # a callable without a signature: ask plainly
        parameters = {}  # type: ignore[assignment]
    fresh = {"cache_mode": "refresh"} if "cache_mode" in parameters else {}

    async def read(cursor: str | None) -> Any:
        if cursor is None:
            return await list_page(**fresh)
        if "cursor" in parameters:
            return await list_page(cursor=cursor, **fresh)
        return await list_page(params=PaginatedRequestParams(cursor=cursor), **fresh)

    return read


def plain(result: Any, what: str) -> dict[str, Any]:
    """An MCP result (a pydantic model or its JSON form) as JSON with wire names
    (``inputSchema``, ``nextCursor``, ``isError``); ``what`` names it in the error."""
    if hasattr(result, "model_dump"):
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(dumped, dict):
            return dumped
    if isinstance(result, Mapping):
        return dict(result)
    raise CatalogError(f"{what} returned {type(result).__name__}, not a result")

"""An MCP server in front of other MCP servers, for clients that send every tool to the model.

A client connected to the proxy (a desktop app, an IDE, an agent framework: anything that
speaks MCP) lists two tools, and the upstream tools pinned with ``overrides``, in place of every
upstream server's tools:

- ``search_tools(query)``: the tools routed for ``query`` (words, ``select:a,b`` or
  ``+term``), each with its description and full input schema;
- ``call_tool(name, arguments)``: checks the call (a known tool, arguments valid against its
  schema) and forwards it to the upstream server that has the tool, under its own name.

So a model that would have been sent a few hundred schemas on every turn is sent two, and
loads the few it needs by searching, the pattern of Claude Code's ToolSearch. The proxy keeps
no state per client, so it serves many clients at once, on either protocol era. Upstream
servers are listed once and again when they say their tools changed; only changed tools are
embedded again (:class:`~toolgate.integrations.mcp.McpRouter` does the work).

``toolgate mcp-proxy --config servers.json`` runs it over stdio, with upstream servers given
in the ``mcpServers`` form MCP clients use::

    {"mcpServers": {
        "github": {"command": "github-mcp-server", "args": ["stdio"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "..."}},
        "docs": {"url": "https://example.com/mcp"}}}
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams

from toolgate.adapters.mcp import export
from toolgate.catalog import Catalog
from toolgate.errors import InvalidInputError
from toolgate.integrations.mcp import McpClient, McpRouter

__all__ = ["McpProxy", "load_servers", "serve_stdio"]

_SEARCH = "search_tools"
_CALL = "call_tool"


class McpProxy:
    """The proxy's MCP server over a connected :class:`McpRouter` (see the module docstring).

    ``top_k`` is the most tools one search returns (default: the router's ``top_k``, else 5).
    """

    def __init__(self, router: McpRouter, *, name: str = "toolgate", top_k: int | None = None):
        """See the class docstring."""
        if top_k is not None and (
            isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1
        ):
            raise InvalidInputError(f"top_k must be an integer >= 1, got {top_k!r}")
        self.router = router
        self.top_k = top_k or router.top_k or 5
        search, call = _meta_names(router.router.catalog)
        self.server: Server[Any] = Server(
            name,
            instructions=(
                f"Most tools are not listed. Call {search} to find the ones a task needs, "
                f"then {call} to call one."
            ),
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
        )

    def list_tools(self) -> list[dict[str, Any]]:
        """What the proxy lists: the two meta tools, then the pinned upstream tools."""
        catalog = self.router.router.catalog
        search, call = _meta_names(catalog)
        pinned = [export(catalog[i]) for i in catalog.pinned_ids]
        return [_search_tool(search), _call_tool(call, search), *pinned]

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> CallToolResult:
        """Answer one ``tools/call``: a search, a call through ``call_tool``, or a pinned
        tool called by its own name."""
        search, call = _meta_names(self.router.router.catalog)
        arguments = dict(arguments or {})
        if name == search:
            return await self._search(arguments)
        if name == call:
            target, target_arguments = arguments.get("name"), arguments.get("arguments", {})
            if not isinstance(target, str) or not isinstance(target_arguments, Mapping):
                return _error(
                    f"{call} takes 'name' (a tool's name, as {search} gave it) and "
                    "'arguments' (an object)"
                )
            name, arguments = target, dict(target_arguments)
        try:
            outcome = await self.router.call_any({"name": name, "arguments": arguments})
        except InvalidInputError:
            raise
        except Exception as exc:  # the upstream server, its answer or its connection failed
            # In-band, as a tool error, so the model can go on without that tool.
            failure = {"error": "upstream_error", "message": f"Calling {name!r} failed: {exc!r}"}
            return _text(json.dumps(failure), is_error=True)
        return outcome.result

    async def _search(self, arguments: Mapping[str, Any]) -> CallToolResult:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return _error(f"{_SEARCH} takes 'query', a non-empty string")
        try:
            found = await self.router.search(query, top_k=self.top_k)
        except InvalidInputError as exc:  # "select:" naming nothing, and the like
            return _error(f"{exc}; describe the task in words, or use 'select:name1,name2'")
        catalog = self.router.router.catalog
        # Pinned tools are listed already: a search shows the others.
        ids = [i for i in found.ids if i in catalog and not catalog[i].pinned]
        unknown = f"\nNo tool is named: {', '.join(found.unknown)}." if found.unknown else ""
        if not ids:
            return _text(f"No tool matched. Try other words, or 'select:name'.{unknown}")
        tools = [export(catalog[i]) for i in ids]
        _, call = _meta_names(catalog)
        header = f"Tools found, best first. Call one with {call}(name, arguments).{unknown}\n"
        return _text(header + json.dumps(tools, ensure_ascii=False))

    async def _on_list_tools(self, _ctx: Any, _params: PaginatedRequestParams | None) -> Any:
        return ListToolsResult.model_validate({"tools": self.list_tools()})

    async def _on_call_tool(self, _ctx: Any, params: CallToolRequestParams) -> Any:
        return await self.call_tool(params.name, params.arguments)


def _meta_names(catalog: Catalog) -> tuple[str, str]:
    """The meta tools' names: ``search_tools`` and ``call_tool``, or ``toolgate_``-prefixed
    when a pinned upstream tool is listed under the same name."""
    taken = {catalog[i].exposed_name.casefold() for i in catalog.pinned_ids}
    search, call = (f"toolgate_{name}" if name in taken else name for name in (_SEARCH, _CALL))
    return search, call


def _search_tool(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": (
            "Find the tools for a task among every connected server's tools. Describe the "
            "task in words, or use 'select:name1,name2' for tools you know by name, or "
            "'+word' to require a word in the tool's name. Returns each tool's name, "
            "description and input schema."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What you need to do"}},
            "required": ["query"],
        },
    }


def _call_tool(name: str, search: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": (
            f"Call a tool found with {search}: its name, and arguments that match its input schema."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name, as found"},
                "arguments": {"type": "object", "description": "The tool's arguments"},
            },
            "required": ["name"],
        },
    }


def _text(text: str, *, is_error: bool = False) -> CallToolResult:
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "isError": is_error}
    )


def _error(message: str) -> CallToolResult:
    return _text(json.dumps({"error": "invalid_arguments", "message": message}), is_error=True)


# -- stdio ---------------------------------------------------------------------------------


def load_servers(path: str | Path) -> dict[str, StdioServerParameters | str]:
    """The upstream servers of an MCP client configuration file (``{"mcpServers": {name:
    {"command", "args", "env", "cwd"} or {"url"}}}``): a stdio command or a URL each.

    Every problem is reported at once, naming the entry.
    """
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"{path}: not a JSON file: {exc}") from None
    servers = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise InvalidInputError(f'{path}: expected {{"mcpServers": {{name: {{...}}, ...}}}}')
    specs: dict[str, StdioServerParameters | str] = {}
    problems: list[str] = []
    for name, entry in servers.items():
        try:
            specs[name] = _server_spec(entry)
        except ValueError as exc:
            problems.append(f"mcpServers.{name}: {exc}")
    if problems:
        raise InvalidInputError(f"{path}: {'; '.join(problems)}")
    return specs


def _server_spec(entry: Any) -> StdioServerParameters | str:
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object, got {type(entry).__name__}")
    if "url" in entry:
        url = entry["url"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"'url' must be an http(s) URL, got {url!r}")
        return url
    command, args, env = entry.get("command"), entry.get("args", []), entry.get("env")
    if not isinstance(command, str) or not command:
        raise ValueError("needs 'command' (a stdio server) or 'url' (a Streamable HTTP one)")
    if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        raise ValueError(f"'args' must be a list of strings, got {args!r}")
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
    ):
        raise ValueError("'env' must map names to string values")
    return StdioServerParameters(command=command, args=args, env=env, cwd=entry.get("cwd"))


async def serve_stdio(
    servers: Mapping[str, StdioServerParameters | str],
    *,
    top_k: int = 5,
    lenient: bool = False,
) -> None:
    """Connect to ``servers``, then serve the proxy over this process's stdin / stdout
    until the client closes it.

    A server that cannot be started or reached is an :class:`InvalidInputError` naming it,
    or with ``lenient`` left out, with a line on stderr.
    """
    router = McpRouter(top_k=top_k, lenient=lenient)
    async with AsyncExitStack() as stack:
        clients: dict[str, McpClient] = {}
        for name, spec in servers.items():
            client = Client(spec, message_handler=router.message_handler(name))
            try:
                clients[name] = await stack.enter_async_context(client)
            except Exception as exc:  # a command that fails to start, a URL that fails
                problem = f"cannot connect to MCP server {name!r}: {_first_error(exc)!r}"
                if not lenient:
                    raise InvalidInputError(problem) from None
                print(f"toolgate mcp-proxy: {problem}; going on without it", file=sys.stderr)
        await router.connect(clients)
        proxy = McpProxy(router)
        async with anyio.create_task_group() as group:
            for name in clients:
                group.start_soon(_watch, router, name)
            async with stdio_server() as (read, write):
                options = proxy.server.create_initialization_options()
                await proxy.server.run(read, write, options)
            group.cancel_scope.cancel()


def _first_error(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's task groups wrap transport errors)."""
    # By duck type: BaseExceptionGroup is a builtin from Python 3.11 only.
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner[0], BaseException):
        exc = inner[0]
    return exc


async def _watch(router: McpRouter, name: str) -> None:
    """Follow ``name``'s change events on the 2026-07-28 protocol; an older connection
    tells of changes through the message handler instead."""
    try:
        await router.watch(name)
    except InvalidInputError:
        pass
    except Exception as exc:  # a dropped stream: changes then come with the next listing
        print(f"toolgate mcp-proxy: stopped watching {name!r}: {exc!r}", file=sys.stderr)

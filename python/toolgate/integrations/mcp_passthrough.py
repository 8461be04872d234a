"""Upstream prompts and resources, passed through the MCP proxy as they are.

The proxy routes tools (:mod:`toolgate.integrations.mcp_proxy`). Prompts and resources are
picked by the user or the host, not by the model, and cost the model no tokens until used,
so they are passed through whole:

- ``prompts/list`` gives every upstream's prompts. A name several upstreams share is listed
  as ``<server>__<name>`` for each of them (the rule for tool names, :mod:`toolgate.names`),
  and ``prompts/get`` maps it back.
- ``resources/list`` and ``resources/templates/list`` give every upstream's resources and
  templates with their URIs unchanged (tool results link to them). ``resources/read`` asks the
  upstream that lists the URI; for a URI none lists, the upstreams whose templates match it,
  then the other upstreams that have resources, until one answers.

Each request is answered from fresh listings, read from every upstream at once within the
router's ``list_timeout``, so nothing goes stale and no state is kept per client; only a read
first asks the server that listed its URI last, without listing anything. An upstream
that does not offer the capability is skipped; one whose listing fails is left out with a
warning, so a broken server never hides the others'.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import Any, TypeVar

import anyio
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    GetPromptResult,
    ReadResourceResult,
)

from toolgate.integrations.mcp import McpClient, McpRouter
from toolgate.integrations.mcp_listing import list_every_page, plain

__all__ = ["RESOURCE_NOT_FOUND", "Passthrough", "Reconnect", "template_pattern"]

logger = logging.getLogger(__name__)

#: The MCP error code for a resource no server has.
RESOURCE_NOT_FOUND = -32002

#: ``reconnect(server)``: start a server whose connection closed again; whether it is back.
Reconnect = Callable[[str], Awaitable[bool]]

T = TypeVar("T")


class Passthrough:
    """The upstream servers' prompts and resources, as one server's (see the module
    docstring). ``reconnect`` is :class:`~toolgate.integrations.mcp_proxy.McpProxy`'s: a
    request that finds its server's connection closed is made once more when it returns true.
    """

    def __init__(self, router: McpRouter, reconnect: Reconnect | None = None) -> None:
        """See the class docstring."""
        self.router = router
        self.reconnect = reconnect
        # URI -> the server that listed it, from the last resources/list.
        self._owners: dict[str, str] = {}

    # -- prompts -----------------------------------------------------------------------

    async def list_prompts(self) -> list[dict[str, Any]]:
        """Every upstream's prompts, in server order, shared names qualified."""
        return [
            {**prompt, "name": exposed}
            for exposed, (_server, prompt) in (await self._prompts()).items()
        ]

    async def get_prompt(self, name: str, arguments: Mapping[str, str] | None) -> GetPromptResult:
        """The prompt listed as ``name``, from its server; an unknown name is an
        ``INVALID_PARAMS`` error naming the prompts there are."""
        prompts = await self._prompts()
        if name not in prompts:
            known = ", ".join(sorted(prompts)) or "none"
            raise MCPError(INVALID_PARAMS, f"Unknown prompt {name!r}; prompts: {known}")
        server, prompt = prompts[name]
        get = partial(_get_prompt, name=prompt["name"], arguments=dict(arguments or {}) or None)
        result = await self.upstream(server, "prompts/get", get)
        return GetPromptResult.model_validate(plain(result, f"MCP server {server!r}: prompts/get"))

    async def _prompts(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Listed name -> (server, the upstream's prompt)."""
        listed = await self._gather("prompts", "prompts/list", "list_prompts", "prompts")
        counts = Counter(p["name"] for prompts in listed.values() for p in prompts)
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for server, prompts in listed.items():
            for prompt in prompts:
                name = prompt["name"]
                exposed = name if counts[name] == 1 else f"{server}__{name}"
                if exposed in out:  # a qualified name that another server uses as is
                    logger.warning(
                        "MCP server %r: prompt %r left out: %r is taken", server, name, exposed
                    )
                    continue
                out[exposed] = (server, prompt)
        return out

    # -- resources ---------------------------------------------------------------------

    async def list_resources(self) -> list[dict[str, Any]]:
        """Every upstream's resources, in server order; a URI two servers list, once."""
        return [resource for _server, resource in (await self._resources()).values()]

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        """Every upstream's resource templates, in server order."""
        listed = await self._templates()
        return [template for templates in listed.values() for template in templates]

    async def read_resource(self, uri: str) -> ReadResourceResult:
        """``uri``'s contents from the first server that can read it (see the module
        docstring); ``RESOURCE_NOT_FOUND`` naming each server's answer when none can."""
        failures: list[str] = []
        async for server in self._readers(uri):
            try:
                result = await self.upstream(server, "resources/read", partial(_read, uri=uri))
            except MCPError as exc:
                failures.append(f"{server}: {exc}")
                continue
            return ReadResourceResult.model_validate(
                plain(result, f"MCP server {server!r}: resources/read")
            )
        why = f" ({'; '.join(failures)})" if failures else ""
        raise MCPError(RESOURCE_NOT_FOUND, f"No server has resource {uri!r}{why}")

    async def _resources(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """URI -> (server, resource), the first server listing a URI keeping it."""
        listed = await self._gather("resources", "resources/list", "list_resources", "resources")
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for server, resources in listed.items():
            for resource in resources:
                out.setdefault(resource["uri"], (server, resource))
        self._owners = {uri: server for uri, (server, _resource) in out.items()}
        return out

    async def _templates(self) -> dict[str, list[dict[str, Any]]]:
        return await self._gather(
            "resources",
            "resources/templates/list",
            "list_resource_templates",
            "resourceTemplates",
            identity="uriTemplate",
        )

    async def _readers(self, uri: str) -> AsyncIterator[str]:
        """The servers to ask for ``uri``, in turn: the one that listed it last time, without
        listing anything (a client reads what it has just listed); then, from fresh
        listings, the one that lists it, or else those whose templates match it, then the
        other servers with resources."""
        owner = self._owners.get(uri)
        if owner is not None and owner in self.router.servers:
            yield owner
        resources = await self._resources()
        if uri in resources:
            if resources[uri][0] != owner:
                yield resources[uri][0]
            return
        templates = await self._templates()
        matching = [
            server
            for server, server_templates in templates.items()
            if any(template_pattern(t["uriTemplate"]).fullmatch(uri) for t in server_templates)
        ]
        others = [
            s
            for s in self.router.servers
            if s not in matching and _offers(self.router.client(s), "resources")
        ]
        for server in matching + others:
            if server != owner:
                yield server

    # -- upstream requests -------------------------------------------------------------

    async def upstream(
        self, server: str, method: str, ask: Callable[[McpClient], Awaitable[T]]
    ) -> T:
        """``ask(server's client)``, once more after a reconnection if the server had died.

        The upstream's own errors pass through as they are; any other failure (its answer,
        its connection) is an ``INTERNAL_ERROR`` naming the server and ``method``.
        """
        try:
            try:
                return await ask(self.router.client(server))
            except MCPError as exc:
                if not await reconnected(self.reconnect, server, exc):
                    raise
            return await ask(self.router.client(server))
        except MCPError:
            raise
        except Exception as exc:
            raise MCPError(
                INTERNAL_ERROR, f"MCP server {server!r}: {method} failed: {exc!r}"
            ) from exc

    async def _gather(
        self, capability: str, method: str, attr: str, key: str, *, identity: str = ""
    ) -> dict[str, list[dict[str, Any]]]:
        """Each server's ``method`` listing (items that are objects with a string ``name``,
        or ``identity`` when given, others left out with a warning), read at once from
        every server that offers ``capability``; in server order."""
        listed: dict[str, list[dict[str, Any]]] = {}
        field = identity or ("uri" if key == "resources" else "name")
        timeout = self.router.list_timeout

        async def list_one(server: str, client: McpClient) -> None:
            try:
                with anyio.fail_after(timeout):
                    items = await list_every_page(
                        server, _method(client, attr), method=method, key=key
                    )
            except MCPError as exc:
                if exc.code != METHOD_NOT_FOUND:  # not found: the server has none
                    logger.warning("MCP server %r: %s failed, left out: %s", server, method, exc)
                return
            except TimeoutError:
                logger.warning(
                    "MCP server %r: %s took over %s s, left out", server, method, timeout
                )
                return
            except Exception as exc:  # the SDK's, the transport's and toolgate's alike
                logger.warning("MCP server %r: %s failed, left out: %r", server, method, exc)
                return
            listed[server] = _well_formed(server, method, items, field)

        clients = {s: self.router.client(s) for s in self.router.servers}
        async with anyio.create_task_group() as group:
            for server, client in clients.items():
                if _offers(client, capability):
                    group.start_soon(list_one, server, client)
        return {server: listed[server] for server in clients if server in listed}


async def reconnected(reconnect: Reconnect | None, server: str, exc: MCPError) -> bool:
    """Whether ``exc`` says ``server``'s connection closed (it died) and ``reconnect``
    brought it back, so the request that failed can be made once more."""
    return exc.code == CONNECTION_CLOSED and reconnect is not None and await reconnect(server)


def template_pattern(template: str) -> re.Pattern[str]:
    """A URI template (RFC 6570) as a pattern of the URIs it can expand to.

    Every expression (``{path}``, ``{+path}``, ``{?q,page}``) matches any text: the pattern
    only chooses which server to ask first, and a server that cannot read the URI says so.

    >>> bool(template_pattern("repo://{owner}/{repo}/readme").fullmatch("repo://a/b/readme"))
    True
    """
    parts = re.split(r"\{[^{}]*\}", template)
    return re.compile(".*".join(re.escape(part) for part in parts), re.DOTALL)


def _well_formed(server: str, method: str, items: list[Any], field: str) -> list[dict[str, Any]]:
    kept = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get(field), str) and item[field]:
            kept.append(item)
        else:
            logger.warning(
                "MCP server %r: %s item without a string %r left out: %.200r",
                server, method, field, item,
            )  # fmt: skip
    return kept


async def _get_prompt(client: McpClient, *, name: str, arguments: dict[str, str] | None) -> Any:
    return await _method(client, "get_prompt")(name, arguments)


async def _read(client: McpClient, *, uri: str) -> Any:
    """``resources/read`` of ``uri``, past the client's response cache where it keeps one
    (the proxy's client keeps its own)."""
    read = _method(client, "read_resource")
    try:
        fresh = "cache_mode" in inspect.signature(read).parameters
    except (TypeError, ValueError):  # a callable without a signature: ask plainly
        fresh = False
    return await (read(uri, cache_mode="bypass") if fresh else read(uri))


def _offers(client: McpClient, capability: str) -> bool:
    """Whether ``client``'s server offers ``capability`` (``prompts``, ``resources``); a
    client that does not say is asked (a server without it answers "method not found")."""
    capabilities = getattr(client, "server_capabilities", None)
    if capabilities is None:
        return hasattr(client, f"list_{capability}")
    return getattr(capabilities, capability, None) is not None


def _method(client: McpClient, name: str) -> Callable[..., Awaitable[Any]]:
    """``client``'s method ``name``; a client without it is treated as a server without
    the capability."""
    method = getattr(client, name, None)
    if method is None:
        raise MCPError(METHOD_NOT_FOUND, f"the client has no {name}")
    return method  # type: ignore[no-any-return]

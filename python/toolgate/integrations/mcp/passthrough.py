"""Upstream prompts and resources (and their completions), passed through the MCP proxy.

The proxy routes tools (:mod:`toolgate.integrations.mcp.proxy`). Prompts and resources are
picked by the user or the host, not by the model, and cost the model no tokens until used,
so they are passed through whole:

- ``prompts/list`` gives every upstream's prompts, in server order. A name several upstreams
  share is listed as ``<server>__<name>`` for each of them (the rule for tool names,
  :mod:`toolgate.catalog.names`); ``prompts/get`` maps it back, and takes the ``<server>__<name>``
  form of any prompt, so a name qualified once still works after the other server is gone.
  A required argument left out is refused before the upstream is asked.
- ``resources/list`` and ``resources/templates/list`` give every upstream's resources and
  templates with their URIs unchanged (tool results link to them). ``resources/read`` asks the
  upstream that lists the URI, and passes its answer or error on; for a URI none lists, the
  upstreams whose templates match it, then the other upstreams that have resources, each
  within the router's ``list_timeout``, until one answers.
- ``completion/complete`` asks the server that lists the prompt (by its listed name) or the
  resource template (by its ``uriTemplate``) for an argument's values.

Listings are read fresh for each request, from every upstream at once within the router's
``list_timeout``, so nothing goes stale and no state is kept per client; only a read first
asks the server that listed its URI last, without listing anything. An upstream whose
listing fails keeps its last listing (a warning says why) and is not asked again before the
router's ``retry_after``, so one broken server neither hides the others' nor renames them,
nor slows every request down. One whose connection closed (it died) is started again and
asked once more, as a tool call would. An upstream without the capability is skipped.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import nullcontext
from functools import partial
from typing import Any, NamedTuple, TypeVar

import anyio
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CompleteResult,
    Completion,
    GetPromptResult,
    PromptReference,
    ReadResourceResult,
    ResourceTemplateReference,
)

from toolgate.arguments import shown
from toolgate.integrations.mcp.answers import MAX_RESULT_BYTES, ResultT, json_size, passed_on
from toolgate.integrations.mcp.in_flight import using
from toolgate.integrations.mcp.listing import list_every_page, plain
from toolgate.integrations.mcp.relay import RequestRelay, pages_for
from toolgate.integrations.mcp.router import McpClient, McpRouter
from toolgate.integrations.mcp.sessions import watching
from toolgate.told_once import ToldOnce
from toolgate.unicode import printable

__all__ = [
    "MAX_TEMPLATE_EXPRESSIONS",
    "MAX_TEMPLATE_URI_CHARS",
    "RESOURCE_NOT_FOUND",
    "WARNED_MESSAGES",
    "Passthrough",
    "Reconnect",
    "connection_closed",
    "reconnected",
    "template_matches",
]

logger = logging.getLogger(__name__)

#: The MCP error code for a resource no server has.
RESOURCE_NOT_FOUND = -32002
#: Warnings told once each that are remembered: past them, new ones are not told (a server
#: whose faults change with each listing made one more for each, kept for good).
WARNED_MESSAGES = 256

#: The longest URI matched against templates, far past any real URI; a longer one matches
#: none (a template only chooses which server to ask first, so it is still read).
MAX_TEMPLATE_URI_CHARS = 1 << 16

#: The most expressions a template may have and match a URI: real ones have a handful.
MAX_TEMPLATE_EXPRESSIONS = 32

# An expression of a URI template (RFC 6570): ``{path}``, ``{+path}``, ``{?q,page}``.
_EXPRESSION = re.compile(r"\{[^{}]*\}")

#: ``reconnect(server, failed)``: start ``server`` again if the connection of ``failed`` (its
#: client a request failed on) is closed; whether a new connection is in place (``False``
#: also when ``failed`` still works: then the request failed for another reason).
Reconnect = Callable[[str, McpClient], Awaitable[bool]]

T = TypeVar("T")


class _Listing(NamedTuple):
    """One kind of listing: the capability that offers it, its method, the client's method
    for it, the key of its items in a page, and the field that names an item."""

    capability: str
    method: str
    attr: str
    key: str
    identity: str


_PROMPTS = _Listing("prompts", "prompts/list", "list_prompts", "prompts", "name")
_RESOURCES = _Listing("resources", "resources/list", "list_resources", "resources", "uri")
_TEMPLATES = _Listing(
    "resources",
    "resources/templates/list",
    "list_resource_templates",
    "resourceTemplates",
    "uriTemplate",
)


class Passthrough:
    """The upstream servers' prompts and resources, as one server's (see the module
    docstring). ``reconnect`` is :class:`~toolgate.integrations.mcp.proxy.McpProxy`'s: a
    request that finds its server's connection closed is made once more when it returns true.
    An answer larger than ``result_limit(server)`` bytes of JSON (default:
    :data:`~toolgate.integrations.mcp.answers.MAX_RESULT_BYTES`) is an ``INTERNAL_ERROR``.
    """

    def __init__(
        self,
        router: McpRouter,
        reconnect: Reconnect | None = None,
        *,
        result_limit: Callable[[str], int] | None = None,
    ) -> None:
        """See the class docstring."""
        self.router = router
        self.reconnect = reconnect
        self.result_limit = result_limit or (lambda _server: MAX_RESULT_BYTES)
        # URI -> the server that listed it, from the last resources/list.
        self._owners: dict[str, str] = {}
        # (method, server) -> its last listing, and when a failed one may be asked again.
        self._last: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._retry_at: dict[tuple[str, str], float] = {}
        self._failing: dict[tuple[str, str], str] = {}  # why each failed listing failed
        self._warned = ToldOnce(WARNED_MESSAGES)

    # -- prompts -----------------------------------------------------------------------

    async def list_prompts(self) -> list[dict[str, Any]]:
        """Every upstream's prompts, in server order, shared names qualified."""
        return [
            {**prompt, "name": exposed}
            for exposed, (_server, prompt) in (await self._prompts()).items()
        ]

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None,
        relay: RequestRelay | None = None,
    ) -> GetPromptResult:
        """The prompt listed as ``name`` (or named ``<server>__<name>``), from its server. An
        unknown name, or a required argument left out, is an ``INVALID_PARAMS`` error that
        names what there is. ``relay`` is the client's request, whose client the server's
        requests for input go to (:mod:`~toolgate.integrations.mcp.relay`)."""
        server, prompt = await self._prompt(name)
        given = dict(arguments or {})
        missing = [
            arg["name"]
            for arg in prompt.get("arguments") or []
            if isinstance(arg, dict) and arg.get("required") and arg.get("name") not in given
        ]
        if missing:
            raise MCPError(
                INVALID_PARAMS, f"Prompt {name!r} needs the argument(s) {', '.join(missing)}"
            )
        get = partial(_get_prompt, name=prompt["name"], arguments=given or None)
        result = await self.upstream(server, "prompts/get", get, relay=relay)
        answer = plain(result, f"MCP server {server!r}: prompts/get")
        got = passed_on(GetPromptResult.model_validate(answer))
        return self._bounded(server, f"prompts/get of {name!r}", got)

    async def _prompt(self, name: str) -> tuple[str, dict[str, Any]]:
        """(server, the upstream's prompt) listed as ``name`` or named ``<server>__<name>``;
        an ``INVALID_PARAMS`` error naming the prompts there are when there is none."""
        prompts = await self._prompts()
        found = prompts.get(name) or self._qualified(name, prompts)
        if found is not None:
            return found
        known = ", ".join(sorted(prompts)) or "none"
        down = [
            f"{server} ({why})"
            for (method, server), why in self._failing.items()
            if method == _PROMPTS.method and server in self.router.servers
        ]
        more = f"; not answering: {', '.join(down)}" if down else ""
        raise MCPError(INVALID_PARAMS, f"Unknown prompt {name!r}; prompts: {known}{more}")

    async def _prompts(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Listed name -> (server, the upstream's prompt)."""
        listed = await self._gather(_PROMPTS)
        counts = Counter(p["name"] for prompts in listed.values() for p in prompts)
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for server, prompts in listed.items():
            for prompt in prompts:
                name = prompt["name"]
                exposed = name if counts[name] == 1 else f"{server}__{name}"
                if exposed in out or (exposed != name and counts[exposed]):
                    # A qualified name that a server uses as is: the name as is keeps it.
                    self._warn(
                        f"MCP server {server!r}: prompt {shown(name)} left out: "
                        f"{shown(exposed)} is taken"
                    )
                    continue
                out[exposed] = (server, prompt)
        return out

    def _qualified(
        self, name: str, prompts: Mapping[str, tuple[str, dict[str, Any]]]
    ) -> tuple[str, dict[str, Any]] | None:
        """The prompt ``name`` stands for in the ``<server>__<name>`` form, if any."""
        server, sep, own = name.partition("__")
        if not sep:
            return None
        for listed_server, prompt in prompts.values():
            if listed_server == server and prompt["name"] == own:
                return listed_server, prompt
        return None

    # -- resources ---------------------------------------------------------------------

    async def list_resources(self) -> list[dict[str, Any]]:
        """Every upstream's resources, in server order; a URI two servers list, once."""
        return [resource for _server, resource in (await self._resources()).values()]

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        """Every upstream's resource templates, in server order."""
        listed = await self._gather(_TEMPLATES)
        return [template for templates in listed.values() for template in templates]

    async def read_resource(
        self, uri: str, relay: RequestRelay | None = None
    ) -> ReadResourceResult:
        """``uri``'s contents from the first server that can read it (see the module
        docstring). The error of the server that lists ``uri`` is passed on as it is; when
        no server lists it and none can read it, ``RESOURCE_NOT_FOUND`` names each one's
        answer. ``relay``: as for :meth:`get_prompt`."""
        failures: list[str] = []
        async for server, owner in self._readers(uri):
            read = partial(_read, uri=uri)
            # One asked on the off chance must not hold the answer up.
            timeout = None if owner else self.router.list_timeout
            try:
                result = await self.upstream(
                    server, "resources/read", read, timeout=timeout, relay=relay
                )
            except TimeoutError:
                failures.append(f"{server}: no answer within {self.router.list_timeout} s")
                continue
            except MCPError as exc:
                if owner:
                    raise
                failures.append(f"{server}: {exc}")
                continue
            answer = plain(result, f"MCP server {server!r}: resources/read")
            read_result = passed_on(ReadResourceResult.model_validate(answer))
            return self._bounded(server, f"resources/read of {shown(uri)}", read_result)
        why = f" ({'; '.join(failures)})" if failures else ""
        raise MCPError(RESOURCE_NOT_FOUND, f"No server has resource {uri!r}{why}")

    async def _resources(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """URI -> (server, resource), the first server listing a URI keeping it."""
        listed = await self._gather(_RESOURCES)
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for server, resources in listed.items():
            for resource in resources:
                out.setdefault(resource["uri"], (server, resource))
        self._owners = {uri: server for uri, (server, _resource) in out.items()}
        return out

    async def _readers(self, uri: str) -> AsyncIterator[tuple[str, bool]]:
        """The servers to ask for ``uri`` in turn, each with whether it lists ``uri``: the
        one that listed it last time, without listing anything (a client reads what it has
        just listed); then, from fresh listings, the one that lists it, or else those whose
        templates match it, then the other servers with resources."""
        owner = self._owners.get(uri)
        if owner is not None and owner in self.router.servers:
            yield owner, True
        resources = await self._resources()
        if uri in resources:
            if resources[uri][0] != owner:
                yield resources[uri][0], True
            return
        templates = await self._gather(_TEMPLATES)
        matching = [
            server
            for server, server_templates in templates.items()
            if any(template_matches(t["uriTemplate"], uri) for t in server_templates)
        ]
        others = [
            s
            for s in self.router.servers
            if s not in matching and _offers(self.router.client(s), "resources")
        ]
        for server in matching + others:
            if server != owner:
                yield server, False

    # -- completions -------------------------------------------------------------------

    async def complete(
        self,
        ref: PromptReference | ResourceTemplateReference,
        argument: Mapping[str, str],
        context: Mapping[str, str] | None = None,
        relay: RequestRelay | None = None,
    ) -> CompleteResult:
        """Values for ``argument`` (``{"name", "value"}``) of a prompt, by the name it is
        listed under, or of a resource template, by its ``uriTemplate``, from the server
        that lists it (of several, the first that offers completions); ``context`` holds the
        arguments already chosen. An unknown prompt or template is an ``INVALID_PARAMS``
        error; a server that offers no completions suggests none. ``relay``: as for
        :meth:`get_prompt`."""
        if isinstance(ref, PromptReference):
            server, prompt = await self._prompt(ref.name)
            servers = [server]
            upstream_ref: PromptReference | ResourceTemplateReference = PromptReference(
                name=prompt["name"]
            )
        else:
            templates = await self._gather(_TEMPLATES)
            servers = [
                s for s, ts in templates.items() if any(t["uriTemplate"] == ref.uri for t in ts)
            ]
            if not servers:
                raise MCPError(INVALID_PARAMS, f"No server has the resource template {ref.uri!r}")
            upstream_ref = ref
        completing = [s for s in servers if _offers(self.router.client(s), "completions")]
        if not completing:
            return CompleteResult(completion=Completion(values=[]))
        ask = partial(
            _complete, ref=upstream_ref, argument=dict(argument), context=dict(context or {})
        )
        result = await self.upstream(completing[0], "completion/complete", ask, relay=relay)
        answer = plain(result, f"MCP server {completing[0]!r}: completion/complete")
        completed = passed_on(CompleteResult.model_validate(answer))
        return self._bounded(completing[0], "completion/complete", completed)

    # -- upstream requests -------------------------------------------------------------

    def _bounded(self, server: str, what: str, result: ResultT) -> ResultT:
        """``result``, ``server``'s answer to ``what``, unless it is larger than the
        server's limit: then an ``INTERNAL_ERROR`` saying so, in place of megabytes the
        client did not ask for."""
        limit = self.result_limit(server)
        size = json_size(result)
        if size > limit:
            raise MCPError(
                INTERNAL_ERROR,
                f"MCP server {server!r}: the answer to {what} is {size:,} bytes, more than "
                f"the {limit:,} bytes the proxy passes on",
            )
        return result

    async def upstream(
        self,
        server: str,
        method: str,
        ask: Callable[[McpClient], Awaitable[T]],
        *,
        timeout: float | None = None,
        relay: RequestRelay | None = None,
    ) -> T:
        """``ask(server's client)``, once more after a reconnection if the server had died.

        Each ask, not the reconnection between them, is given ``timeout`` seconds
        (``TimeoutError``). The upstream's own errors pass through as they are (a page to
        open, as :func:`~toolgate.integrations.mcp.relay.pages_for` says); any other
        failure (its answer, its connection) is an ``INTERNAL_ERROR`` naming the server and
        ``method``. While it waits, the server's requests for input go to ``relay``'s client.
        """
        waiting = partial(relay.waiting_on, server) if relay else nullcontext
        try:
            client = self.router.client(server)
            try:
                with anyio.fail_after(timeout), waiting(), watching() as sent, using(client):
                    return await ask(client)
            except MCPError as exc:
                lost = sent.forgotten()  # a read: made again whichever request was refused
                if not await reconnected(self.reconnect, server, client, exc, lost):
                    raise
            client = self.router.client(server)
            with anyio.fail_after(timeout), waiting(), using(client):
                return await ask(client)
        except MCPError as exc:
            # A page to open: as it is to a client that takes them (remembered, so its
            # "done" notice follows), else an error that names it.
            raise pages_for(exc, server, method, relay) from None
        except TimeoutError:
            raise
        except Exception as exc:
            raise MCPError(
                INTERNAL_ERROR, f"MCP server {server!r}: {method} failed: {exc!r}"
            ) from exc

    async def _gather(self, kind: _Listing) -> dict[str, list[dict[str, Any]]]:
        """Each server's listing of ``kind`` (items that are objects with a string
        identity; others left out with a warning), read at once from every server that
        offers it, in server order. A server whose listing fails keeps its last one and is
        not asked again before the router's ``retry_after``."""
        capability, method, attr, key, identity = kind
        listed: dict[str, list[dict[str, Any]]] = {}
        timeout = self.router.list_timeout
        now = time.monotonic()

        async def list_one(server: str) -> None:
            slot = (method, server)
            read = partial(_listing, server=server, attr=attr, method=method, key=key)
            try:
                items = await self.upstream(server, method, read, timeout=timeout)
            except MCPError as exc:
                if exc.code == METHOD_NOT_FOUND:  # the server has none after all
                    return
                said = str(exc).removeprefix(f"MCP server {server!r}: {method} failed: ")
                why = printable(said, 1000)  # the server's text, for the log: escaped, cut
            except TimeoutError:
                why = f"took over {timeout} s"
            else:
                listed[server] = self._last[slot] = self._well_formed(
                    server, method, items, identity
                )
                self._retry_at.pop(slot, None)
                self._failing.pop(slot, None)
                return
            self._retry_at[slot] = time.monotonic() + self.router.retry_after
            self._failing[slot] = why
            self._warn(
                f"MCP server {server!r}: {method} failed: {why} (its last listing is served; "
                f"asked again after {self.router.retry_after} s)",
                once=False,
            )

        async with anyio.create_task_group() as group:
            for server in self.router.servers:
                if not _offers(self.router.client(server), capability):
                    continue
                if self._retry_at.get((method, server), 0.0) > now:
                    continue  # failed lately: its last listing is served
                group.start_soon(list_one, server)
        out: dict[str, list[dict[str, Any]]] = {}
        for server in self.router.servers:
            if server in listed:
                out[server] = listed[server]
            elif (method, server) in self._last:
                out[server] = self._last[(method, server)]
        return out

    def _well_formed(
        self, server: str, method: str, items: list[Any], identity: str
    ) -> list[dict[str, Any]]:
        kept = []
        for item in items:
            if isinstance(item, dict) and isinstance(item.get(identity), str) and item[identity]:
                kept.append(item)
            else:
                self._warn(
                    f"MCP server {server!r}: {method} item without a string {identity!r} "
                    f"left out: {item!r:.200}"
                )
        return kept

    def _warn(self, message: str, *, once: bool = True) -> None:
        """Log ``message`` as a warning; with ``once``, the first time only (a listing is
        read for every request), while fewer than :data:`WARNED_MESSAGES` are remembered:
        the last says so, lest a fault left out of the log pass for none."""
        if once:
            self._warned.log(logger, logging.WARNING, message, "%s", message)
        else:
            logger.warning("%s", message)


async def reconnected(
    reconnect: Reconnect | None, server: str, failed: McpClient, exc: MCPError, forgotten: bool
) -> bool:
    """Whether ``exc``, raised by a request to ``server`` through its client ``failed``,
    came of the connection closing (the server died) or of the server refusing the
    request as one of a session it forgot (``forgotten``, as
    :mod:`~toolgate.integrations.mcp.sessions` tells), and ``reconnect`` brought the server
    back, so the request can be made once more. The code alone does not tell: a server's
    own error may have the code the SDK gives a closed connection, and a request it did
    answer must not be made twice."""
    broken = connection_closed(exc) or forgotten
    return broken and reconnect is not None and await reconnect(server, failed)


def connection_closed(exc: MCPError) -> bool:
    """Whether ``exc`` is the SDK's own word that a request's connection, or its answer's
    stream, ended: its code with its message. A server's own error may have the code too,
    for anything at all (-32000 is the first code JSON-RPC leaves to servers: "session limit
    reached"); such a call was answered, and checking the connection after it, then starting
    a new one when that check failed for its own reasons (a busy gateway), ran it twice."""
    return exc.code == CONNECTION_CLOSED and exc.error.message.startswith(_CLOSED_WORDS)


# How the SDK (2.3) words the errors it makes for a request whose connection closed, or
# whose answer stream over HTTP ended or failed before the answer.
_CLOSED_WORDS = ("Connection closed", "SSE stream ")


def template_matches(template: str, uri: str) -> bool:
    """Whether ``uri`` is one of the URIs the URI template (RFC 6570) ``template`` can
    expand to.

    Every expression (``{path}``, ``{+path}``, ``{?q,page}``) matches any text: the match
    only chooses which server to ask first, and a server that cannot read the URI says so.
    A template is literal pieces with any text between them, so the pieces are looked for in
    order, each at its first place: time linear in the URI, where a regular expression of
    ``.*`` between the pieces backtracks for as long as a hostile URI makes it. A URI over
    :data:`MAX_TEMPLATE_URI_CHARS` or a template with more than
    :data:`MAX_TEMPLATE_EXPRESSIONS` expressions matches nothing.

    >>> template_matches("repo://{owner}/{repo}/readme", "repo://a/b/readme")
    True
    """
    first, *middle = _EXPRESSION.split(template)
    if not middle:
        return uri == template
    if len(middle) > MAX_TEMPLATE_EXPRESSIONS or len(uri) > MAX_TEMPLATE_URI_CHARS:
        return False
    *middle, last = middle
    end = len(uri) - len(last)
    if end < len(first) or not uri.startswith(first) or not uri.endswith(last):
        return False
    at = len(first)
    for piece in middle:
        # The first place a piece fits leaves the most room for the pieces after it.
        found = uri.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


async def _listing(client: McpClient, *, server: str, attr: str, method: str, key: str) -> Any:
    return await list_every_page(server, _method(client, attr), method=method, key=key)


async def _get_prompt(client: McpClient, *, name: str, arguments: dict[str, str] | None) -> Any:
    return await _method(client, "get_prompt")(name, arguments)


async def _complete(
    client: McpClient, *, ref: PromptReference | ResourceTemplateReference,
    argument: dict[str, str], context: dict[str, str],
) -> Any:  # fmt: skip
    return await _method(client, "complete")(ref, argument, context or None)


async def _read(client: McpClient, *, uri: str) -> Any:
    """``resources/read`` of ``uri``, past the client's response cache where it keeps one
    (the proxy's client keeps its own)."""
    read = _method(client, "read_resource")
    try:
        fresh = "cache_mode" in inspect.signature(read).parameters
    except (TypeError, ValueError):  # a callable without a signature: ask plainly
        fresh = False
    return await (read(uri, cache_mode="bypass") if fresh else read(uri))


# The client method that asks for each capability, for clients not saying what is offered.
_ASKED_BY = {"prompts": "list_prompts", "resources": "list_resources", "completions": "complete"}


def _offers(client: McpClient, capability: str) -> bool:
    """Whether ``client``'s server offers ``capability`` (``prompts``, ``resources``,
    ``completions``); a client that does not say is asked if it can ask (a server without
    the capability answers "method not found")."""
    capabilities = getattr(client, "server_capabilities", None)
    if capabilities is None:
        return hasattr(client, _ASKED_BY[capability])
    return getattr(capabilities, capability, None) is not None


def _method(client: McpClient, name: str) -> Callable[..., Awaitable[Any]]:
    """``client``'s method ``name``; a client without it is treated as a server without
    the capability."""
    method = getattr(client, name, None)
    if method is None:
        raise MCPError(METHOD_NOT_FOUND, f"the client has no {name}")
    return method  # type: ignore[no-any-return]

"""One client request's side traffic through the proxy: the upstream's progress, and its
requests for input.

An upstream tool may report progress while it runs, and may need input from the client
before it can finish: a sampling (an LLM completion), an elicitation (the user's answer), the
client's roots. Through the proxy, these reach the client whose request it is:

- Progress is passed on as the proxy's progress on that call (when the client asked for it),
  still rising when the proxy answers the upstream's questions itself (below); a value that
  does not rise is dropped.
- On the 2026-07-28 protocol an upstream asks by answering the call with an
  ``InputRequiredResult``. A client on that protocol gets it as the proxy's answer, and its
  retry (``inputResponses``, ``requestState``) is forwarded as it is: the state is the
  upstream's, sealed and bound to the call by it, and the proxy keeps nothing. A client on an
  earlier protocol is asked by the proxy itself, request by request, and the upstream is
  called again with the answers, for up to :data:`MAX_INPUT_ROUNDS` rounds. A client that
  did not say it takes a kind of request is not sent one: the call ends in a tool error.
- An upstream on an earlier protocol sends a request of its own on its connection, which
  the proxy shares among its clients. Over HTTP the SDK tells which request it belongs to
  (when it comes on that request's response stream), and it goes to that request's client.
  Over stdio nothing tells. Such a request goes to the proxy's client when it has one (it
  serves stdio) and a request of that client's waits on that server; when the proxy has
  several clients (it serves HTTP), it is refused, since it could be any client's, even one
  whose request ended (an upstream may ask later, or after the client gave up): a request
  is never passed to a client it may not be for. A client on the 2026-07-28 protocol cannot
  be asked in the middle of a request, so the upstream is refused then too. Roots are not
  relayed from such an upstream: it may ask for them at any time.

A client that does not answer within :data:`ASK_TIMEOUT` seconds (gone, or never to answer)
is taken to have refused. A question still open when the request it is for ends (answered,
failed, or cancelled by its client) is withdrawn: the client is told (``notifications/
cancelled``) and the upstream is refused. Over stdio, where a question does not say whose it
is, that is when no request of the client waits on that server any more.

A page a client was sent to open (a URL-mode elicitation, or a ``URLElicitationRequiredError``
passed on) is remembered with that client, so that the upstream's notice that the user is
done with it (``notifications/elicitation/complete``) reaches that client, and no other (each
client sent it, when a server names one page for its session: the proxy's, for every client).
"""

from __future__ import annotations

import inspect
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any, cast

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    URL_ELICITATION_REQUIRED,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    CreateMessageRequest,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    InputRequest,
    InputRequiredResult,
    InputResponse,
    InputResponses,
    ListRootsRequest,
    ListRootsResult,
    RequestParamsMeta,
    RootsCapability,
    SamplingCapability,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from toolgate.integrations.mcp.listing import McpClient, list_server_tools

__all__ = [
    "ASK_TIMEOUT",
    "MAX_INPUT_ROUNDS",
    "MAX_PAGES_REMEMBERED",
    "InputRequired",
    "RequestRelay",
    "UpstreamRequests",
    "pages_for",
    "pages_named",
    "pages_to_open",
]

#: Rounds of input one call may ask a client on an earlier protocol for (the SDK's default).
MAX_INPUT_ROUNDS = 10

#: Seconds a client has to answer a request for input (a person filling in a form).
ASK_TIMEOUT = 600.0

# The most pages to open an error names (a server asks for one or two), and the most
# characters of each page's message kept.
_MAX_PAGES = 5
_MAX_PAGE_CHARS = 1000

#: Pages sent to clients whose "done" notice is waited for, at most: the oldest is
#: forgotten first (a server may never send it: MCP makes it optional).
MAX_PAGES_REMEMBERED = 1024

# The relay of the client request under way in this task: requests an upstream sends while
# it waits find their client by it where the SDK runs them in the caller's context (HTTP,
# input rounds).
_CURRENT: ContextVar[RequestRelay | None] = ContextVar("toolgate_request_relay", default=None)

# Whether a session type's call_tool can hand input requests back (allow_input_required).
_RETURNS_INPUT_REQUESTS: dict[type[Any], bool] = {}

# What a client must have said it supports to be asked each kind of input.
_CAPABILITIES = {
    "sampling/createMessage": ClientCapabilities(sampling=SamplingCapability()),
    "elicitation/create": ClientCapabilities(elicitation=ElicitationCapability()),
    "roots/list": ClientCapabilities(roots=RootsCapability()),
}


class InputRequired(Exception):
    """An upstream's ``InputRequiredResult``, to be the proxy's answer to a client on the
    2026-07-28 protocol, which answers the requests in it and calls again."""

    def __init__(self, result: InputRequiredResult) -> None:
        super().__init__("the tool needs input from the client")
        self.result = result


class RequestRelay:
    """One request of one proxy client (a tool call, a prompt, a read): where the upstream's
    progress goes, and how the client is asked for input (see the module docstring).

    ``ctx`` is the SDK's context of the client's request; ``params``, a call's parameters (a
    retry's ``inputResponses`` and ``requestState`` are forwarded); ``requests`` tells the
    upstreams' own requests for input which client requests are waiting on their server.
    """

    def __init__(
        self,
        ctx: Any,
        requests: UpstreamRequests,
        params: CallToolRequestParams | None = None,
    ) -> None:
        """See the class docstring."""
        self.session = ctx.session
        self.request_id = ctx.request_id
        self.modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        self.input_responses = params.input_responses if params else None
        self.request_state = params.request_state if params else None
        self.meta = _passed_meta(params.meta if params else None)
        self.requests = requests
        # The SDK's connection of the client, which lasts as long as the client does (the
        # session of ``ctx`` is made for this request): for notices after the request.
        self.connection = getattr(self.session, "_connection", None)
        # Progress passed on so far (none yet: ``_reported``), and where the current input
        # round's starts (each round's progress starts again from the upstream's 0).
        self._progress = self._round_start = 0.0
        self._reported = False

    @contextmanager
    def waiting_on(self, server: str) -> Iterator[None]:
        """While this request waits on ``server``, whose requests for input are this
        client's."""
        token = _CURRENT.set(self)
        try:
            with self.requests.under_way(server, self):
                yield
        finally:
            _CURRENT.reset(token)

    async def call_tool(
        self, server: str, client: McpClient, name: str, arguments: dict[str, Any]
    ) -> Any:
        """``server``'s answer to the call of its tool ``name``, its requests for input
        answered by this request's client; :class:`InputRequired` when that client answers
        them itself (2026-07-28)."""
        session = _input_session(client)
        if session is None:  # a client without input rounds: a plain call
            return await client.call_tool(name, arguments)
        with self.waiting_on(server):
            call = partial(self._call, server, client, session, name, arguments)
            result = await call(self.input_responses, self.request_state)
            for _ in range(MAX_INPUT_ROUNDS):
                if not isinstance(result, InputRequiredResult):
                    return result
                asked = (result.input_requests or {}).items()
                for _key, request in asked:
                    self._check_capability(request)
                if self.modern:
                    raise InputRequired(result)
                answers = {key: await self._ask(request, server) for key, request in asked}
                self._round_start = self._progress
                result = await call(answers, result.request_state)
        if isinstance(result, InputRequiredResult):
            raise MCPError(
                INTERNAL_ERROR, f"{name!r} asked for input more than {MAX_INPUT_ROUNDS} times"
            )
        return result

    async def ask(self, request: InputRequest) -> InputResponse:
        """This request's client's answer to ``request``: an ``MCPError`` when the client
        cannot be asked (a 2026-07-28 one mid-request, one without the capability, one that
        does not answer within :data:`ASK_TIMEOUT`)."""
        if self.modern:
            raise MCPError(
                INVALID_REQUEST,
                f"the proxy's client cannot be sent {request.method} in the middle of a "
                "request (it is on the 2026-07-28 protocol)",
            )
        self._check_capability(request)
        related = ServerMessageMetadata(related_request_id=self.request_id)
        answer: InputResponse = await self.session.send_request(
            request,
            _answer_type(request),
            request_read_timeout_seconds=ASK_TIMEOUT,
            metadata=related,
        )
        return answer

    async def _ask(self, request: InputRequest, server: str) -> InputResponse:
        """:meth:`ask`, for ``server``, remembering a page the client was sent to open."""
        answer = await self.ask(request)
        self.requests.asked(server, request, self)
        return answer

    def pass_pages(self, server: str, pages: Sequence[ElicitRequestURLParams]) -> bool:
        """Whether ``server``'s ``pages`` to open (its ``URLElicitationRequiredError``'s)
        go to this request's client in that error as it is: it takes URL-mode elicitations.
        They are then remembered, so that their "done" notice reaches it."""
        if not self.takes_url_elicitations():
            return False
        ids = [page.elicitation_id for page in pages if page.elicitation_id]
        self.requests.pages_sent(server, ids, self)
        return True

    def takes_url_elicitations(self) -> bool:
        """Whether this request's client can be answered with an upstream's
        ``URLElicitationRequiredError`` as it is: it said it takes URL-mode elicitations,
        and is on a protocol with that error (2026-07-28 retired it)."""
        return not self.modern and _takes_elicitation(self.session, "url")

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """The upstream's progress, as the proxy's on this request (if its client asked);
        a value at or below the last one passed on is dropped, as MCP wants progress to
        increase and a client may take a fall for a fault."""
        value = self._round_start + progress
        if self._reported and not value > self._progress:
            return
        self._progress, self._reported = value, True
        total = None if total is None else self._round_start + total
        await self.session.report_progress(value, total, message)

    def _check_capability(self, request: InputRequest) -> None:
        if not self.session.check_client_capability(_CAPABILITIES[request.method]):
            raise MCPError(INVALID_REQUEST, f"the proxy's client does not take {request.method}")
        mode = getattr(request.params, "mode", None) or "form"
        if isinstance(request, ElicitRequest) and not _takes_elicitation(self.session, mode):
            raise MCPError(
                INVALID_REQUEST, f"the proxy's client does not take {mode}-mode elicitation"
            )

    async def _call(
        self,
        server: str,
        client: McpClient,
        session: Any,
        name: str,
        arguments: dict[str, Any],
        responses: InputResponses | None,
        state: str | None,
    ) -> CallToolResult | InputRequiredResult:
        call = partial(
            session.call_tool,
            name,
            arguments,
            allow_input_required=True,
            progress_callback=self.progress,
            input_responses=responses,
            request_state=state,
            meta=self.meta,
        )
        try:
            result = await call()
        except MCPError as exc:
            if exc.code != HEADER_MISMATCH:
                raise
            # The tool changed since the proxy listed it, so the SDK sent headers from its
            # old schema: the spec's remedy is to list it again and send the call once more.
            await list_server_tools(server, client)
            result = await call()
        return result  # type: ignore[no-any-return]


class UpstreamRequests:
    """The callbacks through which upstreams on an earlier protocol ask for input, which
    pass each request to the client it is for (see the module docstring). ``one_client``:
    the proxy has one client (it serves stdio), so a stdio upstream's request can only be
    that client's."""

    def __init__(self, *, one_client: bool = False) -> None:
        """See the class docstring."""
        self.one_client = one_client
        self._under_way: defaultdict[str, list[RequestRelay]] = defaultdict(list)
        # (server, elicitation id) -> the connections of the clients sent that page.
        self._pages: OrderedDict[tuple[str, str], list[weakref.ref[Any]]] = OrderedDict()
        # Questions put to clients, by what they are for: (server, request) when the
        # upstream said which request, else the server.
        self._asking: defaultdict[object, set[anyio.CancelScope]] = defaultdict(set)

    def pages_sent(self, server: str, pages: Iterable[str], relay: RequestRelay) -> None:
        """Remember that ``relay``'s client was sent ``server``'s ``pages`` (elicitation
        ids) to open, for :meth:`page_done`."""
        connection = relay.connection
        if connection is None:  # a client the proxy cannot notify later
            return
        for page in pages:
            # A server may name one page for its session, which is the proxy's whichever
            # client is shown it: each client sent it is told. Gone clients, and this one
            # (sent it again), are dropped first, so each live client is listed once.
            sent = [
                ref
                for ref in self._pages.pop((server, page), [])
                if (other := ref()) is not None and other is not connection
            ]
            self._pages[(server, page)] = [*sent, weakref.ref(connection)]
        while len(self._pages) > MAX_PAGES_REMEMBERED:
            self._pages.popitem(last=False)

    def asked(self, server: str, request: InputRequest, relay: RequestRelay) -> None:
        """Note that ``relay``'s client was asked ``server``'s ``request``: a page to open
        is remembered (:meth:`pages_sent`)."""
        page = getattr(request.params, "elicitation_id", None)
        if isinstance(request, ElicitRequest) and isinstance(page, str):
            self.pages_sent(server, [page], relay)

    async def page_done(self, server: str, page: str) -> None:
        """Pass ``server``'s notice that the user is done with its page ``page`` on to the
        clients that were sent the page, once; a page sent to no client (or forgotten) is
        told to none: MCP has the notice go to those clients alone."""
        for sent_to in self._pages.pop((server, page), []):
            connection = sent_to()
            if connection is None:
                continue
            try:
                await connection.notify(
                    "notifications/elicitation/complete", {"elicitationId": page}
                )
            except Exception:  # that client is gone: nobody there is waiting for the page
                continue

    def callbacks(self, server: str, *, over_http: bool = False) -> dict[str, Any]:
        """``mcp.Client``'s keyword arguments for ``server``'s connection. They also say,
        in its handshake, that the proxy takes sampling and elicitation requests, which
        servers on the 2026-07-28 protocol look for before they ask. ``over_http``: the
        connection is Streamable HTTP, where a request that does not say which request of
        the proxy's it belongs to belongs to none."""
        relay = partial(self._relay, server, over_http)
        return {
            "sampling_callback": partial(_ask_sampling, relay),
            "elicitation_callback": partial(_ask_elicitation, relay),
        }

    @contextmanager
    def under_way(self, server: str, relay: RequestRelay) -> Iterator[None]:
        """While ``relay``'s request waits on ``server``."""
        self._under_way[server].append(relay)
        try:
            yield
        finally:
            self._under_way[server].remove(relay)
            self._withdraw((server, relay))
            if not self._under_way[server]:
                del self._under_way[server]
                self._withdraw(server)

    def _withdraw(self, key: object) -> None:
        """Withdraw the questions put to clients for ``key``, whose requests ended."""
        for scope in self._asking.pop(key, ()):
            scope.cancel()

    async def _relay(
        self, server: str, over_http: bool, request: InputRequest
    ) -> InputResponse | ErrorData:
        under_way = self._under_way.get(server, [])
        relay = _CURRENT.get()
        key: object = (server, relay)
        if relay not in under_way:  # the request does not say whose it is
            refusal = self._unattributed(server, over_http, under_way)
            if refusal:
                return ErrorData(code=INVALID_REQUEST, message=f"{request.method}: {refusal}")
            relay, key = under_way[0], server
        assert relay is not None
        answer: InputResponse | None = None
        with anyio.CancelScope() as scope:
            self._asking[key].add(scope)
            try:
                answer = await relay.ask(request)
            except MCPError as exc:
                return ErrorData(code=exc.code, message=exc.message)
            finally:
                if key in self._asking:
                    self._asking[key].discard(scope)
                    if not self._asking[key]:
                        del self._asking[key]
        if answer is None:  # withdrawn
            ended = "the request of the proxy's client it was for has ended"
            return ErrorData(code=INVALID_REQUEST, message=f"{request.method}: {ended}")
        self.asked(server, request, relay)
        return answer

    def _unattributed(
        self, server: str, over_http: bool, under_way: list[RequestRelay]
    ) -> str | None:
        """Why a request from ``server`` that does not say whose it is goes to no client,
        or ``None`` when it can only be the proxy's one client's."""
        if not self.one_client:
            if over_http:  # came on no request's response stream
                return "it belongs to no request of the proxy's clients"
            return "it does not say which of the proxy's clients it is for"
        if not under_way:
            return f"no request of the proxy's client is waiting on {server!r}"
        return None


async def _ask_sampling(relay: Callable[..., Awaitable[Any]], _ctx: Any, params: Any) -> Any:
    return await relay(CreateMessageRequest(params=params))


async def _ask_elicitation(relay: Callable[..., Awaitable[Any]], _ctx: Any, params: Any) -> Any:
    return await relay(ElicitRequest(params=params))


def pages_to_open(exc: MCPError) -> list[ElicitRequestURLParams]:
    """The URL-mode elicitations of ``exc`` when it is a server's well-formed
    ``URLElicitationRequiredError``: pages the user must open before its request can run."""
    if exc.code != URL_ELICITATION_REQUIRED:
        return []
    try:
        return UrlElicitationRequiredError.from_error(exc.error).elicitations
    except (ValidationError, AttributeError, TypeError):  # no list of elicitations
        return []


def pages_named(pages: Sequence[ElicitRequestURLParams]) -> tuple[str, list[str]]:
    """What a user is to open, for a client that cannot show ``pages``: each page's message
    and URL, as words, and the URLs."""
    shown = pages[:_MAX_PAGES]
    # Each URL last, after a space: no punctuation of the proxy's reads as part of it.
    each = " ".join(f"{_cut(page.message)} Page: {page.url}" for page in shown)
    return each, [page.url for page in shown]


def pages_for(exc: MCPError, server: str, what: str, relay: RequestRelay | None) -> MCPError:
    """``exc``, ``server``'s error answering ``what`` (``prompts/get``...), as ``relay``'s
    client is to get it. A ``URLElicitationRequiredError`` is passed on as it is to a client
    that takes URL-mode elicitations (its pages remembered, for their "done" notice); any
    other client, to which MCP forbids sending it, and which would not know its code, gets
    an ``INTERNAL_ERROR`` naming the pages, for the user to open."""
    pages = pages_to_open(exc)
    if not pages or (relay is not None and relay.pass_pages(server, pages)):
        return exc
    each, urls = pages_named(pages)
    message = (
        f"MCP server {server!r}: {what} needs the user to open a page first (the client cannot "
        f"show it): open it and finish there, then ask again. {each}"
    )
    return MCPError(INTERNAL_ERROR, message, {"urls": urls})


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_PAGE_CHARS else f"{text[:_MAX_PAGE_CHARS]}..."


def _takes_elicitation(session: Any, mode: str) -> bool:
    """Whether the client of ``session`` said it takes elicitations in ``mode`` (``form``
    or ``url``); one that says neither takes forms (the spec's reading of an empty
    ``elicitation`` capability)."""
    capabilities = getattr(session, "client_capabilities", None)
    elicitation = getattr(capabilities, "elicitation", None)
    if elicitation is None:
        return False
    form, url = getattr(elicitation, "form", None), getattr(elicitation, "url", None)
    if mode == "url":
        return url is not None
    return form is not None or url is None


def _input_session(client: McpClient) -> Any:
    """The ``ClientSession`` behind ``client`` that can return input requests unanswered,
    or ``None`` (a client of another kind). Only an ``mcp.Client``'s session stands in for
    it: another client's ``call_tool`` may do more than its session's (audit, auth)."""
    session: Any = client.session if isinstance(client, Client) else client
    kind = type(session)
    if kind not in _RETURNS_INPUT_REQUESTS:  # a signature takes longer to read than a relay
        try:
            takes = "allow_input_required" in inspect.signature(kind.call_tool).parameters
        except (AttributeError, TypeError, ValueError):  # no call_tool, or no signature
            takes = False
        _RETURNS_INPUT_REQUESTS[kind] = takes
    return session if _RETURNS_INPUT_REQUESTS[kind] else None


def _passed_meta(meta: Mapping[str, Any] | None) -> RequestParamsMeta | None:
    """The client's ``_meta`` of a call to pass on upstream: its own keys (a trace context,
    a host's ``com.example/...``), which the upstream's tool may read. Not MCP's: keys under
    a prefix with a ``modelcontextprotocol`` or ``mcp`` label are the protocol's, set by the
    proxy's own connection (its progress token, its protocol envelope), not the client's."""
    if not meta:
        return None
    kept = {key: value for key, value in meta.items() if not _reserved_key(key)}
    return cast("RequestParamsMeta", kept) if kept else None


def _reserved_key(key: str) -> bool:
    """Whether ``key`` is MCP's: ``progressToken``, or under a prefix with a
    ``modelcontextprotocol`` or ``mcp`` label (``io.modelcontextprotocol/``, the
    ``modelcontextprotocol.io/`` of MCP's ``_meta`` naming)."""
    prefix, _slash, _name = key.rpartition("/")
    return key == "progressToken" or bool({"modelcontextprotocol", "mcp"} & set(prefix.split(".")))


def _answer_type(request: InputRequest) -> type[InputResponse]:
    if isinstance(request, CreateMessageRequest):
        return CreateMessageResultWithTools if request.params.tools else CreateMessageResult
    if isinstance(request, ElicitRequest):
        return ElicitResult
    assert isinstance(request, ListRootsRequest)
    return ListRootsResult

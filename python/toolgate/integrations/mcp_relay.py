"""One proxied call's side traffic: the upstream's progress, and its requests for input.

An upstream tool may report progress while it runs, and may need input from the client
before it can finish: a sampling (an LLM completion), an elicitation (the user's answer), the
client's roots. Through the proxy, these reach the client whose call it is:

- Progress is passed on as the proxy's progress on that call (when the client asked for it).
- On the 2026-07-28 protocol an upstream asks by answering the call with an
  ``InputRequiredResult``. A client on that protocol gets it as the proxy's answer, and its
  retry (``inputResponses``, ``requestState``) is forwarded as it is: the state is the
  upstream's, sealed and bound to the call by it, and the proxy keeps nothing. A client on an
  earlier protocol is asked by the proxy itself, request by request, and the upstream is
  called again with the answers, for up to :data:`MAX_INPUT_ROUNDS` rounds.
- An upstream on an earlier protocol sends a request of its own on its connection, which
  the proxy shares among every client's calls. Nothing in such a request says which call it
  is for: it is passed to the client whose call to that server is under way when there is
  one (over HTTP the SDK also tells whose it is); with several, the upstream is told the
  proxy cannot tell. A client on the 2026-07-28 protocol cannot be asked in the middle of a
  call, so the upstream is told that too. Roots are not relayed from such an upstream: it
  may ask for them at any time, not only within a call.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    CreateMessageRequest,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitationCapability,
    ElicitRequest,
    ElicitResult,
    ErrorData,
    InputRequest,
    InputRequiredResult,
    InputResponse,
    InputResponses,
    ListRootsRequest,
    ListRootsResult,
    RootsCapability,
    SamplingCapability,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolgate.integrations.mcp_listing import McpClient

__all__ = ["MAX_INPUT_ROUNDS", "CallRelay", "InputRequired", "UpstreamRequests"]

#: Rounds of input one call may ask a client on an earlier protocol for (the SDK's default).
MAX_INPUT_ROUNDS = 10

# The relay of the call under way in this task: requests an upstream sends while it waits
# find their call by it where the SDK runs them in the caller's context (HTTP, input rounds).
_CURRENT: ContextVar[CallRelay | None] = ContextVar("toolgate_call_relay", default=None)

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


class CallRelay:
    """One call of one proxy client: where the upstream's progress goes, and how the
    client is asked for input (see the module docstring).

    ``ctx`` is the SDK's context of the client's request and ``params`` its parameters
    (a retry's ``inputResponses`` and ``requestState`` are forwarded); ``requests`` tells
    earlier-protocol upstreams' requests which call is waiting on their server.
    """

    def __init__(self, ctx: Any, params: CallToolRequestParams, requests: UpstreamRequests) -> None:
        """See the class docstring."""
        self.session = ctx.session
        self.request_id = ctx.request_id
        self.modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        self.input_responses = params.input_responses
        self.request_state = params.request_state
        self.requests = requests

    async def call_tool(
        self, server: str, client: McpClient, name: str, arguments: dict[str, Any]
    ) -> Any:
        """``server``'s answer to the call of its tool ``name``, its requests for input
        answered by this call's client; :class:`InputRequired` when that client answers
        them itself (2026-07-28)."""
        session = _input_session(client)
        if session is None:  # a client without input rounds: a plain call
            return await client.call_tool(name, arguments)
        token = _CURRENT.set(self)
        try:
            with self.requests.waiting(server, self):
                call = partial(self._call, client, session, name, arguments)
                result = await call(self.input_responses, self.request_state)
                for _ in range(MAX_INPUT_ROUNDS):
                    if not isinstance(result, InputRequiredResult):
                        return result
                    if self.modern:
                        raise InputRequired(result)
                    asked = (result.input_requests or {}).items()
                    answers = {key: await self.ask(request) for key, request in asked}
                    result = await call(answers, result.request_state)
        finally:
            _CURRENT.reset(token)
        if isinstance(result, InputRequiredResult):
            raise MCPError(
                INTERNAL_ERROR, f"{name!r} asked for input more than {MAX_INPUT_ROUNDS} times"
            )
        return result

    async def ask(self, request: InputRequest) -> InputResponse:
        """This call's client's answer to ``request``: an ``MCPError`` when the client
        cannot be asked (a 2026-07-28 one mid-call, or one without the capability)."""
        if self.modern:
            raise MCPError(
                INVALID_REQUEST,
                f"the proxy's client cannot be sent {request.method} in the middle of a call "
                "(it is on the 2026-07-28 protocol)",
            )
        if not self.session.check_client_capability(_CAPABILITIES[request.method]):
            raise MCPError(INVALID_REQUEST, f"the proxy's client does not take {request.method}")
        related = ServerMessageMetadata(related_request_id=self.request_id)
        answer: InputResponse = await self.session.send_request(
            request, _answer_type(request), metadata=related
        )
        return answer

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """The upstream's progress, as the proxy's on this call (if its client asked)."""
        await self.session.report_progress(progress, total, message)

    async def _call(
        self,
        client: McpClient,
        session: Any,
        name: str,
        arguments: dict[str, Any],
        responses: InputResponses | None,
        state: str | None,
    ) -> CallToolResult | InputRequiredResult:
        options = {
            "progress_callback": self.progress,
            "input_responses": responses,
            "request_state": state,
        }
        try:
            result = await session.call_tool(name, arguments, allow_input_required=True, **options)
        except MCPError as exc:
            if exc.code != HEADER_MISMATCH or session is client:
                raise
            # The tool changed since the proxy listed it: mcp.Client lists it again and
            # sends the call once more (its input rounds then come to the callbacks).
            result = await client.call_tool(name, arguments, **options)
        return result  # type: ignore[no-any-return]


class UpstreamRequests:
    """The callbacks through which upstreams on an earlier protocol ask for input, which
    pass each request to the client whose call it is (see the module docstring)."""

    def __init__(self) -> None:
        """See the class docstring."""
        self._waiting: defaultdict[str, list[CallRelay]] = defaultdict(list)

    def callbacks(self, server: str) -> dict[str, Any]:
        """``mcp.Client``'s keyword arguments for ``server``'s connection. They also say,
        in its handshake, that the proxy takes sampling and elicitation requests, which
        servers on the 2026-07-28 protocol look for before they ask."""
        return {
            "sampling_callback": partial(self._sampling, server),
            "elicitation_callback": partial(self._elicitation, server),
        }

    @contextmanager
    def waiting(self, server: str, relay: CallRelay) -> Iterator[None]:
        """While ``relay``'s call waits on ``server``."""
        self._waiting[server].append(relay)
        try:
            yield
        finally:
            self._waiting[server].remove(relay)
            if not self._waiting[server]:
                del self._waiting[server]

    async def _sampling(self, server: str, _ctx: Any, params: Any) -> Any:
        return await self._relay(server, CreateMessageRequest(params=params))

    async def _elicitation(self, server: str, _ctx: Any, params: Any) -> Any:
        return await self._relay(server, ElicitRequest(params=params))

    async def _relay(self, server: str, request: InputRequest) -> InputResponse | ErrorData:
        waiting = self._waiting.get(server, [])
        relay = _CURRENT.get()
        if relay not in waiting:  # the request does not say: the only call waiting, if one
            if len(waiting) != 1:
                calls = f"{len(waiting)} calls" if waiting else "no call"
                return ErrorData(
                    code=INVALID_REQUEST,
                    message=f"{request.method} reached the proxy with {calls} under way "
                    f"to {server!r}, so it cannot tell which client to ask",
                )
            relay = waiting[0]
        try:
            return await relay.ask(request)
        except MCPError as exc:
            return ErrorData(code=exc.code, message=exc.message)


def _input_session(client: McpClient) -> Any:
    """The ``ClientSession`` behind ``client`` that can return input requests unanswered,
    or ``None`` (a client of another kind)."""
    session: Any = getattr(client, "session", client)
    kind = type(session)
    if kind not in _RETURNS_INPUT_REQUESTS:  # a signature takes longer to read than a relay
        try:
            takes = "allow_input_required" in inspect.signature(kind.call_tool).parameters
        except (AttributeError, TypeError, ValueError):  # no call_tool, or no signature
            takes = False
        _RETURNS_INPUT_REQUESTS[kind] = takes
    return session if _RETURNS_INPUT_REQUESTS[kind] else None


def _answer_type(request: InputRequest) -> type[InputResponse]:
    if isinstance(request, CreateMessageRequest):
        return CreateMessageResultWithTools if request.params.tools else CreateMessageResult
    if isinstance(request, ElicitRequest):
        return ElicitResult
    assert isinstance(request, ListRootsRequest)
    return ListRootsResult

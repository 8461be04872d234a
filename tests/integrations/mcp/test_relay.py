"""The MCP proxy passes an upstream call's progress and requests for input to its client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated, Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve, Sample
from mcp.shared.exceptions import MCPError
from mcp.types import (
    HEADER_MISMATCH,
    INVALID_REQUEST,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    CreateMessageResult,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    FormElicitationCapability,
    GetPromptRequestParams,
    GetPromptResult,
    InputRequiredResult,
    ListPromptsResult,
    ListToolsResult,
    SamplingMessage,
    TextContent,
)
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import BaseModel

from tests.fixtures.mcp import run, served_over_http, text_of
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp.answers import text_result
from toolgate.integrations.mcp.http import SESSION_IDLE_SECONDS
from toolgate.integrations.mcp.proxy import McpProxy
from toolgate.integrations.mcp.relay import RequestRelay, UpstreamRequests
from toolgate.integrations.mcp.router import McpRouter

ERAS = ["auto", "legacy"]  # the 2026-07-28 protocol, and the handshake era before it


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("Who is asking?", Name)


def ask_model(who: Annotated[Name, Resolve(ask_name)]) -> Sample:
    prompt = SamplingMessage(role="user", content=TextContent(text=f"Greet {who.name}."))
    return Sample([prompt], max_tokens=20)


def studio(events: list[str] | None = None) -> MCPServer:
    """An upstream whose tools report progress, or need the user's and a model's input, or
    run until cancelled (noting in ``events`` when they start and stop)."""
    server = MCPServer("studio")
    events = [] if events is None else events

    @server.tool()
    async def render_video(frames: int, ctx: Context) -> str:
        """Render the video's frames."""
        for frame in range(1, frames + 1):
            await ctx.report_progress(frame, frames, f"frame {frame}")
        return f"rendered {frames} frames"

    @server.tool()
    async def show_call_meta(ctx: Context) -> str:
        """Tell the metadata the call came with."""
        meta = ctx.request_context.meta
        return json.dumps(dict(meta or {}))

    @server.tool()
    async def export_archive() -> str:
        """Export every project into one archive (takes a while)."""
        events.append("started")
        try:
            await anyio.sleep_forever()
        finally:
            events.append("stopped")
        return "exported"

    @server.prompt()
    async def introduce(ctx: Context) -> str:
        """Introduce whoever is asking (an earlier-protocol server asks on its connection)."""
        answer = await ctx.elicit("Who is asking?", Name)
        assert answer.action == "accept"
        return f"Introduce {answer.data.name}."

    @server.tool()
    async def greet_user(
        who: Annotated[Name, Resolve(ask_name)],
        greeting: Annotated[CreateMessageResult, Resolve(ask_model)],
    ) -> str:
        """Greet the user, in words a model chose."""
        assert isinstance(greeting.content, TextContent)
        return f"{who.name}: {greeting.content.text}"

    return server


async def answer_name(_ctx: Any, params: Any) -> ElicitResult:
    assert params.message == "Who is asking?"
    return ElicitResult(action="accept", content={"name": "Ada"})


async def answer_sampling(_ctx: Any, params: Any) -> CreateMessageResult:
    asked = params.messages[0].content.text
    return CreateMessageResult(
        role="assistant", model="stub", content=TextContent(text=f"Hello! ({asked})")
    )


@asynccontextmanager
async def studio_proxy(
    embedder: Embedder,
    upstream_era: str = "auto",
    events: list[str] | None = None,
    *,
    one_client: bool = True,
) -> AsyncIterator[McpProxy]:
    """The proxy in front of ``studio`` (on ``upstream_era``); ``one_client``: it serves one
    client, as over stdio."""
    requests = UpstreamRequests(one_client=one_client)
    upstream_server = studio(events)
    async with Client(
        upstream_server, mode=upstream_era, **requests.callbacks("studio")
    ) as upstream:
        router = McpRouter(embedder=embedder, cache=None)
        await router.connect({"studio": upstream})
        yield McpProxy(router, requests=requests)


@asynccontextmanager
async def proxied(
    embedder: Embedder,
    upstream_era: str,
    client_era: str,
    events: list[str] | None = None,
    **client_options: Any,
) -> AsyncIterator[Client]:
    """A client (on ``client_era``) of the proxy in front of ``studio`` (on ``upstream_era``),
    its one client."""
    async with (
        studio_proxy(embedder, upstream_era, events) as proxy,
        Client(proxy.server, mode=client_era, **client_options) as client,
    ):
        yield client


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@pytest.mark.parametrize("client_era", ERAS)
@pytest.mark.parametrize("upstream_era", ERAS)
def test_an_upstream_tools_progress_reaches_the_client(
    embedder: Embedder, upstream_era: str, client_era: str
) -> None:
    async def main() -> None:
        async with proxied(embedder, upstream_era, client_era) as client:
            heard: list[tuple[float, float | None, str | None]] = []

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                heard.append((progress, total, message))

            result = await client.call_tool(
                "call_tool", call("render_video", frames=3), progress_callback=on_progress
            )
            assert text_of(result) == "rendered 3 frames"
            assert heard == [(1, 3, "frame 1"), (2, 3, "frame 2"), (3, 3, "frame 3")]
            # A client that asked for none is sent none, and gets its answer all the same.
            assert text_of(await client.call_tool("call_tool", call("render_video", frames=2))) == (
                "rendered 2 frames"
            )

    run(main)


@pytest.mark.parametrize("client_era", ERAS)
@pytest.mark.parametrize("upstream_era", ERAS)
def test_an_upstream_tools_requests_for_input_are_answered_by_the_client(
    embedder: Embedder, upstream_era: str, client_era: str
) -> None:
    async def main() -> None:
        answers = {"elicitation_callback": answer_name, "sampling_callback": answer_sampling}
        async with proxied(embedder, upstream_era, client_era, None, **answers) as client:
            result = await client.call_tool("call_tool", call("greet_user"))
            if upstream_era == "legacy" and client_era == "auto":
                # The upstream asks on its connection, mid-call; a 2026-07-28 client cannot
                # be asked then, and the model is told why.
                assert result.is_error
                assert json.loads(text_of(result)) == {
                    "error": "upstream_error",
                    "message": "Calling 'greet_user' failed: the proxy's client cannot be sent "
                    "elicitation/create in the middle of a request (it is on the 2026-07-28 "
                    "protocol)",
                }
                return
            assert not result.is_error, text_of(result)
            assert text_of(result) == "Ada: Hello! (Greet Ada.)"

    run(main)


@pytest.mark.parametrize("client_era", ERAS)
@pytest.mark.parametrize("upstream_era", ERAS)
def test_a_client_that_takes_no_elicitation_is_not_sent_one(
    embedder: Embedder, upstream_era: str, client_era: str
) -> None:
    async def main() -> None:
        async with proxied(embedder, upstream_era, client_era) as client:
            result = await client.call_tool("call_tool", call("greet_user"))
            assert result.is_error
            if (upstream_era, client_era) == ("legacy", "auto"):
                assert "cannot be sent elicitation/create in the middle" in text_of(result)
            else:
                assert "the proxy's client does not take elicitation/create" in text_of(result)

    run(main)


def test_an_upstreams_question_while_it_renders_a_prompt_reaches_the_client(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        options = {"elicitation_callback": answer_name}
        async with proxied(embedder, "legacy", "legacy", None, **options) as client:
            got = await client.get_prompt("introduce")
            assert got.messages[0].content.text == "Introduce Ada."

    run(main)


class StaleSession:
    """An upstream ``ClientSession`` that refuses the first call for headers from an old
    schema, as a 2026-07-28 server does when the tool changed since it was listed."""

    def __init__(self) -> None:
        self.calls = 0
        self.listings = 0

    async def call_tool(
        self, name: str, arguments: Any, *, allow_input_required: bool = False, **_: Any
    ) -> CallToolResult:
        self.calls += 1
        if self.calls == 1:
            raise MCPError(HEADER_MISMATCH, "Mcp-Param-Repo does not match the arguments")
        return text_result(f"{name} done")

    async def list_tools(self, params: Any = None) -> dict[str, Any]:
        self.listings += 1
        return {"tools": [{"name": "deploy", "inputSchema": {"type": "object"}}]}


class AuditedClient:
    """A host's own client around a session: its ``call_tool`` must not be bypassed."""

    def __init__(self) -> None:
        self.session = StaleSession()
        self.audited: list[str] = []

    async def call_tool(self, name: str, arguments: Any = None) -> CallToolResult:
        self.audited.append(name)
        return text_result(f"{name} audited")


class RequestContext:
    """The SDK's context of a client's request, as far as the relay reads it."""

    def __init__(self, capabilities: ClientCapabilities | None = None) -> None:
        self.session = self
        self.request_id = 1
        self.protocol_version = "2025-11-25"
        self.client_capabilities = capabilities
        self.sent: list[Any] = []
        self.reported: list[float] = []

    async def report_progress(self, progress: float, *_: Any) -> None:
        self.reported.append(progress)

    def check_client_capability(self, capability: ClientCapabilities) -> bool:
        mine = self.client_capabilities
        return mine is not None and all(
            getattr(mine, field) is not None
            for field in ("sampling", "elicitation", "roots")
            if getattr(capability, field) is not None
        )

    async def send_request(self, request: Any, *_: Any, **__: Any) -> ElicitResult:
        self.sent.append(request)
        return ElicitResult(action="accept", content={})


def test_progress_that_does_not_rise_is_not_passed_on() -> None:
    async def main() -> None:
        ctx = RequestContext()
        relay = RequestRelay(ctx, UpstreamRequests())
        for progress in (0, 5, 3, 5, 1, 6):
            await relay.progress(progress, None, None)
        assert ctx.reported == [0, 5, 6]  # MCP: progress must increase

    run(main)


def test_a_call_refused_for_stale_headers_is_sent_again_after_listing_the_tools() -> None:
    async def main() -> None:
        relay = RequestRelay(RequestContext(), UpstreamRequests())
        session = StaleSession()
        result = await relay.call_tool("deployer", session, "deploy", {})  # type: ignore[arg-type]
        assert text_of(result) == "deploy done"
        assert (session.calls, session.listings) == (2, 1)

    run(main)


def test_a_hosts_own_client_is_called_through_not_around() -> None:
    async def main() -> None:
        relay = RequestRelay(RequestContext(), UpstreamRequests())
        client = AuditedClient()
        result = await relay.call_tool("deployer", client, "deploy", {})  # type: ignore[arg-type]
        assert text_of(result) == "deploy audited"
        assert (client.audited, client.session.calls) == (["deploy"], 0)

    run(main)


def test_an_elicitation_is_sent_only_in_a_mode_the_client_takes() -> None:
    async def main() -> None:
        schema = {"type": "object", "properties": {}}
        form = ElicitRequest(
            params=ElicitRequestFormParams(message="Who?", requested_schema=schema)
        )
        url = ElicitRequest(
            params=ElicitRequestURLParams(
                message="Sign in", url="https://example.com/login", elicitation_id="e1"
            )
        )
        only_forms = ClientCapabilities(
            elicitation=ElicitationCapability(form=FormElicitationCapability())
        )
        context = RequestContext(only_forms)
        relay = RequestRelay(context, UpstreamRequests())
        assert (await relay.ask(form)).action == "accept"
        with pytest.raises(MCPError, match="does not take url-mode elicitation"):
            await relay.ask(url)
        assert context.sent == [form]
        # An empty elicitation capability is the spec's "forms only".
        bare = RequestRelay(
            RequestContext(ClientCapabilities(elicitation=ElicitationCapability())),
            UpstreamRequests(),
        )
        assert (await bare.ask(form)).action == "accept"
        with pytest.raises(MCPError, match="url-mode"):
            await bare.ask(url)

    run(main)


def rounds_server() -> Server[Any]:
    """A 2026-07-28 upstream whose tool reports progress in each round, and asks for a
    name in the first."""

    async def list_tools(_ctx: Any, _params: Any) -> ListToolsResult:
        tool = {"name": "deploy", "description": "Deploy.", "inputSchema": {"type": "object"}}
        return ListToolsResult.model_validate({"tools": [tool]})

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> Any:
        await ctx.session.report_progress(1, 2, "checked")
        await ctx.session.report_progress(2, 2, "built")
        if not params.input_responses:
            return InputRequiredResult.model_validate(asking("round-1"))
        answer = params.input_responses["approver"]
        assert params.request_state == "round-1"
        return text_result(f"deployed, approved by {answer.content['name']}")

    async def list_prompts(_ctx: Any, _params: Any) -> ListPromptsResult:
        return ListPromptsResult.model_validate({"prompts": [{"name": "welcome"}]})

    async def get_prompt(_ctx: Any, params: GetPromptRequestParams) -> Any:
        if not params.input_responses:
            return InputRequiredResult.model_validate(asking("welcome-1"))
        name = params.input_responses["approver"].content["name"]
        message = {"role": "user", "content": {"type": "text", "text": f"Welcome {name}."}}
        return GetPromptResult.model_validate({"messages": [message]})

    return Server(
        "rounds",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def asking(state: str) -> dict[str, Any]:
    """An ``InputRequiredResult`` asking who is asking, with ``state``."""
    question = ElicitRequestFormParams(
        message="Who is asking?", requested_schema={"type": "object", "properties": {}}
    )
    asked = {"approver": ElicitRequest(params=question).model_dump(by_alias=True)}
    return {"inputRequests": asked, "requestState": state}


@pytest.mark.parametrize("client_era", ERAS)
def test_progress_keeps_rising_across_input_rounds(embedder: Embedder, client_era: str) -> None:
    async def main() -> None:
        requests = UpstreamRequests(one_client=True)
        async with Client(rounds_server(), **requests.callbacks("rounds")) as upstream:
            router = McpRouter(embedder=embedder, cache=None)
            await router.connect({"rounds": upstream})
            proxy = McpProxy(router, requests=requests)
            async with Client(
                proxy.server, mode=client_era, elicitation_callback=answer_name
            ) as client:
                heard: list[tuple[float, float | None]] = []

                async def on_progress(progress: float, total: float | None, _m: Any) -> None:
                    heard.append((progress, total))

                done = await client.call_tool(
                    "call_tool", call("deploy"), progress_callback=on_progress
                )
                assert text_of(done) == "deployed, approved by Ada"
                if client_era == "legacy":  # the proxy ran both rounds on one call
                    assert heard == [(1, 2), (2, 2), (3, 4), (4, 4)]
                    # and it asks for a prompt's input too
                    welcome = await client.get_prompt("welcome")
                    assert welcome.messages[0].content.text == "Welcome Ada."
                else:  # the client did, each a call of its own
                    assert heard == [(1, 2), (2, 2), (1, 2), (2, 2)]

    run(main)


@pytest.mark.parametrize("client_era", ERAS)
@pytest.mark.parametrize("upstream_era", ERAS)
def test_a_calls_own_metadata_reaches_the_upstream(
    embedder: Embedder, upstream_era: str, client_era: str
) -> None:
    # A trace context (W3C traceparent, as the SDK's OpenTelemetry support carries it) and
    # a host's own keys were dropped at the proxy; MCP's own keys are the proxy's to set.
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    sent = {
        "traceparent": trace,
        "com.example/tenant": "acme",
        "io.modelcontextprotocol/related-task": {"taskId": "t-1"},
    }

    async def main() -> None:
        async with proxied(embedder, upstream_era, client_era) as client:
            result = await client.call_tool("call_tool", call("show_call_meta"), meta=sent)
            seen = json.loads(text_of(result))
            assert seen["traceparent"] == trace
            assert seen["com.example/tenant"] == "acme"
            assert "io.modelcontextprotocol/related-task" not in seen

    run(main)


@pytest.mark.parametrize("client_era", ERAS)
@pytest.mark.parametrize("upstream_era", ERAS)
def test_a_call_the_client_gives_up_on_is_cancelled_upstream(
    embedder: Embedder, upstream_era: str, client_era: str
) -> None:
    async def main() -> None:
        events: list[str] = []
        async with proxied(embedder, upstream_era, client_era, events) as client:
            with anyio.fail_after(10):
                async with anyio.create_task_group() as group:
                    group.start_soon(client.call_tool, "call_tool", call("export_archive"))
                    while events != ["started"]:
                        await anyio.sleep(0.01)
                    group.cancel_scope.cancel()  # the client gives up on its call
                while events != ["started", "stopped"]:
                    await anyio.sleep(0.01)
            # The upstream connection, shared by every client, goes on working.
            result = await client.call_tool("call_tool", call("render_video", frames=1))
            assert text_of(result) == "rendered 1 frames"

    run(main)


async def until(events: list[str], expected: list[str]) -> None:
    """Return once ``events`` (``studio``'s) are ``expected``."""
    while events != expected:
        await anyio.sleep(0.01)


# The upstream connection stays open in these tests, so a tool that stops was cancelled by
# a notifications/cancelled the proxy sent.


@pytest.mark.parametrize("client_era", ERAS)
def test_a_call_an_http_client_gives_up_on_is_cancelled_upstream(
    embedder: Embedder, client_era: str
) -> None:
    async def main() -> None:
        events: list[str] = []
        async with (
            studio_proxy(embedder, events=events, one_client=False) as proxy,
            served_over_http(proxy.server) as url,
        ):
            with anyio.fail_after(30):
                async with (
                    httpx2.AsyncClient() as http,
                    Client(
                        streamable_http_client(url, http_client=http), mode=client_era
                    ) as client,
                ):
                    async with anyio.create_task_group() as group:
                        group.start_soon(client.call_tool, "call_tool", call("export_archive"))
                        await until(events, ["started"])
                        # On 2026-07-28 the client closes the call's response stream; on the
                        # handshake era it sends notifications/cancelled.
                        group.cancel_scope.cancel()
                    await until(events, ["started", "stopped"])

    run(main)


async def handshake_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """A session opened on the proxy as a handshake-era client opens one: the headers its
    requests carry."""
    accepts = {"Accept": "application/json, text/event-stream"}
    hello = {
        "protocolVersion": LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "agent", "version": "1"},
    }
    opened = await http.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        headers=accepts,
    )
    headers = {
        **accepts,
        "Mcp-Session-Id": opened.headers["Mcp-Session-Id"],
        "MCP-Protocol-Version": LATEST_HANDSHAKE_VERSION,
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, json=initialized, headers=headers)
    return headers


@pytest.mark.parametrize("ends", ["deleted", "expired"])
def test_a_call_whose_clients_session_ends_is_cancelled_upstream(
    embedder: Embedder, ends: str
) -> None:
    # Expired: the client went away without ending its session or cancelling its call.
    idle = SESSION_IDLE_SECONDS if ends == "deleted" else 0.5

    async def main() -> None:
        events: list[str] = []
        async with (
            studio_proxy(embedder, events=events, one_client=False) as proxy,
            served_over_http(proxy.server, session_idle_timeout=idle) as url,
        ):
            with anyio.fail_after(30):
                async with httpx2.AsyncClient() as http:
                    headers = await handshake_session(http, url)
                    params = {"name": "call_tool", "arguments": call("export_archive")}
                    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
                    async with http.stream("POST", url, json=request, headers=headers):
                        await until(events, ["started"])
                        if ends == "deleted":
                            assert (await http.delete(url, headers=headers)).status_code == 200
                await until(events, ["started", "stopped"])

    run(main)


class Waiting:
    """A request of a client waiting on an upstream, as the relay sees it."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    async def ask(self, request: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": self.tag})


def asker(requests: UpstreamRequests, *, over_http: bool = False) -> Any:
    """An upstream's elicitation, as it reaches the proxy outside any request's context."""
    elicit = requests.callbacks("studio", over_http=over_http)["elicitation_callback"]
    params = ElicitRequestFormParams(
        message="Who?", requested_schema={"type": "object", "properties": {}}
    )
    assert ElicitRequest(params=params).method == "elicitation/create"
    return partial(elicit, None, params)


def refusal(answer: Any) -> str:
    assert isinstance(answer, ErrorData)
    assert answer.code == INVALID_REQUEST
    return answer.message


def test_a_stdio_upstreams_request_goes_to_the_proxys_one_client_while_it_waits() -> None:
    async def main() -> None:
        requests = UpstreamRequests(one_client=True)
        ask = asker(requests)
        assert refusal(await ask()) == (
            "elicitation/create: no request of the proxy's client is waiting on 'studio'"
        )
        first, again = Waiting("first"), Waiting("again")
        under_way = requests.under_way
        with under_way("studio", first), under_way("notes", Waiting("notes")):  # type: ignore[arg-type]
            assert (await ask()).content == {"name": "first"}
            with under_way("studio", again):  # type: ignore[arg-type]
                assert (await ask()).content == {"name": "first"}
        assert "no request of the proxy's client" in refusal(await ask())

    run(main)


def test_with_several_clients_a_request_that_does_not_say_whose_it_is_goes_to_none() -> None:
    async def main() -> None:
        requests = UpstreamRequests()  # a proxy over HTTP: any number of clients
        ask = asker(requests)
        with requests.under_way("studio", Waiting("a")):  # type: ignore[arg-type]
            # The only request waiting is alice's, but the question could be one a request
            # of bob's that ended left behind.
            assert refusal(await ask()) == (
                "elicitation/create: it does not say which of the proxy's clients it is for"
            )

    run(main)


def test_an_http_upstreams_request_on_no_requests_stream_goes_only_to_a_lone_client() -> None:
    async def main() -> None:
        requests = UpstreamRequests()
        ask = asker(requests, over_http=True)
        with requests.under_way("studio", Waiting("a")):  # type: ignore[arg-type]
            # Over HTTP a request for input comes on its request's stream: one that came on
            # none could be any client's.
            assert refusal(await ask()) == (
                "elicitation/create: it belongs to no request of the proxy's clients"
            )
        lone = UpstreamRequests(one_client=True)
        with lone.under_way("studio", Waiting("a")):  # type: ignore[arg-type]
            assert (await asker(lone, over_http=True)()).content == {"name": "a"}

    run(main)


class Unanswered:
    """A request whose client never answers (its user walked away from the form)."""

    async def ask(self, request: Any) -> ElicitResult:
        await anyio.sleep_forever()
        raise AssertionError("not reached")


WITHDRAWN = "elicitation/create: the request of the proxy's client it was for has ended"


def test_a_question_for_a_request_that_ended_is_withdrawn() -> None:
    async def main() -> None:
        # A server that goes on asking after its call was cancelled (many do not cancel their
        # own requests) would otherwise have the client's form stay open for ten minutes,
        # and run the cancelled call on with the answer.
        requests = UpstreamRequests(one_client=True)
        answers: list[Any] = []

        async def asking() -> None:
            answers.append(await asker(requests)())

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                with requests.under_way("studio", Unanswered()):  # type: ignore[arg-type]
                    group.start_soon(asking)
                    await anyio.wait_all_tasks_blocked()
                    # Over stdio it may be any waiting request's: one that comes and goes
                    # while another waits leaves it be.
                    with requests.under_way("studio", Waiting("other")):  # type: ignore[arg-type]
                        pass
                    await anyio.wait_all_tasks_blocked()
                    assert answers == []
        assert [refusal(answer) for answer in answers] == [WITHDRAWN]

    run(main)


def test_a_question_for_one_clients_request_is_withdrawn_when_that_request_ends() -> None:
    async def main() -> None:
        requests = UpstreamRequests()  # over HTTP, where a question says whose it is

        class Walked(RequestContext):
            async def send_request(self, request: Any, *_: Any, **__: Any) -> ElicitResult:
                await anyio.sleep_forever()
                raise AssertionError("not reached")

        forms = ClientCapabilities(elicitation=ElicitationCapability())
        mine = RequestRelay(Walked(forms), requests)
        answers: list[Any] = []

        async def asking() -> None:
            answers.append(await asker(requests, over_http=True)())

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                with requests.under_way("studio", Waiting("another client's")):  # type: ignore[arg-type]
                    with mine.waiting_on("studio"):
                        group.start_soon(asking)  # asked in the context of mine's request
                        await anyio.wait_all_tasks_blocked()
                        assert answers == []
                    await anyio.wait_all_tasks_blocked()
                    # Withdrawn as mine ended, while another client's request still waits.
                    assert [refusal(answer) for answer in answers] == [WITHDRAWN]

    run(main)

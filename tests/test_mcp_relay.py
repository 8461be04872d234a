"""The MCP proxy passes an upstream call's progress and requests for input to its client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve, Sample
from mcp.types import (
    INVALID_REQUEST,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    ErrorData,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel
from tests.mcp_fixtures import run, text_of

from toolgate.embed import Embedder
from toolgate.integrations.mcp import McpRouter
from toolgate.integrations.mcp_proxy import McpProxy
from toolgate.integrations.mcp_relay import UpstreamRequests

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
    async def export_archive() -> str:
        """Export every project into one archive (takes a while)."""
        events.append("started")
        try:
            await anyio.sleep_forever()
        finally:
            events.append("stopped")
        return "exported"

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
async def proxied(
    embedder: Embedder,
    upstream_era: str,
    client_era: str,
    events: list[str] | None = None,
    **client_options: Any,
) -> AsyncIterator[Client]:
    """A client (on ``client_era``) of the proxy in front of ``studio`` (on ``upstream_era``)."""
    requests = UpstreamRequests()
    upstream_server = studio(events)
    async with Client(
        upstream_server, mode=upstream_era, **requests.callbacks("studio")
    ) as upstream:
        router = McpRouter(embedder=embedder, cache=None)
        await router.connect({"studio": upstream})
        proxy = McpProxy(router, requests=requests)
        async with Client(proxy.server, mode=client_era, **client_options) as client:
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
                assert "cannot be sent elicitation/create in the middle of a call" in (
                    text_of(result)
                )
                return
            assert not result.is_error, text_of(result)
            assert text_of(result) == "Ada: Hello! (Greet Ada.)"

    run(main)


@pytest.mark.parametrize("upstream_era", ERAS)
def test_a_client_that_takes_no_elicitation_is_not_sent_one(
    embedder: Embedder, upstream_era: str
) -> None:
    async def main() -> None:
        async with proxied(embedder, upstream_era, "legacy") as client:
            result = await client.call_tool("call_tool", call("greet_user"))
            assert result.is_error
            assert "the proxy's client does not take elicitation/create" in text_of(result)

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


class Waiting:
    """A call waiting on an upstream, as the relay sees it."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    async def ask(self, request: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": self.tag})


def test_an_upstream_request_goes_to_the_only_call_waiting_on_that_server() -> None:
    async def main() -> None:
        requests = UpstreamRequests()
        elicit = requests.callbacks("studio")["elicitation_callback"]
        params = ElicitRequestFormParams(
            message="Who?", requested_schema={"type": "object", "properties": {}}
        )
        assert ElicitRequest(params=params).method == "elicitation/create"

        async def ask() -> Any:
            return await elicit(None, params)

        nobody = await ask()
        assert isinstance(nobody, ErrorData)
        assert nobody.code == INVALID_REQUEST
        assert "with no call under way to 'studio'" in nobody.message
        first, second = Waiting("first"), Waiting("second")
        with requests.waiting("studio", first), requests.waiting("other", second):  # type: ignore[arg-type]
            assert (await ask()).content == {"name": "first"}
            with requests.waiting("studio", second):  # type: ignore[arg-type]
                # Two calls wait on the server: the request could be either's.
                both = await ask()
                assert isinstance(both, ErrorData)
                assert "with 2 calls under way to 'studio'" in both.message
            assert (await ask()).content == {"name": "first"}
        assert isinstance(await ask(), ErrorData)

    run(main)

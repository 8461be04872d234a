"""A request cancelled from outside the gateway before its answer began: one whose server
cancelled it for another reason than a client gone is answered the gateway's 503 and logged
with the reason; one whose client had gone is counted as a client gone, and not answered."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from starlette.responses import Response

from toolgate.asgi import Message, Receive, Scope, Send
from toolgate.gateway.stopping import AnswerWhenStopped

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}


async def _unanswered(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that reads the request as its server gives it, then never answers (its wait for
    the client gone, if any, not its business)."""
    while (await receive())["type"] == "http.request":
        pass
    await asyncio.Event().wait()


def _cut(messages: list[Message], reason: str | None) -> tuple[list[Message], list[Scope]]:
    """What ``AnswerWhenStopped`` sends, and the scopes it counts as a client gone, when its
    server hands the request ``messages`` and then cancels it with ``reason``."""
    sent: list[Message] = []
    gone: list[Scope] = []
    given = list(messages)

    async def receive() -> Message:
        if given:
            return given.pop(0)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    def answer(_scope: Scope) -> Response:
        return Response(b"stopped", 503)

    async def run() -> None:
        middleware = AnswerWhenStopped(_unanswered, answer=answer, on_gone=gone.append)
        task = asyncio.ensure_future(middleware(dict(SCOPE), receive, send))
        await asyncio.sleep(0.01)  # the app has read all there is
        task.cancel(reason)
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    return sent, gone


def _statuses(sent: list[Message]) -> list[Any]:
    return [m["status"] for m in sent if m["type"] == "http.response.start"]


def test_a_request_the_server_cancels_is_answered_and_logged_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="toolgate.gateway")
    request = {"type": "http.request", "body": b"{}", "more_body": False}
    sent, gone = _cut([request], "the host's deadline passed")
    assert _statuses(sent) == [503]
    assert gone == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("POST '/v1/chat/completions' 503:")
    assert "the host's deadline passed" in line


def test_a_request_cancelled_after_its_client_left_is_a_client_gone_not_a_503(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # As a server may do (Daphne cancels a request whose client left and that goes on):
    # the client is gone, so nobody reads a 503, and the gateway did not stop.
    caplog.set_level(logging.INFO, logger="toolgate.gateway")
    request = {"type": "http.request", "body": b"{}", "more_body": False}
    sent, gone = _cut([request, {"type": "http.disconnect"}], None)
    assert _statuses(sent) == []
    assert gone == [SCOPE]
    assert not [r for r in caplog.records if "503" in r.getMessage()]

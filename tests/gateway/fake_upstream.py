"""A fake OpenAI / Anthropic / Gemini API on loopback that records what it receives, and
servers (it, the gateway) run by uvicorn in a thread for the duration of a test."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "fake-model"


@dataclass
class Received:
    """One request as the fake upstream saw it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    port: int | None = None  # the client's: a new one is a new connection
    raw_path: bytes = b""  # the path as the client wrote it, escapes and all


@dataclass
class Script:
    """What the fake answers next: a call to ``tool`` (text when None) with ``args``, or the
    HTTP ``status`` with an error body; streams wait ``delay`` seconds between events, and
    ``reset_after`` events in, the connection is dropped; ``hold_after`` events in, they wait
    until the test sets ``hold`` (what the test saw before, the fake sent no more)."""

    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    status: int = 200
    delay: float = 0.0
    reset_after: int | None = None
    answer_delay: float = 0.0
    headers: tuple[tuple[bytes, bytes], ...] = ()  # added to a whole answer, as bytes
    response_id: str = "resp_1"  # an OpenAI Responses answer's id
    hold: threading.Event = field(default_factory=threading.Event)
    hold_after: int | None = None


class FakeUpstream:
    """The fake API: :attr:`received` lists every request; :attr:`script` says what to answer;
    :attr:`closed` lists the bodies of the requests whose stream the client (the gateway) stopped
    reading, :attr:`closed_streams` counts them."""

    def __init__(self, *, record: bool = True) -> None:
        self.record = record
        self.received: list[Received] = []
        self.script = Script()
        self.closed: list[Any] = []
        self.app = Starlette(routes=[Route("/{path:path}", self._answer, methods=["GET", "POST"])])

    async def _answer(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except (json.JSONDecodeError, RecursionError):  # nested past what json reads: as bytes
            body = raw
        path = request.url.path
        if self.record:
            self.received.append(
                Received(
                    request.method, path, request.url.query, dict(request.headers), body,
                    request.client.port if request.client else None,
                    request.scope.get("raw_path", b""),
                )
            )  # fmt: skip
        script = self.script
        if script.answer_delay:
            await asyncio.sleep(script.answer_delay)
        if script.status != 200:
            error = {"error": {"message": "upstream says no", "type": "server_error"}}
            return JSONResponse(error, script.status, headers={"x-upstream": "yes"})
        if request.method == "GET":
            return JSONResponse({"object": "list", "data": [{"id": MODEL}]})
        stream = path.endswith(":streamGenerateContent") or (
            isinstance(body, dict) and body.get("stream") is True
        )
        kind = _kind(path)
        if not stream:
            response = JSONResponse(WHOLE[kind](script), headers={"x-upstream": "yes"})
            response.raw_headers += script.headers
            return response
        if kind == "gemini" and "alt=sse" not in request.url.query:
            # Google streams a JSON array of responses to a client that asks for no SSE.
            return StreamingResponse(
                self._events(_gemini_array(script), script, body),
                media_type="application/json; charset=UTF-8", headers={"x-upstream": "yes"},
            )  # fmt: skip
        events = STREAMED[kind](script)
        return StreamingResponse(
            self._events(events, script, body), media_type="text/event-stream",
            headers={"x-upstream": "yes"},
        )  # fmt: skip

    @property
    def closed_streams(self) -> int:
        return len(self.closed)

    async def _events(self, events: list[bytes], script: Script, body: Any) -> AsyncIterator[bytes]:
        try:
            for i, event in enumerate(events):
                if script.reset_after is not None and i == script.reset_after:
                    raise ConnectionResetError("the fake drops the stream")
                if i == script.hold_after and not await asyncio.to_thread(script.hold.wait, 30):
                    raise TimeoutError("the test never let the fake stream go on")
                yield event
                if script.delay:
                    await asyncio.sleep(script.delay)
        except (asyncio.CancelledError, GeneratorExit):
            self.closed.append(body)
            raise


def _kind(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    return "gemini"


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _chat(script: Script) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "Sunny." if not script.tool else None,
    }
    if script.tool:
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {
            "name": script.tool, "arguments": json.dumps(script.args)}}]  # fmt: skip
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if script.tool else "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


def _chat_stream(script: Script) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                     "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish}]})  # fmt: skip

    if not script.tool:
        parts = [chunk({"role": "assistant", "content": "Sun"}), chunk({"content": "ny."}),
                 chunk({}, "stop")]  # fmt: skip
    else:
        arguments = json.dumps(script.args)
        call = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": script.tool, "arguments": ""}}  # fmt: skip
        parts = [
            chunk({"role": "assistant", "content": None}),
            chunk({"tool_calls": [call]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:5]}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[5:]}}]}),
            chunk({}, "tool_calls"),
        ]
    return [*parts, b"data: [DONE]\n\n"]


def _responses_item(script: Script) -> dict[str, Any]:
    if not script.tool:
        return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "Sunny.",
                             "annotations": []}]}  # fmt: skip
    return {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": script.tool,
            "arguments": json.dumps(script.args), "status": "completed"}  # fmt: skip


def _responses(script: Script, output: list[Any] | None = None) -> dict[str, Any]:
    return {
        "id": script.response_id, "object": "response", "created_at": 0, "model": MODEL,
        "status": "completed", "output": [_responses_item(script)] if output is None else output,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }  # fmt: skip


def _responses_stream(script: Script) -> list[bytes]:
    item = _responses_item(script)
    started = {**item, "arguments": ""} if script.tool else {**item, "content": []}
    events = [
        {"type": "response.created",
         "response": {**_responses(script, []), "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": started},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": _responses(script)},
    ]  # fmt: skip
    return [_sse({**e, "sequence_number": i}, e["type"]) for i, e in enumerate(events)]


def _anthropic(script: Script) -> dict[str, Any]:
    content = (
        [{"type": "tool_use", "id": "toolu_1", "name": script.tool, "input": script.args}]
        if script.tool else [{"type": "text", "text": "Sunny."}]
    )  # fmt: skip
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
        "content": content, "stop_reason": "tool_use" if script.tool else "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
    }  # fmt: skip


def _anthropic_stream(script: Script) -> list[bytes]:
    message = {**_anthropic(script), "content": [], "stop_reason": None}
    if script.tool:
        block = {"type": "tool_use", "id": "toolu_1", "name": script.tool, "input": {}}
        text = json.dumps(script.args)
        deltas = [{"type": "input_json_delta", "partial_json": text[:4]},
                  {"type": "input_json_delta", "partial_json": text[4:]}]  # fmt: skip
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": "Sunny."}]
    events = [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start",
         {"type": "content_block_start", "index": 0, "content_block": block}),
        *(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d})
          for d in deltas),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "tool_use" if script.tool else "end_turn",
                                     "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return [_sse(data, name) for name, data in events]


def _gemini(script: Script, text: str = "Sunny.") -> dict[str, Any]:
    part = (
        {"functionCall": {"name": script.tool, "args": script.args}}
        if script.tool
        else {"text": text}
    )
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP",
                        "index": 0}],
        "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
        "modelVersion": MODEL,
    }  # fmt: skip


def _gemini_stream(script: Script) -> list[bytes]:
    first = _gemini(Script(), "Let me check. ")
    return [_sse(first), _sse(_gemini(script))]


def _gemini_array(script: Script) -> list[bytes]:
    """The Gemini stream without SSE, one response per piece: a JSON array, a CRLF after
    each comma (the first response's text holds what a reader of the array must skip)."""
    first = json.dumps(_gemini(Script(), 'Let me check. "Lisbon" [a {city}] \\'), indent=2)
    return [f"[{first}".encode(), f",\r\n{json.dumps(_gemini(script), indent=2)}".encode(), b"]"]


WHOLE = {"chat": _chat, "responses": _responses, "anthropic": _anthropic, "gemini": _gemini}
STREAMED = {
    "chat": _chat_stream, "responses": _responses_stream, "anthropic": _anthropic_stream,
    "gemini": _gemini_stream,
}  # fmt: skip


@contextmanager
def serving(app: Any, **options: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
    if thread.is_alive():
        raise RuntimeError("the server did not stop within 60 s of being told to")


def create_app() -> Starlette:
    """A fake upstream answering text and recording nothing, for ``uvicorn --factory``
    (benches/gateway_load.py: thousands of requests of up to megabytes each)."""
    return FakeUpstream(record=False).app

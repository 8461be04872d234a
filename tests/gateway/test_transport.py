"""The gateway's HTTP transport: content codings either way, how what it forwards is framed,
and the headers that stay on one hop."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import zstandard
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.gateway.conftest import Served, sent_names
from tests.gateway.fake_upstream import serving
from tests.gateway.test_filter import WEATHER, chat_tools
from toolgate.errors import InvalidInputError
from toolgate.gateway import bodies
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, RouteConfig, Upstream
from toolgate.gateway.filter import ToolFilter

USER = [{"role": "user", "content": WEATHER}]
# A tool the weather question is never routed to, so never sent.
NOT_SENT = "delete_everything"


class CodedUpstream:
    """An upstream answering every request with :attr:`body` and :attr:`headers` as they are
    (a content coding and all)."""

    def __init__(self) -> None:
        self.body = b""
        self.status = 200
        self.headers: dict[str, str] = {}
        self.app = Starlette(routes=[Route("/{path:path}", self._answer, methods=["POST"])])

    async def _answer(self, request: Request) -> Response:
        await request.body()
        return Response(self.body, self.status, headers=self.headers)


@pytest.fixture(scope="module")
def coded() -> Iterator[tuple[CodedUpstream, str]]:
    upstream = CodedUpstream()
    with serving(upstream.app) as url:
        yield upstream, url


def _gateway(url: str, tool_filter: ToolFilter, policy: str) -> Gateway:
    config = GatewayConfig(
        upstreams={"openai": Upstream(url)}, default=RouteConfig(top_k=3, policy=policy)
    )
    return Gateway(config, tool_filter=tool_filter)


def _chat_answer(tool: str) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }  # fmt: skip


# ---- content codings ----


def test_a_filtered_request_asks_upstream_only_for_codings_the_gateway_decodes(
    annotating: Served,
) -> None:
    # A client with brotli installed accepts br: the gateway, which reads the answer to check
    # its calls, could not; the upstream is asked for what the gateway decodes instead.
    body = {"messages": USER, "tools": chat_tools()}
    answer = httpx.post(
        annotating.url + "/v1/chat/completions", json=body, headers={"accept-encoding": "br"}
    )
    assert answer.status_code == 200
    asked = [c.strip() for c in annotating.fake.received[-1].headers["accept-encoding"].split(",")]
    assert "br" not in asked
    assert "gzip" in asked
    # What the gateway does not read goes with the client's own.
    httpx.get(annotating.url + "/v1/models", headers={"accept-encoding": "br"})
    assert annotating.fake.received[-1].headers["accept-encoding"] == "br"


def test_an_answer_in_a_coding_the_gateway_cannot_decode_is_never_passed_as_decoded(
    coded: tuple[CodedUpstream, str], shared_filter: ToolFilter
) -> None:
    # An upstream ignoring the codings it was asked for ("compress": LZW, which httpx reads
    # as no coding at all): the gateway can neither check the calls nor strip the coding.
    upstream, url = coded
    upstream.body = zlib.compress(json.dumps(_chat_answer(NOT_SENT)).encode())
    upstream.headers = {"content-type": "application/json", "content-encoding": "compress"}
    body = {"messages": USER, "tools": chat_tools()}
    with serving(_gateway(url, shared_filter, "enforce").app) as gateway:
        refused = httpx.post(gateway + "/v1/chat/completions", json=body)
    assert refused.status_code == 502
    assert refused.headers["x-toolgate-error"] == "upstream_encoding"
    assert "cannot decode (compress)" in refused.json()["error"]["message"]
    with serving(_gateway(url, shared_filter, "annotate").app) as gateway:
        passed = httpx.post(gateway + "/v1/chat/completions", json=body)
    assert passed.status_code == 200
    assert passed.headers["content-encoding"] == "compress"
    assert passed.content == upstream.body


def test_an_answer_its_coding_cannot_decode_is_a_502_or_an_error_event(
    coded: tuple[CodedUpstream, str], shared_filter: ToolFilter
) -> None:
    # Said to be gzip, but not (or cut short): the upstream's fault, said so in the
    # provider's error shape, never a bare 500 or a stream ended as "a bug".
    upstream, url = coded
    upstream.body = b"data: not gzip at all\n\n"
    body = {"messages": USER, "tools": chat_tools()}
    with serving(_gateway(url, shared_filter, "annotate").app) as gateway:
        upstream.headers = {"content-type": "application/json", "content-encoding": "gzip"}
        whole = httpx.post(gateway + "/v1/chat/completions", json=body)
        upstream.headers["content-type"] = "text/event-stream"
        streamed = httpx.post(gateway + "/v1/chat/completions", json={**body, "stream": True})
    assert whole.status_code == 502
    assert whole.json()["error"]["code"] == "upstream_decoding"
    assert "cannot be decoded" in whole.json()["error"]["message"]
    event = json.loads(streamed.text.removeprefix("data: "))
    assert event["error"]["code"] == "upstream_decoding"


def test_an_answer_passed_on_unchecked_that_its_coding_cannot_decode_is_a_502(
    coded: tuple[CodedUpstream, str], shared_filter: ToolFilter
) -> None:
    # An error answer, or any under policy "off", is passed on decoded without being read
    # first: one labelled gzip but not (a proxy's plain error page) ended the gateway's answer
    # mid-body with a traceback in its log, the client left with a cut connection.
    upstream, url = coded
    upstream.body = b'{"error": {"message": "overloaded"}}'
    upstream.headers = {"content-type": "application/json", "content-encoding": "gzip"}
    body = {"messages": USER, "tools": chat_tools()}
    try:
        for policy, status in (("annotate", 503), ("off", 200)):
            upstream.status = status
            with serving(_gateway(url, shared_filter, policy).app) as gateway:
                answer = httpx.post(gateway + "/v1/chat/completions", json=body)
            assert answer.status_code == 502, policy
            assert answer.json()["error"]["code"] == "upstream_decoding"
        upstream.headers = {"content-type": "application/json", "content-encoding": "gzip"}
        upstream.body = gzip.compress(b'{"error": {"message": "overloaded"}}')
        upstream.status = 503
        with serving(_gateway(url, shared_filter, "annotate").app) as gateway:
            answer = httpx.post(gateway + "/v1/chat/completions", json=body)
        assert (answer.status_code, answer.json()) == (503, {"error": {"message": "overloaded"}})
    finally:
        upstream.status = 200


def test_a_compressed_request_is_decoded_filtered_and_sent_on_decoded(
    annotating: Served,
) -> None:
    # gzip, deflate or zstd: filtered like any other, never refused as "not JSON", and
    # forwarded decoded (the gateway writes the body it filtered).
    body = json.dumps({"messages": USER, "tools": chat_tools()}).encode()
    compressed = {
        "gzip": gzip.compress(body), "deflate": zlib.compress(body),
        "zstd": zstandard.ZstdCompressor().compress(body),
    }  # fmt: skip
    for coding, content in compressed.items():
        answer = httpx.post(
            annotating.url + "/v1/chat/completions", content=content,
            headers={"content-type": "application/json", "content-encoding": coding},
        )  # fmt: skip
        assert answer.status_code == 200, coding
        assert answer.headers["x-toolgate-tools"] == f"3/{len(chat_tools())}"
        received = annotating.fake.received[-1]
        assert "content-encoding" not in received.headers
        assert len(sent_names(annotating.fake)) == 3


def test_a_compressed_part_that_holds_no_bytes_is_read_as_such() -> None:
    # A gzip member or a deflate stream of nothing (an empty file's, a writer's closing
    # member) was taken for data cut short: a sound body refused as "not valid gzip".
    body = b'{"messages": []}'
    assert bodies.decode(gzip.compress(b"") + gzip.compress(body), "gzip", 100) == body
    assert bodies.decode(gzip.compress(body) + gzip.compress(b""), "gzip", 100) == body
    assert bodies.decode(zlib.compress(b""), "deflate", 100) == b""
    assert bodies.decode(gzip.compress(b""), "gzip", 0) == b""
    with pytest.raises(InvalidInputError, match="not valid gzip"):  # one cut short still is
        bodies.decode(gzip.compress(body)[:-3], "gzip", 100)


def test_a_body_in_a_coding_not_decoded_or_not_in_its_coding_never_goes_upstream(
    annotating: Served,
) -> None:
    body = json.dumps({"messages": USER, "tools": chat_tools()}).encode()
    bomb = gzip.compress(b" " * (80 << 20))  # 80 MiB of spaces from some 80 KB
    cases = [
        ("br", body, 415, "unsupported_encoding"),  # unknown to the gateway: refused unread
        ("gzip", body, 400, "bad_encoding"),  # said to be gzip, but not
        ("gzip", bomb, 413, "body_too_large"),  # past max_body_bytes (64 MiB) once decoded
    ]
    answers = {}
    for coding, content, status, code in cases:
        answer = httpx.post(
            annotating.url + "/v1/chat/completions", content=content,
            headers={"content-type": "application/json", "content-encoding": coding},
        )  # fmt: skip
        assert (answer.status_code, answer.headers["x-toolgate-error"]) == (status, code)
        answers[status] = answer
    assert "'br' is not one the gateway decodes" in answers[415].json()["error"]["message"]
    assert "gzip" in answers[415].headers["accept-encoding"]  # what it takes instead
    assert "not valid gzip" in answers[400].json()["error"]["message"]
    assert annotating.fake.received == []


def test_a_zstd_frame_asking_for_a_larger_window_than_the_body_needs_is_refused(
    annotating: Served,
) -> None:
    # zstandard allocates the window a frame asks for, up to 128 MiB, for each request: the
    # gateway decodes with one no larger than max_body_bytes needs (zstd's default, 2 MiB, at
    # least) and never over 8 MiB.
    body = json.dumps({"messages": USER, "tools": chat_tools()}).encode()

    def framed(window_log: int) -> bytes:
        params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log)
        # Streamed, so the frame gives no size and keeps its window however short it is.
        streaming = zstandard.ZstdCompressor(compression_params=params).compressobj()
        return streaming.compress(body) + streaming.flush()

    assert bodies.decode(framed(21), "zstd", 100) is None  # zstd's default: read to the bound
    with pytest.raises(InvalidInputError, match=r"not valid zstd.* at most 2,097,152 bytes"):
        bodies.decode(framed(22), "zstd", 100)
    assert bodies.decode(framed(22), "zstd", 3 << 20) == body
    assert bodies.decode(framed(23), "zstd", 64 << 20) == body
    answer = httpx.post(
        annotating.url + "/v1/chat/completions", content=framed(27),
        headers={"content-type": "application/json", "content-encoding": "zstd"},
    )  # fmt: skip
    assert (answer.status_code, answer.headers["x-toolgate-error"]) == (400, "bad_encoding")
    assert "at most 8,388,608 bytes" in answer.json()["error"]["message"]
    assert annotating.fake.received == []


# ---- framing ----


def test_a_passed_through_request_keeps_its_framing(annotating: Served) -> None:
    # A body not changed keeps its length (a server may refuse a chunked one: 411); a
    # request without one is sent without one, not as an empty chunked body.
    received = annotating.fake.received
    httpx.get(annotating.url + "/v1/models")
    assert "transfer-encoding" not in received[-1].headers
    assert received[-1].headers.get("content-length", "0") == "0"
    content = json.dumps({"model": "e", "input": WEATHER}).encode()
    httpx.post(annotating.url + "/v1/embeddings", content=content)
    assert "transfer-encoding" not in received[-1].headers
    assert received[-1].headers["content-length"] == str(len(content))
    assert received[-1].body == json.loads(content)
    httpx.post(annotating.url + "/v1/embeddings", content=iter([content[:9], content[9:]]))
    assert received[-1].headers["transfer-encoding"] == "chunked"  # as the client sent it
    assert received[-1].body == json.loads(content)


# ---- hop-by-hop headers ----


def test_headers_a_connection_names_stay_on_its_hop(annotating: Served) -> None:
    # RFC 9110 section 7.6.1: a header the Connection header names is for the next hop
    # alone, both ways.
    annotating.fake.script.headers = ((b"connection", b"x-upstream-hop"), (b"x-upstream-hop", b"1"))
    body = {"messages": USER, "tools": chat_tools()}
    for path in ("/v1/chat/completions", "/v1/embeddings"):
        httpx.post(
            annotating.url + path, json=body,
            headers={"connection": "keep-alive, x-client-hop", "x-client-hop": "1", "x-kept": "1"},
        )  # fmt: skip
        received = annotating.fake.received[-1].headers
        assert "x-client-hop" not in received
        assert received["x-kept"] == "1"
    answer = httpx.post(annotating.url + "/v1/chat/completions", json=body)
    assert answer.status_code == 200
    assert "x-upstream-hop" not in answer.headers
    assert answer.headers["x-upstream"] == "yes"


def test_an_answer_has_one_date_and_one_server(annotating: Served) -> None:
    # The server serving the gateway writes both: the upstream's too made two of each, and
    # Date is a single value.
    body = {"messages": USER, "tools": chat_tools()}
    for path in ("/v1/chat/completions", "/v1/embeddings"):
        answer = httpx.post(annotating.url + path, json=body)
        names = [name.lower() for name, _ in answer.headers.raw]
        assert (names.count(b"date"), names.count(b"server")) == (1, 1), path
    streamed = httpx.post(annotating.url + "/v1/chat/completions", json={**body, "stream": True})
    assert [name.lower() for name, _ in streamed.headers.raw].count(b"date") == 1


def test_a_large_or_compressed_body_is_decoded_parsed_and_written_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A few-MB request (an image, long tool results) read on the event loop held every other
    request of the gateway's worker meanwhile."""
    ran_in: dict[str, list[int]] = {"parse": [], "dumps": []}
    for name in ran_in:
        original = getattr(bodies, name)

        def recording(value: Any, _name: str = name, _original: Any = original) -> Any:
            ran_in[_name].append(threading.get_ident())
            return _original(value)

        monkeypatch.setattr(bodies, name, recording)
    small = {"messages": USER, "tools": chat_tools()}
    large = {**small, "padding": "x" * bodies.OFF_LOOP_BYTES}

    async def read(raw: bytes, coding: str | None) -> tuple[int, Any, bytes]:
        headers = [(b"content-type", b"application/json")]
        if coding is not None:
            headers.append((b"content-encoding", coding.encode()))
        sent = iter([{"type": "http.request", "body": raw, "more_body": False}])

        async def receive() -> dict[str, Any]:
            return next(sent)

        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}
        request = Request({**scope, "headers": headers}, receive)
        read = await bodies.read(request, 64 << 20, "openai")
        assert isinstance(read, tuple)
        return threading.get_ident(), read[1], await bodies.written(read[1], len(read[0]))

    for body, coding in [(large, None), (small, "gzip")]:
        raw = json.dumps(body).encode()
        sent = raw if coding is None else gzip.compress(raw)
        loop_thread, parsed, written = asyncio.run(read(sent, coding))
        assert parsed == body
        assert json.loads(written) == body
        assert ran_in["parse"][-1] != loop_thread
    assert ran_in["dumps"][-2] != loop_thread  # the large body's

"""A client that goes away stops its upstream call: the gateway closes the upstream
connection whether it was waiting for the answer to begin, for a whole answer's body, or for
a stream's first event (mid-stream: tests/gateway/test_gateway.py), so the upstream stops
generating for nobody."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest

from tests.gateway.fake_upstream import serving
from tests.gateway.test_filter import WEATHER
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, Upstream
from toolgate.gateway.filter import ToolFilter

# Long enough for a loaded machine, far short of the gateway's 600 s upstream timeout.
WAIT_SECONDS = 30


class SilentUpstream:
    """An upstream on loopback taking one request and answering nothing (with ``headers``,
    only a status line and headers; with ``hang_up`` too, it then closes the connection);
    :attr:`asked` is set once the whole request is in, and :attr:`closed` once the gateway
    closes the connection."""

    def __init__(self, *, headers: bool, hang_up: bool = False) -> None:
        self.headers = headers
        self.hang_up = hang_up
        self.asked = threading.Event()
        self.closed = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with self._server, self._server.accept()[0] as connection:
            connection.settimeout(2 * WAIT_SECONDS)
            received = b""
            while not _whole(received):
                received += connection.recv(65536)
            self.asked.set()
            if self.headers:
                head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                connection.sendall(head + b"content-length: 1000\r\n\r\n{")
            # b"" once the gateway closes its end
            while not self.hang_up and connection.recv(65536):
                pass
            self.closed.set()


def _whole(received: bytes) -> bool:
    """Whether ``received`` holds a whole request: its headers, and its body by length, or
    chunked to the last chunk."""
    head, blank, body = received.partition(b"\r\n\r\n")
    if not blank:
        return False
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return body.endswith(b"0\r\n\r\n") or b"transfer-encoding" not in head.lower()


@pytest.mark.parametrize(
    ("path", "stream", "headers"),
    [
        ("/v1/chat/completions", False, False),  # waiting for a whole answer to begin
        ("/v1/chat/completions", False, True),  # waiting for a whole answer's body
        ("/v1/chat/completions", True, False),  # waiting for a stream's first event
        ("/v1/embeddings", False, False),  # a passthrough request
    ],
)
def test_a_client_gone_before_the_answer_stops_the_upstream_call(
    shared_filter: ToolFilter, path: str, stream: bool, headers: bool
) -> None:
    upstream = SilentUpstream(headers=headers)
    gateway = Gateway(GatewayConfig(upstreams={"openai": Upstream(upstream.url)}),
                      tool_filter=shared_filter)  # fmt: skip
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": WEATHER}], "stream": stream}
    ).encode()
    with serving(gateway.app) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            client.sendall(head.encode() + body)
            assert upstream.asked.wait(WAIT_SECONDS)
        # The client is gone: the gateway hangs up on the upstream.
        assert upstream.closed.wait(WAIT_SECONDS)
        counted = 'status="499"} 1.0'
        deadline = time.monotonic() + WAIT_SECONDS
        while counted not in gateway.metrics.render().decode():  # counted just after
            assert time.monotonic() < deadline
            time.sleep(0.01)


class _Records(logging.Handler):
    """Keeps the records logged to it."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _sink() -> str:
    """An upstream on loopback that reads what it is sent and answers nothing (no server of
    its own to log the request cut short); its URL."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server, server.accept()[0] as connection:
            connection.settimeout(2 * WAIT_SECONDS)
            while connection.recv(65536):  # b"" once the gateway closes its end
                pass

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/files"])
def test_a_client_gone_while_sending_its_body_is_counted_not_a_crash(
    shared_filter: ToolFilter, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = Gateway(GatewayConfig(upstreams={"openai": Upstream(_sink())}),
                      tool_filter=shared_filter)  # fmt: skip
    errors, uvicorn_log = _Records(), logging.getLogger("uvicorn.error")
    caplog.set_level(logging.INFO, logger="toolgate.gateway")
    with serving(gateway.app) as base:
        uvicorn_log.addHandler(errors)  # after uvicorn set its logging up, which would drop it
        try:
            port = int(base.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port)) as client:
                head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                head += "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                client.sendall(head.encode() + b'{"model": "m", ')  # and leaves mid-body
            counted = 'status="499"} 1.0'
            deadline = time.monotonic() + WAIT_SECONDS
            while counted not in gateway.metrics.render().decode():
                assert time.monotonic() < deadline
                time.sleep(0.01)
        finally:
            uvicorn_log.removeHandler(errors)
    assert [r.getMessage() for r in errors.records if r.levelno >= logging.ERROR] == []
    gone = f"POST {path!r} 499: the client went away before its answer began"
    assert any(r.getMessage().startswith(gone) for r in caplog.records)

"""The gateway stops promptly when told to: a request still indexing a new tools array or a
stream still running gets the graceful timeout, then is cut, and the process exits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import CountingEmbedder
from tests.gateway.fake_upstream import FakeUpstream, Script, serving
from tests.gateway.test_client_gone import WAIT_SECONDS, SilentUpstream
from tests.gateway.test_filter import WEATHER, chat_tools
from toolgate.embedding.embedder import Embedder
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, Upstream
from toolgate.gateway.filter import ToolFilter
from toolgate.gateway.learning import Lesson

USER = [{"role": "user", "content": WEATHER}]


def test_a_request_stuck_indexing_does_not_hold_the_shutdown(
    fake: tuple[FakeUpstream, str], embedder: Embedder
) -> None:
    _upstream, url = fake
    release = threading.Event()
    held = CountingEmbedder(embedder, hold=release)  # indexing waits until released
    tool_filter = ToolFilter(embedder=held, cache=None)
    gateway = Gateway(GatewayConfig(upstreams={"openai": Upstream(url)}), tool_filter=tool_filter)
    answers: list[Any] = []
    try:
        with serving(gateway.app, timeout_graceful_shutdown=1) as base:
            body = {"messages": USER, "tools": chat_tools()}
            client = threading.Thread(target=lambda: answers.append(_post(base, body)))
            client.start()
            deadline = time.monotonic() + 60
            while held.batch_texts == 0:  # the request is indexing now
                assert time.monotonic() < deadline
                time.sleep(0.01)
        # serving() raised if the server had not stopped; the indexing is still held.
        assert not release.is_set()
        client.join(60)
        assert answers
        assert answers[0] == 503  # cut, not answered
    finally:
        release.set()
    # The abandoned build goes on in its thread and ends (this waits for it): its index serves.
    assert "get_weather" in tool_filter.filter({"messages": USER, "tools": chat_tools()}).kept
    assert held.embedded_texts == held.batch_texts > 0


@pytest.mark.parametrize(
    ("path", "headers", "shape"),
    [
        ("/v1/chat/completions", {}, "openai"),  # filtered, waiting for the upstream
        ("/v1/embeddings", {}, "openai"),  # passed through
        ("/v1/messages", {"anthropic-version": "2023-06-01"}, "anthropic"),
    ],
)
def test_a_request_cut_as_the_gateway_stops_gets_its_providers_503(
    shared_filter: ToolFilter, path: str, headers: dict[str, str], shape: str
) -> None:
    upstream = SilentUpstream(headers=False)  # takes the request, never answers
    config = GatewayConfig(
        upstreams={"openai": Upstream(upstream.url), "anthropic": Upstream(upstream.url)}
    )
    gateway = Gateway(config, tool_filter=shared_filter)
    answers: list[httpx.Response] = []
    body = {"model": "m", "max_tokens": 8, "messages": USER, "tools": chat_tools()}
    with serving(gateway.app, timeout_graceful_shutdown=1) as base:
        client = threading.Thread(
            target=lambda: answers.append(
                httpx.post(base + path, json=body, headers=headers, timeout=WAIT_SECONDS)
            )
        )
        client.start()
        assert upstream.asked.wait(WAIT_SECONDS)
    client.join(WAIT_SECONDS)
    # Not uvicorn's plain-text 500: an error the client's SDK reads, and retries (the
    # gateway is going away, not failing: another replica, or this one restarted, answers).
    (answer,) = answers
    assert answer.status_code == 503
    assert answer.headers["x-toolgate-error"] == "shutting_down"
    assert "x-should-retry" not in answer.headers
    error = answer.json()
    if shape == "anthropic":
        assert error["type"] == "error"
        assert "stopped" in error["error"]["message"]
    else:
        assert "stopped" in error["error"]["message"]
    assert 'status="503"} 1.0' in gateway.metrics.render().decode()


def _post(base: str, body: dict[str, Any]) -> int | str:
    try:
        return httpx.post(base + "/v1/chat/completions", json=body, timeout=120).status_code
    except httpx.HTTPError as exc:
        return type(exc).__name__


def test_sigterm_stops_the_gateway_process_with_a_stream_open(
    fake: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    upstream, url = fake
    upstream.script = Script(delay=30.0)  # a stream that would run for minutes
    port = _free_port()
    command = [
        sys.executable, "-m", "toolgate", "gateway", "--listen", f"127.0.0.1:{port}",
        "--upstream", f"openai={url}", "--store", str(tmp_path / "store"),
        "--graceful-timeout", "1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as gateway:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(base, gateway)
        body = {"messages": USER, "tools": chat_tools(), "stream": True}
        events: list[bytes] = []
        with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            chunks = r.iter_raw()
            events.append(next(chunks))  # the stream is open and under way
            started = time.monotonic()
            gateway.send_signal(signal.SIGTERM)
            with pytest.raises(httpx.HTTPError):  # cut, before the stream would end
                events.extend(chunks)
            assert gateway.wait(timeout=60) in (0, -signal.SIGTERM)
        stopped = time.monotonic() - started
        log = gateway.stderr.read() if gateway.stderr else ""
    assert stopped < 60
    assert "timeout graceful shutdown exceeded" in log
    # The stream cut when the grace ended is no error with a traceback (uvicorn's line
    # above says what was cut).
    assert "Traceback" not in log
    # The gateway's own line for the request, as uvicorn writes its lines (its access log is
    # off: this is the only one a request gets).
    assert "INFO:     POST '/v1/chat/completions' 200 " in log


def test_ctrl_c_stops_the_gateway_process_cleanly(
    fake: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    _upstream, url = fake
    port = _free_port()
    command = [
        sys.executable, "-m", "toolgate", "gateway", "--listen", f"127.0.0.1:{port}",
        "--upstream", f"openai={url}", "--store", str(tmp_path / "store"),
    ]  # fmt: skip
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as gateway:
        _wait_healthy(f"http://127.0.0.1:{port}", gateway)
        gateway.send_signal(signal.SIGINT)
        # The server handles SIGINT itself and shuts down: a clean stop, not an interruption.
        assert gateway.wait(timeout=60) == 0
        log = gateway.stderr.read() if gateway.stderr else ""
    assert "Application shutdown complete" in log
    assert "interrupted" not in log


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(base: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, "the gateway exited"
        try:
            if httpx.get(base + "/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("the gateway did not become healthy")


class _Recording:
    """A router that records the queries it learns from."""

    def __init__(self) -> None:
        self.learned: list[str] = []

    def feedback(self, query: str, *, used: list[str]) -> int:
        self.learned.append(query)
        return len(used)


def _idle_gateway() -> Gateway:
    """A gateway no request reaches: lessons are handed to its queue directly."""
    config = GatewayConfig(upstreams={"openai": Upstream("http://127.0.0.1:9")})
    return Gateway(config, tool_filter=ToolFilter(cache=None))


def _teach(gateway: Gateway, router: _Recording, *queries: str) -> list[bool]:
    return [gateway.learning.submit(Lesson(router, q, "default/t")) for q in queries]  # type: ignore[arg-type]


def test_the_lessons_waiting_are_learned_before_the_gateway_stops() -> None:
    gateway = _idle_gateway()
    router = _Recording()
    with serving(gateway.app):
        queue = gateway.learning
        assert _teach(gateway, router, "a", "b", "c") == [True, True, True]
    # Stopped: every lesson learned, the queue closed (no worker left waiting).
    assert router.learned == ["a", "b", "c"]
    assert not queue.submit(Lesson(router, "late", "default/t"))  # type: ignore[arg-type]


def test_a_gateway_served_again_learns_again() -> None:
    gateway = _idle_gateway()
    router = _Recording()
    for run in ("first", "second"):
        with serving(gateway.app):
            assert _teach(gateway, router, run) == [True]
    assert router.learned == ["first", "second"]
    dropped = gateway.metrics.registry.get_sample_value("toolgate_gateway_lessons_dropped_total")
    assert dropped == 0

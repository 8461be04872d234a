"""An upstream that stalls once its answer has begun: a whole answer it stops sending is the
same 504 as one that never began, and every such failure is counted in the upstream errors,
whether the answer was checked or passed on unread; one passed on that breaks off is cut for
the client, and logged in one line."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.gateway.fake_upstream import serving
from tests.gateway.test_client_gone import WAIT_SECONDS, SilentUpstream
from tests.gateway.test_filter import WEATHER
from tests.gateway.test_shutdown import _free_port, _wait_healthy
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, Upstream
from toolgate.gateway.filter import ToolFilter

# The gateway's upstream timeout in these tests: the upstream stalls past it.
TIMEOUT = 0.5
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": WEATHER}]}).encode()


def _stalled_gateway(shared_filter: ToolFilter, upstream: SilentUpstream) -> Gateway:
    config = GatewayConfig(upstreams={"openai": Upstream(upstream.url)}, timeout=TIMEOUT)
    return Gateway(config, tool_filter=shared_filter)


def _timeouts(gateway: Gateway) -> float:
    """The upstream timeouts the gateway counted."""
    labels = {"upstream": "openai", "kind": "timeout"}
    sample = "toolgate_gateway_upstream_errors_total"
    return gateway.metrics.registry.get_sample_value(sample, labels) or 0.0


def test_a_whole_answer_stalled_mid_body_is_a_504_counted(shared_filter: ToolFilter) -> None:
    upstream = SilentUpstream(headers=True)  # a status line, headers, one byte of 1,000
    gateway = _stalled_gateway(shared_filter, upstream)
    with serving(gateway.app) as base:
        answer = httpx.post(base + "/v1/chat/completions", content=BODY, timeout=WAIT_SECONDS)
    assert answer.status_code == 504
    assert answer.headers["x-toolgate-error"] == "timeout"
    assert "did not answer in time (ReadTimeout)" in answer.json()["error"]["message"]
    assert _timeouts(gateway) == 1


def test_an_answer_passed_on_that_stalls_mid_body_is_cut_and_counted(
    shared_filter: ToolFilter,
) -> None:
    upstream = SilentUpstream(headers=True)
    gateway = _stalled_gateway(shared_filter, upstream)
    # Its status went out with the first byte: the client learns of the cut by the
    # connection closing short of the length.
    with serving(gateway.app) as base, pytest.raises(httpx.RemoteProtocolError):
        httpx.post(base + "/v1/embeddings", content=BODY, timeout=WAIT_SECONDS)
    assert _timeouts(gateway) == 1


def test_the_line_of_an_answer_cut_says_why_and_its_traceback_is_at_debug(
    shared_filter: ToolFilter, caplog: pytest.LogCaptureFixture
) -> None:
    # The server's traceback of the cut is dropped (NotCut): the gateway's line is all an
    # operator has, so it carries the upstream error's message, not its type alone.
    caplog.set_level(logging.DEBUG, logger="toolgate.gateway")
    upstream = SilentUpstream(headers=True, hang_up=True)
    gateway = _stalled_gateway(shared_filter, upstream)
    with serving(gateway.app) as base, pytest.raises(httpx.RemoteProtocolError):
        httpx.post(base + "/v1/embeddings", content=BODY, timeout=WAIT_SECONDS)
    traced = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert len(traced) == 1
    cause = traced[0].exc_info[1] if traced[0].exc_info else None
    assert isinstance(cause, httpx.RemoteProtocolError)
    assert str(cause)
    cut = [r.getMessage() for r in caplog.records if "passed on cut" in r.getMessage()]
    assert cut == [f"the upstream's answer broke off (RemoteProtocolError), passed on cut: {cause}"]


def test_an_answer_passed_on_that_breaks_off_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    upstream = SilentUpstream(headers=True, hang_up=True)  # 1 byte of 1,000, then it hangs up
    port = _free_port()
    command = [
        sys.executable, "-m", "toolgate", "gateway", "--listen", f"127.0.0.1:{port}",
        "--upstream", f"openai={upstream.url}", "--store", str(tmp_path / "store"),
    ]  # fmt: skip
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as gateway:
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(base, gateway)
            # The client learns of the cut as it should: its connection closed short.
            with pytest.raises(httpx.RemoteProtocolError):
                httpx.post(base + "/v1/embeddings", content=BODY, timeout=WAIT_SECONDS)
        finally:
            gateway.terminate()
            gateway.wait(timeout=60)
        log = gateway.stderr.read() if gateway.stderr else ""
    assert "the upstream's answer broke off (RemoteProtocolError), passed on cut" in log
    assert "Traceback" not in log
    assert "Exception in ASGI application" not in log

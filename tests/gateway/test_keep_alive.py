"""Idle keep-alive connections on both sides of the gateway: it never closes one a client may
still reuse, and never reuses one an upstream may be closing. Either way round, a request
sent into a connection at the moment its other end closes it fails (the one load-test
failure in 600 requests)."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.gateway.conftest import start
from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.test_shutdown import _free_port, _wait_healthy
from toolgate.gateway.filter import ToolFilter

# httpx (under the OpenAI, Anthropic and Google SDKs) keeps an idle connection 5 s, and so
# does uvicorn (a common upstream server); a little past that, so either would have closed.
PAST_CLIENTS_IDLE = 5.5
# Longer than the gateway keeps an idle upstream connection, shorter than upstreams do.
PAST_GATEWAYS_IDLE = 4.5


def test_the_gateway_keeps_an_idle_client_connection_past_the_clients_own_timeout(
    fake: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    _upstream, url = fake
    port = _free_port()
    command = [
        sys.executable, "-m", "toolgate", "gateway", "--listen", f"127.0.0.1:{port}",
        "--upstream", f"openai={url}", "--store", str(tmp_path / "store"),
    ]  # fmt: skip
    with subprocess.Popen(command, stderr=subprocess.DEVNULL, text=True) as gateway:
        try:
            _wait_healthy(f"http://127.0.0.1:{port}", gateway)
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", "/v1/models")
            assert connection.getresponse().read()
            sock = connection.sock
            time.sleep(PAST_CLIENTS_IDLE)
            # On the same connection: closed by the gateway, this raises RemoteDisconnected.
            connection.request("GET", "/v1/models")
            answer = connection.getresponse()
            assert connection.sock is sock
            assert (answer.status, answer.read()) == (200, b'{"object":"list","data":'
                                                           b'[{"id":"fake-model"}]}')  # fmt: skip
            connection.close()
        finally:
            gateway.terminate()
            gateway.wait(60)


def test_the_gateway_drops_an_idle_upstream_connection_before_the_upstream_does(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter
) -> None:
    upstream, _url = fake
    with start(fake, shared_filter) as served, httpx.Client(base_url=served.url) as client:
        for pause in (0.0, 0.2, PAST_GATEWAYS_IDLE):
            time.sleep(pause)
            assert client.get("/v1/models").status_code == 200
    ports = [received.port for received in upstream.received]
    assert ports[0] == ports[1] != ports[2]  # reused while fresh, a new one after 4.5 s idle

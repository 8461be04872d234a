"""The gateway as ``toolgate gateway`` serves it: the command line's options reach the
server, and idle keep-alive connections on both sides. It never closes one a client may still
reuse, and never reuses one an upstream may be closing: either way round, a request sent into
a connection at the moment its other end closes it fails (the one load-test failure in 600
requests)."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.conftest import start
from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.test_filter import SPECS, WEATHER, chat_tools
from tests.gateway.test_shutdown import _free_port, _wait_healthy
from toolgate.gateway.filter import ToolFilter

# httpx (under the OpenAI, Anthropic and Google SDKs) keeps an idle connection 5 s, and so
# does uvicorn (a common upstream server); a little past that, so either would have closed.
PAST_CLIENTS_IDLE = 5.5
# Longer than the gateway keeps an idle upstream connection, shorter than upstreams do.
PAST_GATEWAYS_IDLE = 4.5


@pytest.fixture(scope="module")
def command_line(
    fake: tuple[FakeUpstream, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """``toolgate gateway`` in its own process, its config asking for 5 tools and enforcing
    the tools sent, ``--top-k 2`` capping it; yields its port."""
    _upstream, url = fake
    folder = tmp_path_factory.mktemp("command-line")
    (folder / "gateway.yaml").write_text("top_k: 5\npolicy: enforce\n")
    port = _free_port()
    command = [
        sys.executable, "-m", "toolgate", "gateway", "--listen", f"127.0.0.1:{port}",
        "--upstream", f"openai={url}", "--store", str(folder / "store"), "--top-k", "2",
        "--config", str(folder / "gateway.yaml"),
    ]  # fmt: skip
    with subprocess.Popen(command, stderr=subprocess.DEVNULL, text=True) as gateway:
        try:
            _wait_healthy(f"http://127.0.0.1:{port}", gateway)
            yield str(port)
        finally:
            gateway.terminate()
            gateway.wait(60)


def test_the_command_lines_top_k_caps_its_config_file(
    fake: tuple[FakeUpstream, str], command_line: str
) -> None:
    upstream, _url = fake
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{command_line}/v1", api_key="k")
    messages: Any = [{"role": "user", "content": WEATHER}]
    tools: Any = chat_tools()
    answer = client.chat.completions.with_raw_response.create(
        model="m", messages=messages, tools=tools
    )
    assert answer.headers["x-toolgate-tools"] == f"2/{len(SPECS)}"
    assert len(upstream.received[-1].body["tools"]) == 2
    upstream.script.tool = "send_email"  # not among the 2 sent: the config's enforce blocks it
    with pytest.raises(openai.APIStatusError, match="which the request did not offer it"):
        client.chat.completions.create(model="m", messages=messages, tools=tools)


def test_the_gateway_keeps_an_idle_client_connection_past_the_clients_own_timeout(
    command_line: str,
) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", int(command_line), timeout=30)
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

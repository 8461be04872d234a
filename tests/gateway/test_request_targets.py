"""A request goes upstream only to its upstream's origin, on the path it was routed as: a
request target that is no path, or one with ``.`` or ``..`` segments, is refused, never
resolved elsewhere. HTTP clients resolve such targets before they send them, so these tests
write their requests on a socket; uvicorn's h11 parser passes a target on as written."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.gateway.fake_upstream import FakeUpstream, serving
from tests.gateway.test_filter import WEATHER, chat_tools
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, RouteConfig, Upstream
from toolgate.gateway.filter import ToolFilter

BODY = {"model": "m", "messages": [{"role": "user", "content": WEATHER}], "tools": chat_tools()}


def _send(base: str, method: str, target: bytes, body: Any = None) -> tuple[int, Any]:
    """The status and JSON body of the answer to ``method target``, written as it is."""
    port = int(base.rsplit(":", 1)[1])
    content = b"" if body is None else json.dumps(body).encode()
    head = (
        f"{method} ".encode() + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(content)}\r\n\r\n".encode()
    )
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head + content)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload) if payload else None


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[tuple[FakeUpstream, str]]:
    """A server that is no upstream of the gateway's: nothing may reach it."""
    other = FakeUpstream()
    with serving(other.app) as url:
        yield other, url


@pytest.fixture
def held_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("UPSTREAM_KEY", "sk-upstream-secret")
    return "UPSTREAM_KEY"


def test_a_target_that_is_no_path_never_sends_the_key_to_another_host(
    fake: tuple[FakeUpstream, str],
    elsewhere: tuple[FakeUpstream, str],
    shared_filter: ToolFilter,
    held_key: str,
) -> None:
    upstream, url = fake
    other, other_url = elsewhere
    config = GatewayConfig(upstreams={"openai": Upstream(url, held_key)})
    host = other_url.removeprefix("http://").encode()
    with serving(Gateway(config, tool_filter=shared_filter).app, http="h11") as base:
        for target in (b"%2F@" + host + b"/v1/models", b"%2f@" + host + b"/v1/models"):
            status, answer = _send(base, "GET", target)
            assert status == 400
            assert answer["error"]["code"] == "bad_path"
            assert "must be a path beginning with '/'" in answer["error"]["message"]
    assert other.received == []
    assert upstream.received == []


def test_a_path_with_dot_segments_is_refused_not_resolved(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter, held_key: str
) -> None:
    upstream, url = fake
    # An origin with a path of its own (a team's prefix on a shared proxy), and a deny list
    # the filtered endpoint holds.
    config = GatewayConfig(
        upstreams={"openai": Upstream(url + "/team-a", held_key)},
        default=RouteConfig(deny=("get_weather",)),
    )
    refused = (
        b"/x/../v1/chat/completions",  # resolved by the HTTP client: filtering passed by
        b"/v1/./chat/completions",
        b"/x/%2e%2e/v1/chat/completions",  # resolved by the upstream
        b"/x%2F..%2Fv1/chat/completions",
        b"/x\\..\\v1/chat/completions",  # a backslash some servers take for a slash
        b"/../team-b/v1/chat/completions",  # out of the origin's path, with its key
        b"/v1/chat/completions/..",
    )
    with serving(Gateway(config, tool_filter=shared_filter).app, http="h11") as base:
        for target in refused:
            status, answer = _send(base, "POST", target, BODY)
            assert (target, status) == (target, 400)
            assert answer["error"]["code"] == "bad_path"
            assert "'.' or '..' segment" in answer["error"]["message"]
        assert upstream.received == []
        # Dots within a segment are no dot segments.
        status, _ = _send(base, "GET", b"/v1/files/a..b/.c")
        assert status == 200
        assert upstream.received[-1].path == "/team-a/v1/files/a..b/.c"
        status, _ = _send(base, "POST", b"/v1/chat/completions", BODY)
        assert status == 200
        sent = [t["function"]["name"] for t in upstream.received[-1].body["tools"]]
        assert sent
        assert "get_weather" not in sent


def test_a_trailing_slash_is_filtered_as_the_endpoint_and_sent_without_it(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter
) -> None:
    upstream, url = fake
    # The route written for the endpoint holds for it with a slash too: its deny list first.
    config = GatewayConfig(
        upstreams={"openai": Upstream(url)},
        routes=(RouteConfig(path="/v1/chat/completions", deny=("get_weather",), top_k=2),),
    )
    with serving(Gateway(config, tool_filter=shared_filter).app) as base:
        for path in ("/v1/chat/completions/", "/v1/chat/completions//"):
            answer = httpx.post(base + path, json=BODY, timeout=60)
            assert answer.status_code == 200
            assert answer.headers["x-toolgate-tools"] == f"2/{len(BODY['tools'])}"
            received = upstream.received[-1]
            # Sent to the endpoint itself: an upstream redirecting the slashed path (a
            # FastAPI or Gin server's 307) would send the client there around the gateway.
            assert received.path == "/v1/chat/completions"
            sent = [t["function"]["name"] for t in received.body["tools"]]
            assert len(sent) == 2
            assert "get_weather" not in sent


def test_a_model_call_elsewhere_with_a_trailing_slash_is_flagged(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter
) -> None:
    upstream, url = fake
    config = GatewayConfig(upstreams={"openai": Upstream(url)})
    with serving(Gateway(config, tool_filter=shared_filter).app) as base:
        answer = httpx.post(base + "/v2/chat/completions/", json=BODY, timeout=60)
    assert answer.headers["x-toolgate-unfiltered"] == "1"
    assert upstream.received[-1].path == "/v2/chat/completions/"  # a passthrough: as written


def test_an_escaped_trailing_slash_is_sent_to_the_endpoint_it_was_routed_as(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter
) -> None:
    upstream, url = fake
    config = GatewayConfig(upstreams={"openai": Upstream(url)})
    with serving(Gateway(config, tool_filter=shared_filter).app) as base:
        # Decoded, each is the endpoint with a trailing slash: filtered as the endpoint, so
        # sent to it, not to a path an upstream decodes to the slashed one and redirects.
        for target in (b"/v1/chat/completions%2F", b"/v1/chat/completions%2f/%2F"):
            status, _ = _send(base, "POST", target, BODY)
            assert status == 200
            assert upstream.received[-1].raw_path == b"/v1/chat/completions"

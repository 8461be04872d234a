"""``toolgate mcp-proxy --http``: the proxy over Streamable HTTP, with a bearer token."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.testclient import TestClient

from tests.fixtures.mcp import (
    PID_WRITING_UPSTREAM,
    answer_folder,
    run,
    use_notes_through_proxy,
)
from toolgate import InvalidInputError
from toolgate.cli.parser import main
from toolgate.integrations.mcp.http import (
    GRACE_SECONDS,
    MCP_PATH,
    HttpListener,
    _BearerGate,
    proxy_app,
)
from toolgate.integrations.mcp.metrics import ProxyMetrics

TOKEN = "s3cret-token"


@contextmanager
def running_proxy(
    tmp_path: Path, *extra: str, address: str = "127.0.0.1:0"
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """A proxy process on a free port in front of the notes server: the process, its URL,
    and the file the upstream writes its pid to. Killed on the way out, if still running."""
    upstream = tmp_path / "notes_server.py"
    upstream.write_text(textwrap.dedent(PID_WRITING_UPSTREAM), encoding="utf-8")
    pid_file = tmp_path / "upstream.pid"
    notes = {"command": sys.executable, "args": [str(upstream), str(pid_file)]}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"notes": notes}}), encoding="utf-8")
    argv = [sys.executable, "-m", "toolgate", "mcp-proxy", "--config", str(config)]
    process = subprocess.Popen(
        [*argv, "--top-k", "1", "--http", address, *extra],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "TG_TOKEN": TOKEN},
    )
    assert process.stderr is not None
    try:
        for raw in process.stderr:  # the proxy names its URL once it listens
            if match := re.search(r"serving on (http://\S+)", raw.decode()):
                yield process, match.group(1), pid_file
                return
        raise AssertionError(f"the proxy never said where it serves (exit {process.wait()})")
    finally:
        process.kill()
        process.wait()
        process.stderr.close()


@asynccontextmanager
async def with_the_token(url: str) -> AsyncIterator[tuple[httpx2.AsyncClient, Client]]:
    """An MCP client of the proxy at ``url`` sending the token, and the HTTP client under it."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(
            streamable_http_client(url, http_client=http), elicitation_callback=answer_folder
        ) as client,
    ):
        yield http, client


def stops_with_its_upstream(process: subprocess.Popen[bytes], pid_file: Path) -> None:
    """SIGTERM ``process``: it exits 0, and the upstream whose pid is in ``pid_file`` too."""
    upstream_pid = int(pid_file.read_text())
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(upstream_pid, 0)


def test_a_normal_stop_over_http_prints_only_the_stop_line(tmp_path: Path) -> None:
    async def use(url: str) -> None:
        with anyio.fail_after(60):
            async with with_the_token(url) as (_, client):
                await use_notes_through_proxy(client, "milk")

    with running_proxy(tmp_path, "--auth-token-env", "TG_TOKEN") as (process, url, pid_file):
        run(partial(use, url))
        stops_with_its_upstream(process, pid_file)
        assert process.stderr is not None
        rest = process.stderr.read().decode()
    assert rest == f"toolgate mcp-proxy: stopping; requests under way have {GRACE_SECONDS:g} s\n"


def test_the_proxy_serves_over_http_to_clients_with_the_token(tmp_path: Path) -> None:
    async def main_(url: str) -> None:
        base = url.removesuffix("/mcp")
        with anyio.fail_after(60):
            # Without the token: refused before MCP sees the request.
            async with httpx2.AsyncClient() as http:
                refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1})
                # The health probe needs none, and tells nothing else; the metrics need it.
                health = await http.get(f"{base}/healthz")
                assert (health.status_code, health.json()) == (200, {"status": "ok"})
                assert (await http.get(f"{base}/metrics")).status_code == 401
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == "Bearer"

            async with with_the_token(url) as (http, client):
                await use_notes_through_proxy(client, "milk")
                metrics = (await http.get(f"{base}/metrics")).text
            assert 'toolgate_upstream_up{server="notes"} 1.0' in metrics
            assert "toolgate_upstream_tools 3.0" in metrics
            assert 'toolgate_searches_total{outcome="ok"} 1.0' in metrics
            # delete_note, then archive_notes: both answered by the upstream.
            calls = re.search(
                r'toolgate_tool_calls_total\{outcome="ok",server="notes"\} (\S+)', metrics
            )
            assert calls is not None, metrics
            assert float(calls.group(1)) >= 2

    with running_proxy(tmp_path, "--auth-token-env", "TG_TOKEN") as (process, url, pid_file):
        run(partial(main_, url))
        stops_with_its_upstream(process, pid_file)  # a graceful stop, upstreams closed after


@pytest.mark.parametrize(
    ("address", "token", "open_to_all", "message"),
    [
        ("8765", None, False, "--http takes HOST:PORT"),
        ("localhost:http", None, False, "--http takes HOST:PORT"),
        ("127.0.0.1:70000", None, False, "--http takes HOST:PORT"),
        ("0.0.0.0:8765", None, False, "serving on 0.0.0.0 without a token lets anyone"),
        ("proxy.internal:8765", None, False, "without a token"),  # a name may resolve anywhere
        ("[::1]:8765", "  ", False, "the bearer token is empty"),
        ("127.0.0.1:\u00b2", None, False, "--http takes HOST:PORT"),  # a digit, not ASCII
        ("[::1:8765", None, False, "an IPv6 address goes in brackets"),
        ("::1:8765", None, False, "an IPv6 address goes in brackets"),
    ],
)
def test_a_bad_listener_is_named(
    address: str, token: str | None, open_to_all: bool, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        HttpListener.parse(address, token=token, open_to_all=open_to_all)


def test_a_listener_repr_leaves_its_token_out() -> None:
    # A traceback's locals (Sentry, rich) and debug logs show the repr.
    listener = HttpListener.parse("0.0.0.0:80", token="s3cr3t-bearer", open_to_all=False)
    assert "s3cr3t" not in repr(listener)
    assert "0.0.0.0" in repr(listener)


def test_listeners_parse() -> None:
    assert HttpListener.parse(":8765", token=None, open_to_all=False) == HttpListener()
    ipv6 = HttpListener.parse("[::1]:9000", token=None, open_to_all=False)
    assert (ipv6.host, ipv6.port, ipv6.url) == ("::1", 9000, "http://[::1]:9000/mcp")
    shared = HttpListener.parse("0.0.0.0:80", token="t", open_to_all=False)
    assert (shared.host, shared.token) == ("0.0.0.0", "t")
    assert HttpListener.parse("0.0.0.0:80", token=None, open_to_all=True).token is None


def test_the_token_flags_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}), encoding="utf-8")
    proxy = ["mcp-proxy", "--config", str(config)]
    monkeypatch.delenv("TG_UNSET", raising=False)
    assert main([*proxy, "--no-auth"]) == 2
    assert "--auth-token-env, --no-auth," in capsys.readouterr().err
    assert main([*proxy, "--http", ":0", "--auth-token-env", "TG_UNSET"]) == 2
    assert "--auth-token-env: TG_UNSET is not set" in capsys.readouterr().err
    # A router setting (--set) is checked before any upstream starts, as these are.
    assert main([*proxy, "--set", "server_weight=-1"]) == 2
    assert "server_weight must be a finite number >= 0, got -1" in capsys.readouterr().err


def _served_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, Any]]:
    """A one-server config, and what ``toolgate mcp-proxy`` passes to ``serve`` (which no
    longer starts anything): filled in as the command runs."""
    from toolgate.integrations.mcp import serve as serving

    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}), encoding="utf-8")
    seen: dict[str, Any] = {}

    async def fake_serve(servers: Any, **options: Any) -> None:
        seen.update(options)

    monkeypatch.setattr(serving, "serve", fake_serve)
    return config, seen


def test_router_settings_reach_the_proxys_router(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, seen = _served_options(tmp_path, monkeypatch)
    argv = ["mcp-proxy", "--config", str(config), "--set", "server_weight=0.35"]
    assert main([*argv, "--set", "clause_slots=1"]) == 0
    assert (seen["config"].server_weight, seen["config"].clause_slots) == (0.35, 1)


def test_the_tokens_surrounding_whitespace_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A secret file's last newline: no client could send it, so every request was a 401.
    config, seen = _served_options(tmp_path, monkeypatch)
    monkeypatch.setenv("TG_TOKEN", "tg-secret\n")
    argv = ["mcp-proxy", "--config", str(config), "--http", ":0", "--auth-token-env", "TG_TOKEN"]
    assert main(argv) == 0
    assert seen["http"].token == "tg-secret"
    monkeypatch.setenv("TG_TOKEN", "\n")
    assert main(argv) == 2
    assert "--auth-token-env: TG_TOKEN holds only whitespace" in capsys.readouterr().err


def test_a_port_in_use_is_named_before_any_upstream_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "started"
    starts = {"command": sys.executable, "args": ["-c", f"open({str(marker)!r}, 'w')"]}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": starts}}), encoding="utf-8")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        argv = ["mcp-proxy", "--config", str(config), "--http", f"127.0.0.1:{port}"]
        assert main(argv) == 2
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in capsys.readouterr().err
    assert not marker.exists()


def test_connections_are_accepted_without_nagle() -> None:
    # A response written in two parts would otherwise wait for the client's delayed ACK.
    listener = HttpListener.parse("127.0.0.1:0", token=None, open_to_all=False)
    with listener.bind() as server, socket.create_connection(server.getsockname()[:2]):
        accepted, _ = server.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def _answer(
    gate: _BearerGate, method: str, *authorization: bytes, headers: dict[str, bytes] | None = None
) -> int:
    """The status ``gate`` answers a request with these ``Authorization`` headers (and
    ``headers``)."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    gate.app = app
    raw = [(b"authorization", value) for value in authorization]
    raw += [(name.encode(), value) for name, value in (headers or {}).items()]
    await gate({"type": "http", "method": method, "headers": raw}, receive, send)
    return int(sent[0]["status"])


def test_the_token_gate_reads_the_header_as_rfc_7235_has_it() -> None:
    async def main_() -> None:
        gate = _BearerGate(None, TOKEN)  # type: ignore[arg-type]
        token = TOKEN.encode()
        assert await _answer(gate, "POST", b"Bearer " + token) == 200
        assert await _answer(gate, "POST", b"bearer " + token) == 200  # any case
        assert await _answer(gate, "POST", b"BEARER  " + token + b" ") == 200
        assert await _answer(gate, "POST", b"Bearer wrong") == 401
        assert await _answer(gate, "POST", b"Basic " + token) == 401
        assert await _answer(gate, "POST") == 401
        # Two headers: which one counts is not for the proxy to guess.
        assert await _answer(gate, "POST", b"Bearer wrong", b"Bearer " + token) == 401
        assert await _answer(gate, "POST", b"Bearer " + token, b"Bearer wrong") == 401
        # A CORS preflight carries no token; an OPTIONS that is none needs it.
        preflight = {"origin": b"http://localhost:3000", "access-control-request-method": b"POST"}
        assert await _answer(gate, "OPTIONS", headers=preflight) == 200
        assert await _answer(gate, "OPTIONS") == 401
        assert await _answer(gate, "OPTIONS", headers={"origin": b"http://x"}) == 401

    run(main_)


def test_any_loopback_listener_checks_host_and_origin(tmp_path: Path) -> None:
    # The SDK checks them by itself on 127.0.0.1, localhost and ::1 only.
    with running_proxy(tmp_path, address="127.0.0.2:0") as (_process, url, _pid_file):
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        with httpx2.Client() as http:
            foreign_host = http.post(url, json=body, headers={"Host": "evil.example"})
            assert foreign_host.status_code == 421
            assert "Host 'evil.example' is not a name" in foreign_host.json()["error"]
            foreign_origin = http.post(url, json=body, headers={"Origin": "http://evil.example"})
            assert foreign_origin.status_code == 403
            assert "'http://evil.example' is not allowed" in foreign_origin.json()["error"]


def test_the_browser_options_reach_a_proxy_off_loopback_without_a_token(tmp_path: Path) -> None:
    options = ["--no-auth", "--allow-origin", "http://localhost:3000"]
    options += ["--allow-host", "proxy.internal"]
    with running_proxy(tmp_path, *options, address="0.0.0.0:0") as (_process, url, _pid_file):
        port = url.rsplit(":", 1)[1].removesuffix("/mcp")
        local = f"http://127.0.0.1:{port}/mcp"
        named = {"Host": f"proxy.internal:{port}", **MCP_HEADERS}
        with httpx2.Client(timeout=60) as http:
            page = {**named, "Origin": "http://localhost:3000"}
            admitted = http.post(local, json=INITIALIZE, headers=page)
            assert admitted.status_code == 200
            assert admitted.headers["access-control-allow-origin"] == "http://localhost:3000"
            other_page = {**named, "Origin": "http://evil.example"}
            assert http.post(local, json=INITIALIZE, headers=other_page).status_code == 403
            assert http.post(local, json=INITIALIZE, headers=MCP_HEADERS).status_code == 421


MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}},
}  # fmt: skip


@contextmanager
def proxy_client(listener: HttpListener, host: str = "127.0.0.1:8765") -> Iterator[TestClient]:
    """The proxy's HTTP app for ``listener`` (an MCP server with no tools behind it, and
    metrics), under a test client that sends ``Host: host``."""
    app = proxy_app(Server("test"), listener, metrics=ProxyMetrics())
    with TestClient(app, base_url=f"http://{host}") as client:
        yield client


@contextmanager
def handshake_session() -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A client of a local proxy, and the headers of the session it opened in the
    handshake-era (2025-06-18) transport."""
    listener = HttpListener.parse("127.0.0.1:8765", token=None, open_to_all=False)
    with proxy_client(listener) as client:
        opened = client.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
        session = {**MCP_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"]}
        session["mcp-protocol-version"] = "2025-06-18"
        yield client, session


def _open_listener(**options: Any) -> HttpListener:
    """A listener off loopback without a token (``--no-auth``)."""
    return HttpListener.parse("0.0.0.0:8765", token=None, open_to_all=True, **options)


def test_a_proxy_off_loopback_without_a_token_refuses_web_pages() -> None:
    with proxy_client(_open_listener(), host="evil.example:8765") as client:
        # Any name reaches it (clients there use names it cannot know)...
        assert client.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS).status_code == 200
        # ...but no web page does, whatever name it uses.
        page = {**MCP_HEADERS, "Origin": "http://evil.example:8765"}
        refused = client.post("/mcp", json=INITIALIZE, headers=page)
        assert refused.status_code == 403
        assert "origin 'http://evil.example:8765' is not allowed" in refused.json()["error"]
        assert client.get("/metrics", headers={"Origin": "http://10.0.0.9"}).status_code == 403


def test_allowed_hosts_restrict_a_proxy_off_loopback() -> None:
    listener = _open_listener(allow_hosts=["proxy.internal"])
    with proxy_client(listener, host="proxy.internal:8765") as client:
        assert client.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS).status_code == 200
        rebound = client.get("/metrics", headers={"Host": "evil.example:8765"})
        assert rebound.status_code == 421
        # The probe answers whatever name it is sent to (an orchestrator's is the pod's IP).
        assert client.get("/healthz", headers={"Host": "10.0.0.7:8765"}).status_code == 200


def test_a_rebound_name_cannot_read_a_loopback_proxys_metrics() -> None:
    # The SDK checked /mcp only: a page rebound to 127.0.0.1 read /metrics.
    listener = HttpListener.parse("127.0.0.1:8765", token=None, open_to_all=False)
    with proxy_client(listener, host="evil.example:8765") as client:
        assert client.get("/metrics").status_code == 421


def test_metrics_the_token_guards_answer_any_name_but_no_page() -> None:
    listener = HttpListener.parse(
        "0.0.0.0:8765", token=TOKEN, open_to_all=False, allow_hosts=["proxy.internal"]
    )
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with proxy_client(listener, host="10.0.0.7:8765") as client:  # a scrape by pod address
        assert client.get("/metrics", headers=bearer).status_code == 200
        assert client.get("/metrics").status_code == 401
        page = {**bearer, "Origin": "http://evil.example"}
        assert client.get("/metrics", headers=page).status_code == 403
        assert client.post("/mcp", json=INITIALIZE, headers=bearer).status_code == 421


@pytest.mark.parametrize("method", ["OPTIONS", "POST", "DELETE"])
def test_the_metrics_answer_get_and_head_only_and_with_the_token_only(method: str) -> None:
    listener = HttpListener.parse("127.0.0.1:8765", token=TOKEN, open_to_all=False)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with proxy_client(listener) as client:
        assert client.request(method, "/metrics").status_code == 401
        answer = client.request(method, "/metrics", headers=bearer)
        assert answer.status_code == 405
        assert answer.headers["allow"] == "GET, HEAD"
        assert client.head("/metrics", headers=bearer).status_code == 200


def test_a_web_page_with_the_token_is_refused_too() -> None:
    listener = HttpListener.parse("0.0.0.0:8765", token=TOKEN, open_to_all=False)
    bearer = {"Authorization": f"Bearer {TOKEN}", **MCP_HEADERS}
    with proxy_client(listener) as client:
        assert client.post("/mcp", json=INITIALIZE, headers=bearer).status_code == 200
        page = {**bearer, "Origin": "http://evil.example"}
        assert client.post("/mcp", json=INITIALIZE, headers=page).status_code == 403


def test_a_page_of_an_allowed_origin_may_preflight_and_read_the_answer() -> None:
    origin = "http://localhost:6274"
    listener = _open_listener(allow_origins=["http://localhost:*"])
    with proxy_client(listener) as client:
        preflight = client.options(
            "/mcp",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "content-type, mcp-protocol-version"},
        )  # fmt: skip
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == origin
        answer = client.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Origin": origin})
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == origin
        assert answer.headers["access-control-expose-headers"] == "*"  # mcp-session-id


def test_bad_browser_options_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}), encoding="utf-8")
    proxy = ["mcp-proxy", "--config", str(config)]
    assert main([*proxy, "--allow-origin", "http://localhost:3000"]) == 2
    assert "--allow-origin and --allow-host go with --http" in capsys.readouterr().err
    assert main([*proxy, "--http", ":0", "--allow-origin", "localhost:3000"]) == 2
    assert "--allow-origin: expected an origin, SCHEME://HOST" in capsys.readouterr().err
    assert main([*proxy, "--http", ":0", "--allow-host", "http://proxy.internal"]) == 2
    assert "--allow-host: a host is a name" in capsys.readouterr().err


def test_a_stop_ends_the_clients_event_streams(tmp_path: Path) -> None:
    ended_after: list[float] = []

    async def listen_then_stop(url: str, process: subprocess.Popen[bytes]) -> None:
        with anyio.fail_after(60):
            async with (
                httpx2.AsyncClient() as http,
                Client(
                    streamable_http_client(url, http_client=http),
                    elicitation_callback=answer_folder,
                ) as client,
                client.listen(tools_list_changed=True) as events,
            ):
                stopped = time.monotonic()
                process.send_signal(signal.SIGTERM)
                async for _event in events:  # ended by the proxy, gracefully
                    pass
                ended_after.append(time.monotonic() - stopped)

    with running_proxy(tmp_path) as (process, url, pid_file):
        run(partial(listen_then_stop, url, process))
        stops_with_its_upstream(process, pid_file)
        # The stream did not hold the stop for the whole grace period (timed from the signal:
        # connecting first can take seconds on a loaded machine).
        (elapsed,) = ended_after
        assert elapsed < GRACE_SECONDS


def test_a_request_whose_id_cannot_be_one_is_answered_with_an_error() -> None:
    # The SDK's handshake-era transport read such a request as a notification and answered
    # 202 with nothing: the client waited for an answer that never came.
    with handshake_session() as (client, session):
        for request_id in (None, 1.5, True):
            ping = {"jsonrpc": "2.0", "id": request_id, "method": "ping"}
            answer = client.post("/mcp", json=ping, headers=session)
            assert answer.status_code == 400
            assert answer.json()["id"] is None
            assert answer.json()["error"]["code"] == -32600
        # A body that does not say it is JSON is the SDK's to refuse, as it did.
        text = {**session, "content-type": "text/plain"}
        assert "Invalid Content-Type" in client.post("/mcp", content=b"[", headers=text).text
        # A batch is refused as invalid, as over stdio, not as invalid params.
        batch = client.post("/mcp", json=[{**ping, "id": 2}], headers=session)
        assert (batch.status_code, batch.json()["error"]["code"]) == (400, -32600)
        # What is a message still reaches the SDK, notifications included.
        notice = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert client.post("/mcp", json=notice, headers=session).status_code == 202
        # A notification with a null id (JSON-RPC 1.0's) too: nobody waits for an answer.
        old_style = {**notice, "id": None}
        assert client.post("/mcp", json=old_style, headers=session).status_code == 202
        pinged = client.post("/mcp", json={**ping, "id": 3}, headers=session)
        assert pinged.status_code == 200
        assert '"id":3' in pinged.text


def test_a_broken_answer_to_the_proxys_request_is_read_as_an_error_answering_it() -> None:
    # The SDK refused it (400) and dropped it, so the proxy's request waited until it timed
    # out; it now reaches the SDK as an error answering that request.
    with handshake_session() as (client, session):
        broken = {"jsonrpc": "2.0", "id": 7, "result": None}
        assert client.post("/mcp", json=broken, headers=session).status_code == 202


def test_a_body_declared_over_the_limit_is_refused_unread() -> None:
    # The proxy read up to the SDK's limit and a chunk of it (4 MiB and more, of each such
    # request) before the SDK refused it from its Content-Length alone.
    listener = HttpListener.parse("127.0.0.1:8765", token=None, open_to_all=False)
    app = proxy_app(Server("test"), listener)
    declared = str(DEFAULT_MAX_REQUEST_BODY_SIZE + 1).encode()
    headers = [
        (b"host", b"127.0.0.1:8765"),
        (b"content-type", b"application/json"),
        (b"content-length", declared),
    ]
    scope = {
        "type": "http", "method": "POST", "path": MCP_PATH, "raw_path": MCP_PATH.encode(),
        "query_string": b"", "headers": headers, "scheme": "http", "root_path": "",
        "server": ("127.0.0.1", 8765), "client": ("127.0.0.1", 50000), "http_version": "1.1",
    }  # fmt: skip
    read: list[int] = []
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        read.append(64 * 1024)
        return {"type": "http.request", "body": b" " * read[-1], "more_body": True}

    async def send(message: Any) -> None:
        sent.append(message)

    run(partial(app, scope, receive, send))
    assert sent[0]["status"] == 413
    assert sum(read) == 0

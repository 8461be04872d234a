"""The ``Host`` / ``Origin`` checks both HTTP servers make: what they admit, what they refuse
and how they say so, and the errors naming a bad allowed host or origin."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from toolgate.browser_guard import (
    BrowserGuard,
    BrowserPolicy,
    host_pattern,
    origin_pattern,
    served_hosts,
)
from toolgate.errors import InvalidInputError


async def _ok(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _client(policy: BrowserPolicy) -> TestClient:
    app = Starlette(routes=[Route("/{path:path}", _ok, methods=["GET", "POST"])])
    guarded = BrowserGuard(app, policy, open_paths={"/healthz"})
    return TestClient(guarded, base_url="http://localhost:8080")


LOOPBACK = BrowserPolicy(served_hosts("127.0.0.1", []), ())


def test_a_request_without_origin_passes() -> None:
    assert _client(LOOPBACK).post("/mcp", json={}).text == "ok"


def test_a_web_pages_request_is_refused_with_its_origin_named() -> None:
    answer = _client(LOOPBACK).post("/mcp", headers={"Origin": "http://evil.example"})
    assert answer.status_code == 403
    assert "'http://evil.example' is not allowed" in answer.json()["error"]


def test_a_local_page_is_a_web_page_too() -> None:
    # Any page on any local port is another program's: none is trusted by default.
    answer = _client(LOOPBACK).get("/metrics", headers={"Origin": "http://localhost:3000"})
    assert answer.status_code == 403


def test_the_origin_null_is_refused() -> None:
    assert _client(LOOPBACK).post("/", headers={"Origin": "null"}).status_code == 403


def test_a_rebound_name_is_refused_on_loopback() -> None:
    answer = _client(LOOPBACK).get("/metrics", headers={"Host": "evil.example:8080"})
    assert answer.status_code == 421
    assert "Host 'evil.example:8080' is not a name" in answer.json()["error"]


def test_a_request_without_one_host_is_refused_where_names_are_checked() -> None:
    none = LOOPBACK.refusal([])
    assert none == (421, "host_not_allowed", "a request needs one Host header, not 0")
    two = LOOPBACK.refusal([(b"host", b"localhost"), (b"host", b"evil.example")])
    assert two == (421, "host_not_allowed", "a request needs one Host header, not 2")
    assert BrowserPolicy().refusal([]) is None  # any Host, and none


@pytest.mark.parametrize(
    "host", ["localhost:8080", "127.0.0.1:1", "[::1]:8765", "LOCALHOST:8080", "localhost"]
)
def test_the_loopback_names_pass_on_loopback(host: str) -> None:
    assert _client(LOOPBACK).get("/", headers={"Host": host}).status_code == 200


def test_the_health_probe_answers_any_name() -> None:
    answer = _client(LOOPBACK).get("/healthz", headers={"Host": "10.0.0.7:8080"})
    assert answer.status_code == 200


@pytest.mark.parametrize("path", ["/healthz", "/health%7A"])
def test_the_health_probe_is_open_to_a_get_or_head_only(path: str) -> None:
    client = _client(LOOPBACK)
    assert client.head(path, headers={"Host": "10.0.0.7:8080"}).status_code == 200
    # Not the probe: the app may send it on, with a page's Origin.
    page = {"Origin": "http://evil.example"}
    assert client.post(path, headers=page).status_code == 403
    assert client.post(path, headers={"Host": "10.0.0.7:8080"}).status_code == 421


def test_a_path_a_key_guards_answers_any_name_but_no_page() -> None:
    app = Starlette(routes=[Route("/{path:path}", _ok, methods=["GET", "POST"])])
    guarded = BrowserGuard(app, LOOPBACK, any_host_paths={"/metrics"})
    client = TestClient(guarded, base_url="http://10.0.0.7:8080")
    assert client.get("/metrics").status_code == 200
    assert client.get("/metrics", headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.post("/metrics").status_code == 421
    assert client.get("/v1/models").status_code == 421


def test_any_host_passes_off_loopback_without_allowed_hosts() -> None:
    policy = BrowserPolicy(served_hosts("0.0.0.0", []), ())
    assert _client(policy).get("/", headers={"Host": "evil.example"}).status_code == 200


def test_origins_are_refused_off_loopback_too() -> None:
    policy = BrowserPolicy(served_hosts("0.0.0.0", []), ())
    answer = _client(policy).post("/", headers={"Origin": "http://10.0.0.9"})
    assert answer.status_code == 403


def test_allowed_hosts_restrict_a_listener_off_loopback() -> None:
    policy = BrowserPolicy(served_hosts("0.0.0.0", ["proxy.internal"]), ())
    client = _client(policy)
    assert client.get("/", headers={"Host": "proxy.internal:8765"}).status_code == 200
    assert client.get("/", headers={"Host": "localhost:8765"}).status_code == 421


def test_an_allowed_host_with_a_port_admits_that_port_only() -> None:
    policy = BrowserPolicy((host_pattern("gw.internal:8080", "--allow-host"),), ())
    client = _client(policy)
    assert client.get("/", headers={"Host": "gw.internal:8080"}).status_code == 200
    assert client.get("/", headers={"Host": "gw.internal:9090"}).status_code == 421
    assert client.get("/", headers={"Host": "gw.internal"}).status_code == 421


def test_an_allowed_origin_passes_and_a_wildcard_port_takes_any_port() -> None:
    origins = ("https://app.example.com", "http://localhost:*")
    policy = BrowserPolicy(LOOPBACK.hosts, tuple(origin_pattern(o, "x") for o in origins))
    client = _client(policy)
    assert client.post("/", headers={"Origin": "https://app.example.com"}).status_code == 200
    assert client.post("/", headers={"Origin": "http://localhost:6274"}).status_code == 200
    assert client.post("/", headers={"Origin": "http://localhost"}).status_code == 200
    assert client.post("/", headers={"Origin": "https://localhost:6274"}).status_code == 403
    assert client.post("/", headers={"Origin": "https://app.example.com:8443"}).status_code == 403
    assert client.post("/", headers={"Origin": "https://evil.example.com"}).status_code == 403


def test_the_origin_regex_matches_the_admitted_origins_only() -> None:
    policy = BrowserPolicy((), ("https://app.example.com", "http://localhost:*"))
    regex = re.compile(policy.origin_regex())
    assert regex.fullmatch("http://localhost:3000")
    assert regex.fullmatch("HTTPS://APP.EXAMPLE.COM")
    assert not regex.fullmatch("https://app.example.com.evil.example")
    assert not regex.fullmatch("https://appxexample.com")
    assert not re.compile(BrowserPolicy().origin_regex()).fullmatch("http://localhost")


def test_a_policy_made_in_code_reads_its_values_as_the_options_are_read() -> None:
    policy = BrowserPolicy(("Gateway.Internal", "gw:*", "gw"), ("HTTPS://App.example.com:443",))
    assert policy.hosts == ("gateway.internal", "gw")
    assert policy.origins == ("https://app.example.com",)
    assert policy.admits_host("gateway.internal:8080")
    assert policy.admits_host("gw:1")
    assert policy.admits_origin("https://app.example.com")


@pytest.mark.parametrize(
    ("hosts", "origins", "message"),
    [
        ((), ("https://app.example.com/",), "allowed_origins: an origin has no path"),
        (("http://gw",), (), "allowed_hosts: a host is a name"),
        ("gw.internal", (), "allowed_hosts: expected a list of strings, got the string"),
        ((8080,), (), "allowed_hosts: expected a list of strings, got int 8080"),
    ],
)
def test_a_policy_made_in_code_names_a_bad_value(hosts: Any, origins: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        BrowserPolicy(hosts, origins)


def test_served_hosts_name_a_loopback_address_listened_on() -> None:
    assert "127.0.0.2" in served_hosts("127.0.0.2", [])
    assert "[::1]" in served_hosts("::1", [])
    assert served_hosts("localhost", ["gw"]) == ("gw", "localhost", "127.0.0.1", "[::1]")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Gateway.Internal", "gateway.internal"),
        ("gateway.internal:*", "gateway.internal"),
        ("10.0.0.5:8080", "10.0.0.5:8080"),
        ("[::1]", "[::1]"),
        ("[::1]:8765", "[::1]:8765"),
    ],
)
def test_allowed_hosts_are_read(text: str, expected: str) -> None:
    assert host_pattern(text, "--allow-host") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("http://gw.internal", "a host is a name, with or without :PORT, not a URL"),
        ("::1", "an IPv6 address goes in brackets"),
        ("*", "expected a host NAME or NAME:PORT"),
        ("", "expected a host NAME or NAME:PORT"),
        ("gw.internal:0", "expected a host NAME or NAME:PORT"),
        ("gw.internal:99999", "expected a host NAME or NAME:PORT"),
        ("gw internal", "expected a host NAME or NAME:PORT"),
        ("[zz::1]", "expected a host NAME or NAME:PORT"),
        ("gw.internal/x", "expected a host NAME or NAME:PORT"),
    ],
)
def test_a_bad_allowed_host_is_named(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(f"--allow-host: {message}")):
        host_pattern(text, "--allow-host")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://localhost:3000", "http://localhost:3000"),
        ("HTTPS://App.Example.com", "https://app.example.com"),
        ("https://app.example.com:443", "https://app.example.com"),  # as browsers send it
        ("http://localhost:80", "http://localhost"),
        ("http://localhost:*", "http://localhost:*"),
        ("http://[::1]:3000", "http://[::1]:3000"),
        ("vscode-webview://abc123", "vscode-webview://abc123"),
    ],
)
def test_allowed_origins_are_read(text: str, expected: str) -> None:
    assert origin_pattern(text, "--allow-origin") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("null", "the origin 'null' cannot be allowed"),
        ("*", "'*' would let every web page in"),
        ("http://localhost:3000/", "an origin has no path, query or trailing slash: "
         "'http://localhost:3000', not 'http://localhost:3000/'"),
        ("localhost:3000", "expected an origin, SCHEME://HOST or SCHEME://HOST:PORT"),
        ("http://user@localhost", "expected an origin"),
        ("http://localhost:70000", "expected an origin"),
        ("http://", "expected an origin"),
    ],
)  # fmt: skip
def test_a_bad_allowed_origin_is_named(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(f"--allow-origin: {message}")):
        origin_pattern(text, "--allow-origin")

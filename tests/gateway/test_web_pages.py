"""Web pages cannot use the gateway through their visitors' browsers: a request carrying an
``Origin`` not allowed is refused, and on loopback one under a ``Host`` other than a loopback
name (DNS rebinding); an allowed origin's page is let in, with CORS answers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.test_filter import WEATHER
from toolgate import InvalidInputError
from toolgate.cli.parser import main
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, Upstream, load_config
from toolgate.gateway.filter import ToolFilter
from toolgate.gateway.serve import ServeOptions, app_from_env

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": WEATHER}]}
EVIL = "http://evil.example"


def _config(listen: str, url: str, tmp_path: Path, **options: Any) -> GatewayConfig:
    """The settings ``toolgate gateway --listen LISTEN --upstream openai=URL`` serves with."""
    upstreams = [f"{name}={url}" for name in ("openai", "anthropic")]
    return ServeOptions.parse(listen, upstreams, store=tmp_path, **options).gateway_config()


@pytest.fixture
def loopback(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter, tmp_path: Path
) -> Iterator[TestClient]:
    """A gateway as served on 127.0.0.1:8080, under a client that reaches it by that name."""
    config = _config("127.0.0.1:8080", fake[1], tmp_path)
    gateway = Gateway(config, tool_filter=shared_filter)
    with TestClient(gateway.app, base_url="http://127.0.0.1:8080") as client:
        yield client


def _served(config: GatewayConfig, tool_filter: ToolFilter, host: str) -> TestClient:
    gateway = Gateway(config, tool_filter=tool_filter)
    return TestClient(gateway.app, base_url=f"http://{host}")


def test_a_web_pages_post_never_reaches_the_upstream(
    loopback: TestClient, fake: tuple[FakeUpstream, str]
) -> None:
    # A form-like POST: text/plain needs no CORS preflight, and the gateway reads it as JSON.
    page = {"Origin": EVIL, "Content-Type": "text/plain"}
    refused = loopback.post(CHAT, content=json.dumps(BODY), headers=page)
    assert refused.status_code == 403
    assert fake[0].received == []
    error = refused.json()["error"]  # in OpenAI's error shape, which its SDK raises
    assert "origin 'http://evil.example' is not allowed" in error["message"]
    assert error["code"] == "origin_not_allowed"
    assert refused.headers["x-toolgate-error"] == "origin_not_allowed"


def test_a_refusal_is_in_the_shape_of_the_provider_asked(loopback: TestClient) -> None:
    refused = loopback.post("/v1/messages", json=BODY, headers={"Origin": EVIL})
    assert refused.json()["error"]["type"] == "permission_error"  # Anthropic's, for a 403


def test_a_local_page_is_refused_too(loopback: TestClient) -> None:
    page = {"Origin": "http://localhost:3000"}
    assert loopback.get("/v1/models", headers=page).status_code == 403


def test_programs_send_no_origin_and_pass(loopback: TestClient) -> None:
    assert loopback.post(CHAT, json=BODY).status_code == 200


def test_a_rebound_name_is_refused_on_loopback(loopback: TestClient) -> None:
    # After DNS rebinding a page's request is same-origin: a GET carries no Origin at all.
    refused = loopback.get("/v1/models", headers={"Host": "evil.example:8080"})
    assert refused.status_code == 421
    assert "Host 'evil.example:8080' is not a name" in refused.json()["error"]["message"]
    assert loopback.get("/metrics", headers={"Host": "evil.example:8080"}).status_code == 421
    assert loopback.get("/v1/models", headers={"Host": "localhost:8080"}).status_code == 200


def test_refusals_are_counted(loopback: TestClient) -> None:
    loopback.get("/v1/models", headers={"Origin": EVIL})
    metrics = loopback.get("/metrics").text
    assert 'toolgate_gateway_requests_total{endpoint="passthrough",status="403"} 1.0' in metrics


def test_the_health_probe_answers_any_name(loopback: TestClient) -> None:
    assert loopback.get("/healthz", headers={"Host": "10.0.0.7:8080"}).status_code != 421


@pytest.mark.parametrize("path", ["/healthz", "/livez"])
def test_the_probes_answer_the_pods_address_where_hosts_are_named(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter, tmp_path: Path, path: str
) -> None:
    # A kubelet's httpGet probe carries Host: POD_IP:PORT; a 421 on /livez restarts the pod.
    options = {"no_auth": True, "allow_hosts": ["gateway.internal"]}
    config = _config("0.0.0.0:8080", fake[1], tmp_path, **options)
    with _served(config, shared_filter, "10.0.0.7:8080") as client:
        assert client.get(path).status_code != 421


@pytest.mark.parametrize("path", ["/healthz", "/health%7A", "/livez"])
def test_a_pages_post_to_a_probe_path_never_reaches_the_upstream(
    loopback: TestClient, fake: tuple[FakeUpstream, str], path: str
) -> None:
    page = {"Origin": EVIL, "Content-Type": "text/plain"}
    assert loopback.post(path, content=b"{}", headers=page).status_code == 403
    assert fake[0].received == []


def test_metrics_the_key_guards_answer_any_name_but_no_page(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_TOKEN", "tg-token")
    config = GatewayConfig(
        upstreams={"openai": Upstream(fake[1])}, auth_token_env="GATEWAY_TOKEN",
        allowed_hosts=("gateway.internal",),
    )  # fmt: skip
    key = {"Authorization": "Bearer tg-token"}
    with _served(config, shared_filter, "10.0.0.7:8080") as client:  # a scrape by pod address
        assert client.get("/metrics", headers=key).status_code == 200
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={**key, "Origin": EVIL}).status_code == 403
        assert client.get("/v1/models", headers=key).status_code == 421


def test_off_loopback_without_a_key_any_name_passes_but_no_page(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter, tmp_path: Path
) -> None:
    config = _config("0.0.0.0:8080", fake[1], tmp_path, no_auth=True)
    with _served(config, shared_filter, "gateway.internal:8080") as client:
        assert client.post(CHAT, json=BODY).status_code == 200
        page = {"Origin": "http://gateway.internal:8080"}
        assert client.post(CHAT, json=BODY, headers=page).status_code == 403


def test_allowed_hosts_restrict_a_gateway_off_loopback(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter, tmp_path: Path
) -> None:
    options = {"no_auth": True, "allow_hosts": ["gateway.internal"]}
    config = _config("0.0.0.0:8080", fake[1], tmp_path, **options)
    with _served(config, shared_filter, "gateway.internal:8080") as client:
        assert client.post(CHAT, json=BODY).status_code == 200
        rebound = client.post(CHAT, json=BODY, headers={"Host": "evil.example:8080"})
        assert rebound.status_code == 421


def test_allowed_lists_given_in_code_match_as_the_options_do(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter
) -> None:
    config = GatewayConfig(
        upstreams={"openai": Upstream(fake[1])}, allowed_hosts=("Gateway.Internal",),
        allowed_origins=("HTTPS://App.Example.com:443",),
    )  # fmt: skip
    with _served(config, shared_filter, "gateway.internal:8080") as client:
        page = {"Origin": "https://app.example.com"}
        assert client.post(CHAT, json=BODY, headers=page).status_code == 200


def test_a_page_with_the_gateway_key_is_refused_too(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_TOKEN", "tg-token")
    config = GatewayConfig(upstreams={"openai": Upstream(fake[1])}, auth_token_env="GATEWAY_TOKEN")
    with _served(config, shared_filter, "127.0.0.1:8080") as client:
        key = {"x-toolgate-key": "tg-token"}
        assert client.post(CHAT, json=BODY, headers=key).status_code == 200
        page = {**key, "Origin": EVIL}
        assert client.post(CHAT, json=BODY, headers=page).status_code == 403


def test_a_page_of_an_allowed_origin_preflights_and_reads_the_answer(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter, tmp_path: Path
) -> None:
    origin = "https://app.example.com"
    config = _config("127.0.0.1:8080", fake[1], tmp_path, allow_origins=[origin])
    with _served(config, shared_filter, "127.0.0.1:8080") as client:
        preflight = client.options(
            CHAT,
            headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type"},
        )  # fmt: skip
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == origin
        assert fake[0].received == []  # answered by the gateway, not sent upstream
        answer = client.post(CHAT, json=BODY, headers={"Origin": origin})
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == origin
        assert answer.headers["access-control-expose-headers"] == "*"  # x-toolgate-tools
        assert client.post(CHAT, json=BODY, headers={"Origin": EVIL}).status_code == 403


def test_the_config_files_allowed_lists_add_to_the_command_lines(
    fake: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        'allowed_origins = ["HTTPS://App.Example.com:443"]\nallowed_hosts = ["gw.internal"]\n'
    )
    config = load_config(path)
    assert config.allowed_origins == ("https://app.example.com",)
    served = _config(
        "127.0.0.1:8080", fake[1], tmp_path, config=path,
        allow_origins=["http://localhost:*"], allow_hosts=["gw.example.com:443"],
    )  # fmt: skip
    assert served.allowed_origins == ("https://app.example.com", "http://localhost:*")
    hosts = ("gw.internal", "gw.example.com:443", "localhost", "127.0.0.1", "[::1]")
    assert served.allowed_hosts == hosts


def test_the_workers_get_the_allowed_lists(
    fake: tuple[FakeUpstream, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {
        "host": "0.0.0.0", "port": 8080, "upstreams": {"openai": fake[1]}, "config": None,
        "top_k": None, "store": str(tmp_path), "allow_hosts": ["gw.internal"],
        "allow_origins": ["https://app.example.com"],
    }  # fmt: skip
    monkeypatch.setenv("TOOLGATE_GATEWAY_SETTINGS", json.dumps(settings))
    with TestClient(app_from_env(), base_url="http://evil.example") as client:
        assert client.get("/metrics").status_code == 421


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('allowed_origins = ["null"]\n', "allowed_origins: the origin 'null' cannot be allowed"),
        ('allowed_origins = "http://x"\n', "'allowed_origins' must be a list of strings"),
        ('allowed_hosts = ["http://gw"]\n', "allowed_hosts: a host is a name"),
        ("allowed_hosts = [1]\n", "'allowed_hosts' must be a list of strings"),
    ],
)
def test_a_bad_allowed_list_in_the_config_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        load_config(path)


def test_a_bad_allowed_origin_on_the_command_line_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["gateway", "--listen", "127.0.0.1:8080", "--upstream", "openai=http://x"]
    assert main([*argv, "--allow-origin", "http://localhost:3000/"]) == 2
    assert "--allow-origin: an origin has no path" in capsys.readouterr().err
    assert main([*argv, "--allow-host", "::1"]) == 2
    assert "--allow-host: an IPv6 address goes in brackets" in capsys.readouterr().err

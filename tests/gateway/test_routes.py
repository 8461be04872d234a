"""The gateway's settings: config files, per-route options, keys, prewarm, the shared store,
and a new tools array that must not stall other requests."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.conftest import CountingEmbedder, start
from tests.gateway.fake_upstream import FakeUpstream, serving
from tests.gateway.test_filter import SPECS, TRIP, WEATHER, chat_tools
from toolgate import InvalidInputError, StorageError
from toolgate.embedding.embedder import Embedder
from toolgate.gateway.app import _WARNED_PATHS, Gateway, _read_tools
from toolgate.gateway.config import GatewayConfig, Upstream, load_config
from toolgate.gateway.filter import ToolFilter
from toolgate.gateway.query import query_at
from toolgate.gateway.upstream import passthrough_provider
from toolgate.routing.config import RouterConfig

USER = [{"role": "user", "content": WEATHER}]


def _chat(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=60)


def _names(fake: FakeUpstream) -> list[str]:
    return [t["function"]["name"] for t in fake.received[-1].body.get("tools", [])]


def test_toml_and_yaml_configs_read_the_same(tmp_path: Path) -> None:
    toml = tmp_path / "gateway.toml"
    toml.write_text(
        'top_k = 6\npolicy = "enforce"\n[upstreams.openai]\norigin = "http://127.0.0.1:9"\n'
        '[[routes]]\npath = "/v1/messages"\ntop_k = 2\ndeny = ["send_*"]\n'
        'query = "$.metadata.task"\n'
    )
    yaml = tmp_path / "gateway.yaml"
    yaml.write_text(
        "top_k: 6\npolicy: enforce\nupstreams:\n  openai:\n    origin: http://127.0.0.1:9\n"
        "routes:\n  - path: /v1/messages\n    top_k: 2\n    deny: [send_*]\n"
        "    query: $.metadata.task\n"
    )
    for path in (toml, yaml):
        config = load_config(path)
        route = config.route("/v1/messages")
        assert (route.top_k, route.deny, route.policy) == (2, ("send_*",), "enforce")
        assert config.route("/v1/chat/completions").top_k == 6
        assert config.upstreams["openai"].origin == "http://127.0.0.1:9"
    capped = load_config(toml).with_overrides(top_k=4)
    assert capped.route("/v1/messages").top_k == 2
    assert capped.route("/x").top_k == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("top_k = 0\n", "'top_k' must be an integer >= 1"),
        ('policy = "block"\n', "policy must be one of"),
        ("colour = 1\n", "unknown key(s) ['colour']"),
        ("[[routes]]\ntop_k = 2\n", "routes[0] needs a 'path'"),
        ('query = "$..[["\n', "is not a JSONPath"),
        ("[upstreams.mistral]\norigin = 'http://x'\n", "upstreams.mistral"),
        (
            "[upstreams.openai]\norigin = 'ftp://x'\n",
            "gateway.toml: upstreams.openai.origin: expected an http(s) URL, got 'ftp://x'",
        ),
        ("top_k = [\n", "not valid TOML"),
        ("threshold = nan\n", "'threshold' must be a cosine in [-1, 1], got nan"),
        ("threshold = inf\n", "'threshold' must be a cosine in [-1, 1], got inf"),
        ("threshold = -3\n", "'threshold' must be a cosine in [-1, 1], got -3"),
        ("threshold = true\n", "'threshold' must be a cosine in [-1, 1], got True"),
        ('[[routes]]\npath = "/v1/*"\nthreshold = 7\n', "routes[0]: 'threshold' must be a"),
        ("timeout = inf\n", "'timeout' must be a finite number of seconds > 0, got inf"),
        ("connect_timeout = nan\n", "'connect_timeout' must be a finite number of seconds"),
        ("store = 5\n", "'store' must be a string, got 5"),
        ("store = true\n", "'store' must be a string, got True"),
        ("[store]\na = 1\n", "'store' must be a string, got {'a': 1}"),
        ("store = ''\n", "'store' must be a folder path, got ''"),
        ("max_stored = 0\n", "'max_stored' must be an integer >= 1, got 0"),
        (
            "[[prewarm]]\nprovider = 'openai'\ntools = 'x.json'\nbogus = 1\n",
            "prewarm[0]: unknown key(s) ['bogus']",
        ),
        (
            "[upstreams.openai]\norigin = 'https://x'\napi_key_env = ''\n",
            "upstreams.openai: 'api_key_env' must name an environment variable, got ''",
        ),
        ("auth_token_env = ' '\n", "'auth_token_env' must name an environment variable"),
        (
            "[state_headers]\n'X-Scopes' = 'scopes'\n'x-scopes' = 'milestones'\n",
            "state_headers: 'x-scopes' names a header already listed",
        ),
        ('[state_headers]\n"x-bad\\n" = "scopes"\n', "state_headers: 'x-bad\\n' is no HTTP header"),
        ("[state_headers]\n'x bad' = 'scopes'\n", "state_headers: 'x bad' is no HTTP header"),
        # An origin the request's path cannot follow: accepted, it failed or went astray at
        # the first request (a query swallows the path, a fragment drops it).
        (
            "[upstreams.openai]\norigin = 'https://api.openai.com?v=1'\n",
            "upstreams.openai.origin: expected an http(s) origin (a path may follow the host, "
            "no query or fragment), got 'https://api.openai.com?v=1'",
        ),
        ("[upstreams.openai]\norigin = 'https://x.com#a'\n", "got 'https://x.com#a'"),
        ("[upstreams.openai]\norigin = 'https://x.com '\n", "got 'https://x.com '"),
        ("[upstreams.openai]\norigin = 'https://'\n", "got 'https://'"),
        ("[upstreams.openai]\norigin = 'https://x.com:99999'\n", "got 'https://x.com:99999'"),
        # A route no request path can reach would leave its deny list unheld, silently.
        (
            '[[routes]]\npath = "v1/messages"\ndeny = ["delete_*"]\n',
            "routes[0]: path 'v1/messages' matches no request path (they begin with '/')",
        ),
        (
            '[[routes]]\npath = "/v1/*"\n[[routes]]\npath = "/v1/*"\ndeny = ["x"]\n',
            "routes[1]: path '/v1/*' never applies: routes[0] ('/v1/*') matches its paths first",
        ),
        (
            '[[routes]]\npath = "*"\n[[routes]]\npath = "/v1/messages"\ndeny = ["x"]\n',
            "routes[1]: path '/v1/messages' never applies: routes[0] ('*') matches its paths",
        ),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1: x\nfoo: y\n", "gateway.yaml: keys must be strings, got 1"),
        ("true: 1\nfoo: 2\n", "gateway.yaml: keys must be strings, got True"),
        ("null: x\ntop_k: 3\n", "gateway.yaml: keys must be strings, got None"),
        ("routes:\n  - path: /v1/*\n    1: x\n    foo: y\n", "routes[0]: keys must be strings"),
        (
            "upstreams:\n  openai:\n    origin: https://x\n    1: a\n    b: c\n",
            "upstreams.openai: keys must be strings, got 1",
        ),
        ("top_k: 3\nstore: a\ntop_k: 30\n", "duplicate key 'top_k'"),
        ("routes:\n  - path: /v1/*\n    top_k: 2\n    top_k: 9\n", "duplicate key 'top_k'"),
    ],
)
def test_yaml_keys_that_are_no_strings_or_repeat_are_named(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        load_config(path)


def test_yaml_merge_keys_share_settings_between_routes(tmp_path: Path) -> None:
    """``<<: *anchor``, YAML's way to share settings, was refused by the check that a key
    is not given twice ("could not determine a constructor for the tag ...merge")."""
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "routes:\n"
        "  - &strict {path: /v1/messages, policy: enforce, deny: [delete_*], top_k: 3}\n"
        "  - &chat\n    <<: *strict\n    path: /v1/chat/*\n    top_k: 5\n"
        "  - <<: *chat\n    path: /v1/responses\n"
    )
    routes = load_config(path).routes
    assert [(r.path, r.policy, r.deny, r.top_k) for r in routes] == [
        ("/v1/messages", "enforce", ("delete_*",), 3),
        ("/v1/chat/*", "enforce", ("delete_*",), 5),
        ("/v1/responses", "enforce", ("delete_*",), 5),
    ]
    # A key given twice beside a merge is still refused.
    path.write_text("routes:\n  - &r {path: /a}\n  - <<: *r\n    path: /b\n    path: /c\n")
    with pytest.raises(InvalidInputError, match="duplicate key 'path'"):
        load_config(path)


@pytest.mark.parametrize("text", ["policy: off\n", "routes:\n  - path: /v1/*\n    policy: on\n"])
def test_a_yaml_policy_read_as_a_boolean_says_to_quote_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match="YAML reads an unquoted off or on as false"):
        load_config(path)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("gateway.toml", "top_k = " + "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("gateway.yaml", "top_k: " + "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("gateway.toml", "top_k = " + "9" * 5_000, "4300 digits"),
        ("gateway.yml", "top_k: " + "9" * 5_000, "4300 digits"),
    ],
)
def test_a_config_past_its_parsers_limits_is_named(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=message):
        load_config(path)


@pytest.mark.parametrize("name", ["gateway.toml", "gateway.yaml"])
def test_a_config_and_its_prewarm_file_may_start_with_a_byte_order_mark(
    tmp_path: Path, name: str
) -> None:
    # As Windows editors save them.
    tools = tmp_path / "tools.json"
    tools.write_text(orjson.dumps(chat_tools()).decode(), encoding="utf-8-sig")
    text = (
        'top_k = 6\n[[prewarm]]\nprovider = "openai"\ntools = "tools.json"\n'
        if name.endswith(".toml")
        else "top_k: 6\nprewarm:\n  - provider: openai\n    tools: tools.json\n"
    )
    path = tmp_path / name
    path.write_text(text, encoding="utf-8-sig")
    config = load_config(path)
    assert config.route("/v1/chat/completions").top_k == 6
    assert _read_tools(config.prewarm[0]) == chat_tools()


def test_paths_in_a_config_read_tilde_as_home_and_the_rest_from_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "conf" / "gateway.toml"
    path.parent.mkdir()
    path.write_text(
        'store = "~/routers"\nlearn = "~/learned.sqlite3"\n'
        '[[prewarm]]\nprovider = "openai"\ntools = "tools.json"\n'
    )
    config = load_config(path)
    assert config.store == tmp_path / "home" / "routers"
    assert config.learn == str(tmp_path / "home" / "learned.sqlite3")
    assert config.prewarm[0].tools == tmp_path / "conf" / "tools.json"


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('store = "~no-such-user-here/routers"', "store"),
        ('learn = "~no-such-user-here/learned.sqlite3"', "learn"),
        ('[[prewarm]]\nprovider = "openai"\ntools = "~no-such-user-here/tools.json"', "tools"),
    ],
)
def test_a_home_that_cannot_be_found_is_named_with_the_key(
    tmp_path: Path, line: str, key: str
) -> None:
    # pathlib raised RuntimeError('Could not determine home directory.'), outside toolgate's
    # error tree and naming neither the key nor the path.
    path = tmp_path / "gateway.toml"
    path.write_text(line + "\n")
    with pytest.raises(InvalidInputError, match=f"{key}.*'~no-such-user-here/.*home"):
        load_config(path)


def test_route_query_pinned_budget_and_deny(fake: Any, shared_filter: ToolFilter) -> None:
    upstream, _ = fake
    with start(fake, shared_filter, top_k=2, query="$.metadata.task") as served:
        _chat(served.url, {"messages": USER, "tools": chat_tools(), "metadata": {"task": TRIP}})
        assert _names(upstream) == ["search_flights", "book_hotel"]  # not the user's weather
        missing = _chat(served.url, {"messages": USER, "tools": chat_tools()})
        assert missing.status_code == 400
        assert "finds no text" in missing.json()["error"]["message"]
    with start(fake, shared_filter, pinned=("translate_text",), deny=("book_*",)) as served:
        _chat(served.url, {"messages": [{"role": "user", "content": TRIP}], "tools": chat_tools()})
        assert "translate_text" in _names(upstream)
        assert "book_hotel" not in _names(upstream)
    with start(fake, shared_filter, top_k=5, max_tools=1) as served:
        response = _chat(served.url, {"messages": USER, "tools": chat_tools()})
        assert _names(upstream) == ["get_weather"]
        assert response.headers["x-toolgate-tools"] == f"1/{len(SPECS)}"
    # A pinned tool is never dropped by the budget, as a chosen one is not: here the tool
    # choice takes the one slot, and the pinned tool still goes.
    with start(fake, shared_filter, pinned=("translate_text",), max_tools=1) as served:
        chosen = {"type": "function", "function": {"name": "get_weather"}}
        _chat(served.url, {"messages": USER, "tools": chat_tools(), "tool_choice": chosen})
        assert _names(upstream) == ["get_weather", "translate_text"]


def test_a_route_query_reads_content_nested_as_deep_as_a_body_may() -> None:
    # The body reader takes JSON nested 1,024 deep; reading the text at the route's query
    # recursed once a level, and a content nested 990 deep was a RecursionError (a 500).
    content: Any = [{"type": "text", "text": WEATHER}, {"type": "image", "source": {}}]
    for _ in range(990):
        content = [content]
    body = {"messages": [{"role": "user", "content": content}], "tools": chat_tools()}
    assert query_at(body, "$.messages[-1].content") == WEATHER
    parts = {"parts": [{"text": "a"}, "b", {"content": [{"text": "c"}]}], "x": 1}
    assert query_at({"m": [parts, "d"]}, "$.m") == "a\nb\nc\nd"


def test_a_gateway_key_is_required_and_never_logged(
    fake: Any, shared_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    upstream, url = fake
    monkeypatch.setenv("GATEWAY_TOKEN", "tg-secret-token")
    monkeypatch.setenv("UPSTREAM_KEY", "sk-upstream-secret")
    config = GatewayConfig(
        upstreams={"openai": Upstream(url, "UPSTREAM_KEY")}, auth_token_env="GATEWAY_TOKEN"
    )
    gateway = Gateway(config, tool_filter=shared_filter)
    caplog.set_level(logging.DEBUG)
    with serving(gateway.app) as base:
        body = {"messages": USER, "tools": chat_tools()}
        refused = _chat(base, body, authorization="Bearer wrong")
        assert refused.status_code == 401
        assert upstream.received == []
        # The SDK's own key header carries the gateway key when the gateway holds the upstream's.
        assert _chat(base, body, authorization="Bearer tg-secret-token").status_code == 200
        assert upstream.received[-1].headers["authorization"] == "Bearer sk-upstream-secret"
        assert "x-toolgate-key" not in upstream.received[-1].headers
        # The scheme in any case, as RFC 7235 has it (and /metrics, and the proxy, read it).
        assert _chat(base, body, authorization="bearer tg-secret-token").status_code == 200
        ok = httpx.get(
            base + "/v1/models?token=tg-secret-token",
            headers={"x-toolgate-key": "tg-secret-token"},
        )
        assert ok.status_code == 200
    logged = caplog.text
    assert "/v1/models" in logged
    assert "secret" not in logged


def test_a_clients_query_key_is_replaced_by_the_gateway_held_key(
    fake: Any, shared_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream, url = fake
    monkeypatch.setenv("GATEWAY_TOKEN", "tg-secret-token")
    monkeypatch.setenv("GEMINI_KEY", "g-upstream-secret")
    config = GatewayConfig(
        upstreams={"gemini": Upstream(url, "GEMINI_KEY")}, auth_token_env="GATEWAY_TOKEN"
    )
    with serving(Gateway(config, tool_filter=shared_filter).app) as base:
        # A REST habit: the gateway token as the SDK key, and again in ?key=.
        headers = {"x-goog-api-key": "tg-secret-token"}
        query = "?key=tg-secret-token&pageSize=5"
        assert httpx.get(base + "/v1beta/models" + query, headers=headers).status_code == 200
        assert upstream.received[-1].query == "pageSize=5"
        assert upstream.received[-1].headers["x-goog-api-key"] == "g-upstream-secret"
        # The gateway key is never taken from the query string.
        refused = httpx.get(base + "/v1beta/models?key=tg-secret-token")
        assert refused.status_code == 401


def test_metrics_are_behind_the_gateway_key(
    fake: Any, shared_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    _upstream, url = fake
    monkeypatch.setenv("GATEWAY_TOKEN", "tg-secret-token")
    config = GatewayConfig(upstreams={"openai": Upstream(url)}, auth_token_env="GATEWAY_TOKEN")
    with serving(Gateway(config, tool_filter=shared_filter).app) as base:
        refused = httpx.get(base + "/metrics")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = httpx.get(base + "/metrics", headers={"authorization": "Bearer wrong"})
        assert wrong.status_code == 401
        bearer = httpx.get(base + "/metrics", headers={"authorization": "bearer tg-secret-token"})
        assert "toolgate_gateway_requests_total" in bearer.text
        ours = httpx.get(base + "/metrics", headers={"x-toolgate-key": "tg-secret-token"})
        assert ours.status_code == 200
        # Two Authorization headers: which one counts is not for the gateway to guess.
        two = [("authorization", "Bearer tg-secret-token"), ("authorization", "Bearer wrong")]
        assert httpx.get(base + "/metrics", headers=two).status_code == 401
        # The probes stay open.
        assert httpx.get(base + "/livez").status_code == 200
        assert httpx.get(base + "/healthz").status_code != 401


def test_prewarm_and_the_store_spare_the_first_request_its_indexing(
    fake: Any, embedder: Embedder, tmp_path: Path
) -> None:
    _upstream, url = fake
    tools_file = tmp_path / "tools.json"
    tools_file.write_bytes(orjson.dumps(chat_tools()))
    counting = CountingEmbedder(embedder)
    config = GatewayConfig(
        upstreams={"openai": Upstream(url)},
        prewarm=(load_config(_prewarm_toml(tmp_path)).prewarm),
        store=tmp_path / "store",
    )
    gateway = Gateway(
        config, tool_filter=ToolFilter(embedder=counting, cache=None, store=config.store)
    )
    with serving(gateway.app) as base:
        assert _healthy(base) == {"status": "ok"}
        indexed = counting.batch_texts
        assert indexed >= len(SPECS)  # prewarm embedded the tools before /healthz said ok
        _chat(base, {"messages": USER, "tools": chat_tools()})
        assert counting.batch_texts == indexed
    assert len([p for p in (tmp_path / "store").iterdir() if not p.name.startswith(".")]) == 1
    # Another process (a second worker) opens the saved index: it embeds no tool.
    other = CountingEmbedder(embedder)
    second = ToolFilter(embedder=other, cache=None, store=tmp_path / "store")
    filtered = second.filter({"messages": USER, "tools": chat_tools()}, top_k=3)
    assert "get_weather" in filtered.kept
    assert other.batch_texts == 0


def test_a_store_that_fails_is_a_503_to_retry_not_a_bad_request(
    fake: Any, embedder: Embedder, tmp_path: Path
) -> None:
    upstream, url = fake
    (tmp_path / "store").write_text("a file where the store folder should be")
    tool_filter = ToolFilter(embedder=embedder, cache=None, store=tmp_path / "store")
    gateway = Gateway(GatewayConfig(upstreams={"openai": Upstream(url)}), tool_filter=tool_filter)
    with serving(gateway.app) as base:
        answer = _chat(base, {"messages": USER, "tools": chat_tools()})
    assert answer.status_code == 503
    assert answer.headers["x-toolgate-error"] == "store_failed"
    assert "x-should-retry" not in answer.headers
    assert "router store" in answer.json()["error"]["message"]
    assert upstream.received == []


def test_a_model_that_cannot_load_is_a_503_to_retry_not_a_bad_request(
    fake: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    upstream, url = fake
    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "no-model"))
    gateway = Gateway(GatewayConfig(upstreams={"openai": Upstream(url)}),
                      tool_filter=ToolFilter(cache=None))  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="toolgate.gateway"), serving(gateway.app) as base:
        _chat(base, {"messages": USER, "tools": chat_tools()})
        answer = _chat(base, {"messages": USER, "tools": chat_tools()})
    logged = [r.getMessage() for r in caplog.records if "cannot be filtered" in r.getMessage()]
    assert len(logged) == 1  # once, however many requests fail
    assert "model ensure" in logged[0]
    assert answer.status_code == 503
    assert answer.headers["x-toolgate-error"] == "model_unavailable"
    assert "x-should-retry" not in answer.headers
    assert "no-model" not in answer.text  # the server's paths are for its log
    assert upstream.received == []


def test_the_failures_logged_say_when_they_reach_their_bound(
    fake: Any, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    # Past the bound, a new reason requests cannot be filtered went unlogged, as if none.
    _, url = fake
    gateway = Gateway(GatewayConfig(upstreams={"openai": Upstream(url)}),
                      tool_filter=ToolFilter(embedder=embedder, cache=None))  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="toolgate.gateway"):
        for n in range(_WARNED_PATHS + 20):
            gateway._log_once(StorageError(f"store {n} failed"))
    logged = [r.getMessage() for r in caplog.records if "cannot be filtered" in r.getMessage()]
    assert len(logged) == _WARNED_PATHS
    capped = [m for m in logged if "no more are logged" in m]
    assert len(capped) == 1
    assert f"store {_WARNED_PATHS - 1} failed" in capped[0]


def test_the_gateway_is_not_ready_without_its_model(
    fake: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _upstream, url = fake
    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "no-model"))
    gateway = Gateway(GatewayConfig(upstreams={"openai": Upstream(url)}),
                      tool_filter=ToolFilter(cache=None))  # fmt: skip
    with serving(gateway.app) as base:
        assert _healthy(base, wanted=503) == {"status": "failed"}
    assert gateway.problem is not None
    assert "model ensure" in gateway.problem


class _Buggy(ToolFilter):
    def filter(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")


def test_a_bug_while_filtering_is_a_500_in_the_providers_shape(
    fake: Any, embedder: Embedder
) -> None:
    _upstream, url = fake
    config = GatewayConfig(upstreams={"anthropic": Upstream(url)})
    gateway = Gateway(config, tool_filter=_Buggy(embedder=embedder, cache=None))
    body = {"model": "m", "max_tokens": 9, "messages": USER, "tools": []}
    with serving(gateway.app) as base:
        answer = httpx.post(base + "/v1/messages", json=body, timeout=60)
    assert answer.status_code == 500
    assert answer.headers["x-toolgate-error"] == "internal_error"
    assert answer.json()["error"]["type"] == "api_error"


def test_the_gateway_serves_while_it_prewarms_and_says_so(
    fake: Any, embedder: Embedder, tmp_path: Path
) -> None:
    _upstream, url = fake
    (tmp_path / "tools.json").write_bytes(orjson.dumps(chat_tools()))
    release = threading.Event()
    held = CountingEmbedder(embedder, hold=release)  # the prewarm waits for the release
    config = GatewayConfig(
        upstreams={"openai": Upstream(url)}, prewarm=load_config(_prewarm_toml(tmp_path)).prewarm
    )
    gateway = Gateway(config, tool_filter=ToolFilter(embedder=held, cache=None))
    with serving(gateway.app) as base:
        starting = httpx.get(base + "/healthz")
        assert (starting.status_code, starting.json()) == (503, {"status": "starting"})
        alive = httpx.get(base + "/livez")  # the liveness probe does not wait for prewarm
        assert (alive.status_code, alive.json()) == (200, {"status": "alive"})
        # A request is answered meanwhile (its tools array is not the one being indexed).
        assert _chat(base, {"messages": USER, "tools": chat_tools()[:3]}).status_code == 200
        assert httpx.get(base + "/healthz").status_code == 503
        release.set()
        assert _healthy(base) == {"status": "ok"}


def test_a_prewarm_that_fails_is_named_by_healthz_and_a_missing_file_stops_start(
    fake: Any, shared_filter: ToolFilter, embedder: Embedder, tmp_path: Path
) -> None:
    _upstream, url = fake
    unreadable = [*chat_tools(), {"type": "function", "function": {"description": "no name"}}]
    (tmp_path / "tools.json").write_bytes(orjson.dumps(unreadable))
    prewarm = load_config(_prewarm_toml(tmp_path)).prewarm
    config = GatewayConfig(upstreams={"openai": Upstream(url)}, prewarm=prewarm)
    gateway = Gateway(config, tool_filter=shared_filter)
    with serving(gateway.app) as base:
        # Anyone may ask: the state alone, its reason (a file's path) is the log's.
        assert _healthy(base, wanted=503) == {"status": "failed"}
        assert gateway.problem is not None
        assert "tools.json" in gateway.problem
        assert "name" in gateway.problem
    # A fault that is not the tools' (a bug) is named too, and the server goes on.
    broken = Gateway(config, tool_filter=_Broken(embedder=embedder))
    with serving(broken.app) as base:
        assert _healthy(base, wanted=503) == {"status": "failed"}
        assert broken.problem is not None
        assert broken.problem.endswith("RuntimeError: a bug")
        assert httpx.get(base + "/metrics").status_code == 200
        alive = httpx.get(base + "/livez")  # a restart would fail the same way
        assert (alive.status_code, alive.json()) == (200, {"status": "alive"})
    (tmp_path / "tools.json").unlink()
    with pytest.raises(InvalidInputError, match=r"prewarm .*tools\.json: cannot read"):
        Gateway(config, tool_filter=shared_filter)
    (tmp_path / "tools.json").write_text('{"tools": []}')
    with pytest.raises(InvalidInputError, match="expected a JSON array of tools, got dict"):
        Gateway(config, tool_filter=shared_filter)
    (tmp_path / "tools.json").unlink()
    os.mkfifo(tmp_path / "tools.json")  # opening it to read would block for ever
    with pytest.raises(InvalidInputError, match=r"tools\.json: cannot read.*not a regular file"):
        Gateway(config, tool_filter=shared_filter)
    with pytest.raises(InvalidInputError, match=r"--config .*: cannot read.*not a regular file"):
        load_config(tmp_path / "tools.json")


class _Broken(ToolFilter):
    def filter(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")


def _healthy(base: str, wanted: int = 200) -> Any:
    """The /healthz body once prewarm has ended (it runs in the background), which must
    have answered ``wanted``."""
    deadline = time.monotonic() + 120
    while (answer := httpx.get(base + "/healthz")).json()["status"] == "starting":
        assert answer.status_code == 503
        assert time.monotonic() < deadline, "the gateway did not finish prewarming"
        time.sleep(0.05)
    assert answer.status_code == wanted
    return answer.json()


def _prewarm_toml(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text('[[prewarm]]\nprovider = "openai"\ntools = "tools.json"\n')
    return path


def _held_gateway(fake: Any, embedder: Embedder) -> tuple[Gateway, CountingEmbedder]:
    """A gateway to ``fake`` whose embedder can hold an index build (see CountingEmbedder)."""
    _upstream, url = fake
    held = CountingEmbedder(embedder)
    config = GatewayConfig(upstreams={"openai": Upstream(url)})
    return Gateway(config, tool_filter=ToolFilter(embedder=held, cache=None)), held


def _renamed(suffix: str) -> list[dict[str, Any]]:
    """The chat tools with ``suffix`` on their names: an array no filter has indexed."""
    return [
        {**t, "function": {**t["function"], "name": t["function"]["name"] + suffix}}
        for t in chat_tools()
    ]


def _until_indexing(held: CountingEmbedder) -> None:
    """Returns once ``held`` embeds a batch: a new array is being indexed."""
    deadline = time.monotonic() + 60
    while held.batch_texts == 0:
        assert time.monotonic() < deadline, "no indexing started"
        time.sleep(0.01)


def test_a_new_tools_array_does_not_stall_other_requests(fake: Any, embedder: Embedder) -> None:
    gateway, held = _held_gateway(fake, embedder)
    with serving(gateway.app) as base:
        _chat(base, {"messages": USER, "tools": chat_tools()})  # indexed now
        release = threading.Event()
        held.batch_texts, held.hold = 0, release  # the next array's indexing waits for it
        renamed = _renamed("_v2")
        finished: list[str] = []
        new = threading.Thread(
            target=lambda: finished.append(
                str(_chat(base, {"messages": USER, "tools": renamed}).status_code)
            )
        )
        new.start()
        try:
            _until_indexing(held)
            for _ in range(3):
                assert _chat(base, {"messages": USER, "tools": chat_tools()}).status_code == 200
            assert finished == []  # the known array's requests were answered meanwhile
        finally:
            release.set()
        new.join(60)
        assert finished == ["200"]


def test_a_request_for_an_array_being_indexed_is_answered_as_its_builder(
    fake: Any, embedder: Embedder
) -> None:
    """The gateway filters without waiting (IndexInProgress, a ToolgateError): a request
    arriving while its tools are indexed is neither refused as the client's fault nor as
    the gateway's, but filtered once the build ends, exactly as the builder's request."""
    from concurrent.futures import ThreadPoolExecutor

    upstream, _ = fake
    gateway, held = _held_gateway(fake, embedder)
    with serving(gateway.app) as base, ThreadPoolExecutor(2) as pool:
        _chat(base, {"messages": USER, "tools": chat_tools()})  # the model is loaded now
        release = threading.Event()
        held.batch_texts, held.embedded_texts, held.hold = 0, 0, release
        body = {"messages": USER, "tools": _renamed("_v4")}
        try:
            builder = pool.submit(_chat, base, body)
            _until_indexing(held)
            follower = pool.submit(_chat, base, body)
            time.sleep(0.5)  # it has arrived, and found the array being indexed
            assert not follower.done()
        finally:
            release.set()
        answers = [builder.result(60), follower.result(60)]
    assert [a.status_code for a in answers] == [200, 200]
    tools = {a.headers["x-toolgate-tools"] for a in answers}
    assert len(tools) == 1
    assert tools != {f"{len(SPECS)}/{len(SPECS)}"}  # filtered, not passed through whole
    sent = [orjson.dumps(r.body["tools"]) for r in upstream.received[-2:]]
    assert sent[0] == sent[1]
    assert held.embedded_texts == held.batch_texts == 2 * len(SPECS)  # indexed once


def test_a_key_variable_that_is_not_set_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_GATEWAY_TOKEN", raising=False)
    monkeypatch.setenv("EMPTY_UPSTREAM_KEY", "")
    config = GatewayConfig(auth_token_env="NO_SUCH_GATEWAY_TOKEN")
    with pytest.raises(InvalidInputError, match="auth_token_env: NO_SUCH_GATEWAY_TOKEN is not set"):
        config.auth_token()
    upstream = Upstream("https://api.openai.com", "EMPTY_UPSTREAM_KEY")
    with pytest.raises(InvalidInputError, match="api_key_env: EMPTY_UPSTREAM_KEY is not set"):
        upstream.api_key()
    assert Upstream("https://api.openai.com").api_key() is None


def test_a_secrets_surrounding_whitespace_is_left_out(
    fake: Any, shared_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Kubernetes secret made --from-file keeps the file's last newline, which no header
    # can carry: every client was refused, and every upstream call failed as "unreachable".
    upstream, url = fake
    monkeypatch.setenv("GATEWAY_TOKEN", "tg-secret-token\n")
    monkeypatch.setenv("UPSTREAM_KEY", " sk-upstream-secret\r\n")
    config = GatewayConfig(
        upstreams={"openai": Upstream(url, "UPSTREAM_KEY")}, auth_token_env="GATEWAY_TOKEN"
    )
    with serving(Gateway(config, tool_filter=shared_filter).app) as base:
        answer = httpx.get(base + "/v1/models", headers={"x-toolgate-key": "tg-secret-token"})
        assert answer.status_code == 200
        assert upstream.received[-1].headers["authorization"] == "Bearer sk-upstream-secret"
    for value, message in (
        (" \n", "GATEWAY_TOKEN holds only whitespace"),
        ("tg-\nsecret", "GATEWAY_TOKEN holds a control character"),
    ):
        monkeypatch.setenv("GATEWAY_TOKEN", value)
        with pytest.raises(InvalidInputError, match=f"auth_token_env: {message}") as raised:
            config.auth_token()
        assert "secret" not in str(raised.value)  # the variable is named, never its value


def test_many_requests_waiting_for_one_new_array_do_not_stall_others(
    fake: Any, embedder: Embedder
) -> None:
    """More requests for an array being indexed than the gateway has worker threads: they
    wait without holding a thread each, so a known array's requests are still answered."""
    from concurrent.futures import ThreadPoolExecutor

    import anyio
    import anyio.to_thread

    async def thread_tokens() -> float:
        return anyio.to_thread.current_default_thread_limiter().total_tokens

    gateway, held = _held_gateway(fake, embedder)
    with serving(gateway.app) as base:
        _chat(base, {"messages": USER, "tools": chat_tools()})  # indexed now
        threads = int(anyio.run(thread_tokens))  # each event loop's default, as uvicorn's
        release = threading.Event()
        held.batch_texts, held.embedded_texts, held.hold = 0, 0, release
        renamed = _renamed("_v3")
        waiting = threads + 8
        with ThreadPoolExecutor(waiting) as pool:
            new = [
                pool.submit(lambda: _chat(base, {"messages": USER, "tools": renamed}))
                for _ in range(waiting)
            ]
            try:
                _until_indexing(held)
                time.sleep(1.0)  # every request for it has arrived and waits
                known = _chat(base, {"messages": USER, "tools": chat_tools()})
                assert known.status_code == 200
                assert not any(f.done() for f in new)  # answered while they still wait
            finally:
                release.set()
            assert [f.result().status_code for f in new] == [200] * waiting
    assert held.embedded_texts == held.batch_texts == 2 * len(SPECS)  # indexed once


@pytest.mark.parametrize(
    ("path", "headers", "query", "provider"),
    [
        ("/v1/models", {}, "key=AIza-secret", "gemini"),
        ("/v1beta1/projects/p/locations/l/publishers/google/models/m:countTokens", {}, "",
         "vertex"),
        ("/v1/projects/p/locations/l/endpoints/e:predict", {}, "", "vertex"),
        ("/v1beta1/publishers/google/models/m:countTokens", {"x-goog-api-key": "k"}, "",
         "vertex"),
        ("/v1beta/models", {}, "", "gemini"),
        ("/openai/deployments/d/embeddings", {"api-key": "k"}, "", "azure"),
        ("/openai/models", {}, "key=AIza-secret", "gemini"),
        ("/v1/models", {"anthropic-version": "2023-06-01"}, "", "anthropic"),
        ("/v1/models", {}, "limit=5", "openai"),
    ],
)  # fmt: skip
def test_a_passthrough_goes_where_its_credentials_point(
    path: str, headers: dict[str, str], query: str, provider: str
) -> None:
    # A Google key or a Vertex AI path never goes to OpenAI's upstream (nor Azure's).
    assert passthrough_provider(path, headers, query) == provider


def test_the_routers_configured_threshold_holds_where_no_route_sets_one(
    fake: Any, embedder: Embedder
) -> None:
    # `[router] threshold` is the floor of every tools array's router: a route that sets no
    # threshold of its own must leave it in force, not lift it ("no floor"), as the
    # ToolFilter given the same config does.
    upstream, _ = fake
    floor = RouterConfig(adaptive=False, threshold=0.99)
    gate = ToolFilter(config=floor, embedder=embedder, cache=None)
    body = {"messages": USER, "tools": chat_tools()}
    assert gate.filter(body).kept == ()
    with start(fake, gate) as served:
        _chat(served.url, body)
        assert _names(upstream) == []
    # A route's own threshold still overrides the router's.
    with start(fake, gate, threshold=-1.0) as served:
        _chat(served.url, body)
        assert len(_names(upstream)) == 3


def test_the_top_k_header_asks_no_more_than_the_routers_configured_top_k(
    fake: Any, embedder: Embedder
) -> None:
    # With no route top_k, `[router] top_k` is the most tools a request keeps: the header
    # may ask for fewer, never for more.
    upstream, _ = fake
    gate = ToolFilter(config=RouterConfig(adaptive=False, top_k=2), embedder=embedder, cache=None)
    body = {"messages": USER, "tools": chat_tools()}
    with start(fake, gate, top_k=None) as served:
        _chat(served.url, body, **{"x-toolgate-top-k": "5"})
        assert len(_names(upstream)) == 2
        _chat(served.url, body, **{"x-toolgate-top-k": "1"})
        assert len(_names(upstream)) == 1

"""A ToolFilter (and the gateway) that learns: a call that passes verify lifts its tool."""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.gateway.conftest import start
from tests.gateway.fake_upstream import FakeUpstream, Script
from tests.gateway.test_filter import anthropic_tools, chat_request, chat_tools
from toolgate.embedding.embedder import Embedder
from toolgate.errors import InvalidInputError
from toolgate.gateway.config import load_config
from toolgate.gateway.filter import ToolFilter
from toolgate.routing.config import RouterConfig
from toolgate.routing.learned_store import SqliteStore, StoreError

# Needs the email tool, though most of its words are about a trip.
QUERY = "let Ann know about the trip to Lisbon"


def _call(name: str, arguments: str = '{"to": "ann"}') -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _gate(embedder: Embedder, learn: Any) -> ToolFilter:
    config = RouterConfig(adaptive=False)
    return ToolFilter(config=config, embedder=embedder, cache=None, learn=learn)


def _names(gate: ToolFilter, query: str) -> list[str]:
    result = gate.filter(chat_request(query), top_k=8).result
    return [tool.id.rpartition("/")[2] for tool in result.tools]


def _learned_tools(gate: ToolFilter, query: str) -> list[str]:
    routed = gate.filter(chat_request(query), top_k=8)._routed
    assert routed is not None
    memory = routed.router.memory
    assert memory is not None
    return [routed.catalog.ids[row] for row in memory._rows.tools.tolist()]


def test_a_verified_call_is_learned_for_its_user_message(embedder: Embedder) -> None:
    gate = _gate(embedder, SqliteStore(":memory:"))
    before = _names(gate, QUERY)
    filtered = gate.filter(chat_request(QUERY), top_k=8)
    # A check of a call not yet whole teaches nothing; the whole call does, once.
    assert gate.verify(_call("send_email", "{}"), filtered, learn=False).ok
    assert _learned_tools(gate, QUERY) == []
    assert gate.verify(_call("send_email"), filtered).ok
    assert [tool.rpartition("/")[2] for tool in _learned_tools(gate, QUERY)] == ["send_email"]
    assert before.index("send_email") > 0
    first = gate.filter(chat_request(QUERY), top_k=8).result.tools[0]
    assert (first.id.rpartition("/")[2], first.reason) == ("send_email", "learned")


def test_a_refused_call_and_a_filter_that_does_not_learn_teach_nothing(
    embedder: Embedder,
) -> None:
    gate = _gate(embedder, SqliteStore(":memory:"))
    filtered = gate.filter(chat_request(QUERY), top_k=1)
    assert not gate.verify(_call("translate_text", '{"text": "hi"}'), filtered).ok
    assert _learned_tools(gate, QUERY) == []
    plain = _gate(embedder, None)
    filtered = plain.filter(chat_request(QUERY), top_k=8)
    assert plain.verify(_call("send_email"), filtered).ok
    assert filtered._routed is not None
    assert filtered._routed.router.memory is None


class _Broken(SqliteStore):
    def _insert(self, sql: str, args: Any) -> int:
        raise StoreError("cannot write the learned memory: disk full")


def test_a_store_that_fails_is_logged_and_the_verdict_stands(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    gate = _gate(embedder, _Broken(":memory:"))
    filtered = gate.filter(chat_request(QUERY), top_k=8)
    with caplog.at_level(logging.WARNING, logger="toolgate.gateway"):
        assert gate.verify(_call("send_email"), filtered).ok
    assert "disk full" in caplog.text


def test_a_store_that_keeps_failing_is_warned_of_once_until_it_learns_again(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    # Each verified call warned: a full disk was one warning per call, as the learning
    # queue's had been before it warned once per kind of error.
    store = _Broken(":memory:")
    gate = _gate(embedder, store)
    filtered = gate.filter(chat_request(QUERY), top_k=8)
    with caplog.at_level(logging.DEBUG, logger="toolgate.gateway"):
        for _ in range(3):
            assert gate.verify(_call("send_email"), filtered).ok
        store.__class__ = SqliteStore  # the disk has room again: a lesson is learned
        assert gate.verify(_call("send_email"), filtered).ok
        store.__class__ = _Broken
        other = gate.filter(chat_request("email Ann the flight times"), top_k=8)
        assert gate.verify(_call("send_email"), other).ok
    levels = [r.levelno for r in caplog.records if "disk full" in r.getMessage()]
    warned = [logging.WARNING, logging.DEBUG, logging.DEBUG, logging.WARNING]
    assert levels == warned


SECRET = "Pa55wordSecret"


class _Down(SqliteStore):
    """A store whose database does not answer until ``up`` is set; its error, as a store's
    may, names where it is."""

    up = False

    def use(self, scope: str, user: object, **bounds: Any) -> list[str]:
        if not self.up:
            raise StoreError(f"the learned memory at postgresql://db/x?password={SECRET}: gone")
        return super().use(scope, user, **bounds)


def test_a_failing_learned_store_fails_no_request(
    fake: tuple[FakeUpstream, str], embedder: Embedder
) -> None:
    gate = _gate(embedder, _Down(":memory:"))
    fake[0].script = Script()
    with start(fake, gate) as served:
        answer = httpx.post(
            served.url + "/v1/chat/completions", json=chat_request(QUERY), timeout=60
        )
    assert answer.status_code == 200
    assert SECRET not in answer.text


def _memory_of(gate: ToolFilter, request: dict[str, Any]) -> object:
    routed = gate.filter(request, top_k=3)._routed
    assert routed is not None
    return routed.router.memory


def test_a_failing_learned_store_is_warned_of_once_and_tried_again(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    store = _Down(":memory:")
    gate = _gate(embedder, store)
    other = {**chat_request(QUERY), "tools": chat_tools()[:4]}
    with caplog.at_level(logging.WARNING, logger="toolgate.gateway"):
        assert _memory_of(gate, chat_request(QUERY)) is None
        assert _memory_of(gate, other) is None
        store.up = True
        assert _memory_of(gate, other) is None  # not tried again before retry_s passes
        gate._indexes._learning.retry_s = 0.0  # type: ignore[union-attr]
        assert _memory_of(gate, other) is not None  # a router cached while it failed learns
    failures = [r for r in caplog.records if "learned store failed" in r.getMessage()]
    assert len(failures) == 1
    assert "answers again" in caplog.records[-1].getMessage()


class _Unreadable(SqliteStore):
    """A store whose rows the index refuses, as the core refuses numbers it cannot hold: not
    a StoreError, and no fault of the request either."""

    def load(self, scope: str, *, dim: int | None = None) -> list[Any]:
        raise InvalidInputError("learned vectors and weights must be finite")


def test_a_learned_store_the_index_refuses_fails_no_request(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    gate = _gate(embedder, _Unreadable(":memory:"))
    with caplog.at_level(logging.WARNING, logger="toolgate.gateway"):
        assert _memory_of(gate, chat_request(QUERY)) is None
    failures = [r for r in caplog.records if "learned store failed" in r.getMessage()]
    assert len(failures) == 1
    assert "must be finite" in failures[0].getMessage()


def test_the_gateway_config_names_its_learned_store(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('learn = "learned.sqlite3"\n')
    assert load_config(path).learn == str(tmp_path / "learned.sqlite3")
    path.write_text('learn = "postgresql://toolgate@db/toolgate"\n')
    assert load_config(path).learn == "postgresql://toolgate@db/toolgate"
    path.write_text('learn = "host=db dbname=toolgate user=toolgate"\n')  # libpq's keywords
    assert load_config(path).learn == "host=db dbname=toolgate user=toolgate"
    assert load_config(None).learn is None
    for text, message in [
        ("learn = 3\n", "'learn' must be a string, got 3"),
        ('learn = " "\n', "'learn' must be a SQLite path or a postgresql:// address"),
    ]:
        path.write_text(text)
        with pytest.raises(InvalidInputError, match=message):
            load_config(path)


def test_the_gateway_learns_once_from_each_call_it_checks(
    fake: tuple[FakeUpstream, str], embedder: Embedder
) -> None:
    gate = _gate(embedder, SqliteStore(":memory:"))
    upstream, _ = fake
    upstream.script = Script(tool="send_email", args={"to": "ann"})
    messages = [{"role": "user", "content": QUERY}]
    with start(fake, gate, top_k=5, policy="enforce") as served:
        client = anthropic.Anthropic(base_url=served.url, api_key="sk-ant", max_retries=0)
        with (
            client,
            client.messages.stream(
                model="m", max_tokens=16, messages=messages, tools=anthropic_tools()
            ) as stream,
        ):
            stream.get_final_message()  # enforced and streamed: its name is checked first
        served.gateway.learning.join()  # learned on the gateway's learning thread
        assert _learned_tools(gate, QUERY) == ["default/send_email"]
        routed = gate.filter(chat_request(QUERY), top_k=8)._routed
        assert routed is not None
        assert routed.router.memory is not None
        assert routed.router.memory._rows.weights.tolist() == [1.0]  # learned once


def test_the_gateway_config_sets_its_routers_settings(tmp_path: Path) -> None:
    from toolgate.gateway.app import Gateway
    from toolgate.gateway.config import Upstream

    path = tmp_path / "gateway.toml"
    path.write_text("[router]\nserver_weight = 0.35\nbm25_weights = [2, 1, 1, 0]\n")
    config = load_config(path)
    assert (config.router.server_weight, config.router.bm25_weights) == (0.35, (2, 1, 1, 0))
    assert load_config(None).router == RouterConfig()
    upstreams = {"openai": Upstream("https://api.openai.com")}
    gateway = Gateway(dataclasses.replace(config, upstreams=upstreams))
    assert gateway.filter.config.server_weight == 0.35
    for text, message in [
        ("router = 3\n", "'router' must be a table of RouterConfig settings"),
        ("[router]\nnope = 1\n", "router: nope: RouterConfig has no such setting; it has"),
        ("[router]\nalpha = 2\n", "router: alpha must be in [0, 1], got 2"),
    ]:
        path.write_text(text)
        with pytest.raises(InvalidInputError, match=re.escape(message)):
            load_config(path)


class _Held(SqliteStore):
    """A store whose writes wait until the test lets them go, as behind another process's
    write lock."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.writing = threading.Event()
        self.release = threading.Event()
        self.written = threading.Event()

    def _insert(self, sql: str, args: Any) -> int:
        self.writing.set()
        self.release.wait(timeout=10)  # bounded: code that waits here on its loop goes on
        try:
            return super()._insert(sql, args)
        finally:
            self.written.set()


def test_the_gateway_answers_while_its_store_waits_on_a_lock(
    fake: tuple[FakeUpstream, str], embedder: Embedder
) -> None:
    store = _Held()
    gate = _gate(embedder, store)
    upstream, _ = fake
    upstream.script = Script(tool="send_email", args={"to": "ann"})
    with (
        start(fake, gate, top_k=5) as served,
        httpx.Client(base_url=served.url, timeout=30) as client,
    ):
        try:
            answer = client.post("/v1/chat/completions", json=chat_request(QUERY))
            answered_before_the_write = not store.written.is_set()
            assert store.writing.wait(timeout=10)  # the lesson waits on the store now
            health = client.get("/healthz")
        finally:
            store.release.set()
        assert answered_before_the_write
        served.gateway.learning.join()  # the lesson is learned once the store lets it write
    assert answer.headers["x-toolgate-tool-calls"] == "ok"
    assert health.status_code in (200, 503)  # answered (503: nothing to prewarm is "starting")
    assert _learned_tools(gate, QUERY) == ["default/send_email"]

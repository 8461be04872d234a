"""A fake upstream and gateways in front of it, on loopback, shared by the gateway tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.gateway.fake_upstream import FakeUpstream, Script, serving
from toolgate.embedding.embedder import Embedder
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, RouteConfig, Upstream
from toolgate.gateway.filter import ToolFilter
from toolgate.routing.config import RouterConfig

#: SDK clients a test made, closed after it (an open one warns when it is collected).
SDK_CLIENTS: list[Any] = []


@pytest.fixture(autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    yield
    while SDK_CLIENTS:
        SDK_CLIENTS.pop().close()


@dataclass
class Served:
    """A running gateway: its URL, the object, and the fake behind it."""

    url: str
    gateway: Gateway
    fake: FakeUpstream


def sent_names(fake: FakeUpstream) -> list[str]:
    """The function tools the upstream received in the last request, by name."""
    tools = fake.received[-1].body["tools"]
    if "functionDeclarations" in tools[0]:
        return [d["name"] for d in tools[0]["functionDeclarations"]]
    return [t["function"]["name"] if "function" in t else t["name"] for t in tools]


def metric(served: Served, name: str, **labels: str) -> float:
    """A sample of the gateway's metrics, 0 when it has none yet."""
    value = served.gateway.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeUpstream, str]]:
    upstream = FakeUpstream()
    with serving(upstream.app) as url:
        yield upstream, url


@pytest.fixture(scope="module")
def shared_filter(embedder: Embedder) -> ToolFilter:
    """One filter for every gateway of a module, so each tools array is indexed once; its
    top_k is a count, not adaptive selection's ceiling, so each route forwards exactly that
    many tools."""
    return ToolFilter(config=RouterConfig(adaptive=False), embedder=embedder, cache=None)


def start(fake: tuple[FakeUpstream, str], tool_filter: ToolFilter, **options: Any) -> Any:
    """A context serving a gateway to ``fake`` with ``options`` as its default route."""
    upstream, url = fake
    config = GatewayConfig(
        upstreams={name: Upstream(url) for name in ("openai", "anthropic", "gemini")},
        default=RouteConfig(**{"top_k": 3, **options}),
    )
    gateway = Gateway(config, tool_filter=tool_filter)

    class _Context:
        def __enter__(self) -> Served:
            self._serving = serving(gateway.app)
            return Served(self._serving.__enter__(), gateway, upstream)

        def __exit__(self, *exc: object) -> None:
            self._serving.__exit__(*exc)

    return _Context()


@pytest.fixture(scope="module")
def enforcing(fake: tuple[FakeUpstream, str], shared_filter: ToolFilter) -> Iterator[Served]:
    with start(fake, shared_filter, policy="enforce") as served:
        yield served


@pytest.fixture(scope="module")
def annotating(fake: tuple[FakeUpstream, str], shared_filter: ToolFilter) -> Iterator[Served]:
    with start(fake, shared_filter, policy="annotate") as served:
        yield served


@pytest.fixture(autouse=True)
def _fresh_script(request: pytest.FixtureRequest) -> None:
    """Each test starts from a text answer with nothing recorded."""
    if "fake" in request.fixturenames:
        upstream, _ = request.getfixturevalue("fake")
        upstream.script = Script()
        upstream.received.clear()


class CountingEmbedder:
    """The real embedder, counting the texts it is asked to embed in batches (tools, not
    queries) and those it has embedded; the first batch (counted from zero) waits for
    ``hold`` if set, so a test can keep an index build in progress as long as it needs."""

    def __init__(self, inner: Embedder, hold: threading.Event | None = None) -> None:
        self._inner = inner
        self.hold = hold
        self.batch_texts = 0
        self.embedded_texts = 0
        self.model_id = inner.model_id
        self.dim = inner.dim

    def embed(self, texts: Sequence[str], **options: Any) -> np.ndarray:
        if len(texts) > 1:
            first = self.batch_texts == 0
            self.batch_texts += len(texts)
            if first and self.hold is not None:
                assert self.hold.wait(120)
            vectors = self._inner.embed(texts, **options)
            self.embedded_texts += len(texts)
            return vectors
        return self._inner.embed(texts, **options)

    def embed_tokens(self, text: str) -> Any:
        return self._inner.embed_tokens(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

"""The LiteLLM hook, run by LiteLLM itself against a fake upstream on loopback."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

# LiteLLM fetches its model price list from GitHub on import unless told to use its own copy:
# tests never reach the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm

from tests.gateway.fake_upstream import FakeUpstream, serving
from tests.gateway.test_filter import (
    SPECS,
    WEATHER,
    anthropic_tools,
    chat_tools,
    responses_tools,
)
from toolgate.embedding.embedder import Embedder
from toolgate.gateway.filter import ToolFilter
from toolgate.integrations.litellm import ToolgateHook
from toolgate.routing.router import Router

USER = [{"role": "user", "content": WEATHER}]


@pytest.fixture(scope="module")
def hook(embedder: Embedder) -> ToolgateHook:
    return ToolgateHook(top_k=2, tool_filter=ToolFilter(embedder=embedder, cache=None))


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeUpstream, str]]:
    upstream = FakeUpstream()
    with serving(upstream.app) as url:
        yield upstream, url


@pytest.fixture
def hooked(
    hook: ToolgateHook, fake: tuple[FakeUpstream, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[FakeUpstream, str]:
    """The fake upstream, with LiteLLM calling the hook for this test."""
    monkeypatch.setattr(litellm, "callbacks", [hook])
    return fake


# LiteLLM's own types warn when pydantic first builds their schema; nothing of toolgate's.
@pytest.mark.filterwarnings("ignore:Item.* `ReadOnly` qualifier:UserWarning")
def test_litellm_calls_the_hook_and_sends_the_routed_tools(
    hooked: tuple[FakeUpstream, str],
) -> None:
    upstream, url = hooked
    upstream.script.tool = "get_weather"

    async def call() -> object:
        return await litellm.acompletion(
            model="openai/fake-model", api_base=url + "/v1", api_key="sk-x",
            messages=USER, tools=chat_tools(), tool_choice="auto",
        )  # fmt: skip

    answer = asyncio.run(call())
    sent = [t["function"]["name"] for t in upstream.received[-1].body["tools"]]
    assert "get_weather" in sent
    assert len(sent) == 2 < len(SPECS)
    assert upstream.received[-1].body["tool_choice"] == "auto"
    assert answer.choices[0].message.tool_calls[0].function.name == "get_weather"  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore:Item.* `ReadOnly` qualifier:UserWarning")
def test_litellm_responses_calls_are_filtered_on_their_input(
    hooked: tuple[FakeUpstream, str],
) -> None:
    upstream, url = hooked
    tools = [{"type": "function", **t["function"]} for t in chat_tools()]

    async def call() -> object:
        return await litellm.aresponses(
            model="openai/fake-model", api_base=url + "/v1", api_key="sk-x",
            input=WEATHER, tools=tools,
        )  # fmt: skip

    asyncio.run(call())
    litellm.responses(
        model="openai/fake-model", api_base=url + "/v1", api_key="sk-x", input=WEATHER,
        tools=tools,
    )  # fmt: skip
    for received in upstream.received[-2:]:
        assert received.path == "/v1/responses"
        sent = [t["name"] for t in received.body["tools"]]
        assert "get_weather" in sent
        assert len(sent) == 2 < len(SPECS)


def test_the_proxy_hook_filters_chat_and_anthropic_requests(hook: ToolgateHook) -> None:
    for tools in (chat_tools(), anthropic_tools()):
        data = {"model": "m", "messages": USER, "tools": tools, "metadata": {"user": "u"}}
        out = asyncio.run(hook.async_pre_call_hook(None, None, data, "completion"))
        assert isinstance(out, dict)
        assert len(out["tools"]) == 2
        assert out["metadata"]["user"] == "u"
        assert len(data["tools"]) == len(SPECS)
        assert data["metadata"] == {"user": "u"}  # the mark went into a copy
    embedding = {"model": "m", "input": ["x"], "tools": chat_tools()}
    assert asyncio.run(hook.async_pre_call_hook(None, None, embedding, "embeddings")) is embedding


def test_hook_calls_waiting_for_one_new_array_hold_no_thread(embedder: Embedder) -> None:
    """The proxy's executor has a few threads: calls waiting for one tools array's indexing
    must leave them to calls with arrays already indexed."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tests.gateway.conftest import CountingEmbedder

    held = CountingEmbedder(embedder)
    hook = ToolgateHook(top_k=2, tool_filter=ToolFilter(embedder=held, cache=None))
    known = {"model": "m", "messages": USER, "tools": chat_tools()}
    asyncio.run(hook.async_pre_call_hook(None, None, known, "completion"))  # indexed now
    release = threading.Event()
    held.batch_texts, held.hold = 0, release
    new = {"model": "m", "messages": USER, "tools": anthropic_tools()}

    async def main() -> tuple[bool, list[int]]:
        threads = 2
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(threads))
        waiting = [
            asyncio.create_task(hook.async_pre_call_hook(None, None, new, "completion"))
            for _ in range(threads + 2)
        ]
        while held.batch_texts == 0:  # the new array is being indexed
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # every call for it has asked and waits
        try:
            answered = await asyncio.wait_for(
                hook.async_pre_call_hook(None, None, known, "completion"), 60
            )
            still_waiting = not any(task.done() for task in waiting)
        finally:
            release.set()
        assert len(answered["tools"]) == 2
        return still_waiting, [len(out["tools"]) for out in await asyncio.gather(*waiting)]

    assert asyncio.run(main()) == (True, [2] * 4)


# On the proxy, data carries LiteLLM's metadata bucket: ``metadata`` on /chat/completions,
# ``litellm_metadata`` on /v1/messages and /v1/responses.
PROXIED = [
    (litellm.acompletion, "acompletion", "/v1/chat/completions",
     {"messages": USER, "tools": chat_tools(), "metadata": {"user_api_key": "k"}}),
    (litellm.aresponses, "aresponses", "/v1/responses",
     {"input": WEATHER, "tools": responses_tools(), "litellm_metadata": {"user_api_key": "k"}}),
    (litellm.anthropic_messages, "anthropic_messages", "/v1/messages",
     {"messages": USER, "tools": anthropic_tools(), "max_tokens": 10,
      "litellm_metadata": {"user_api_key": "k"}}),
]  # fmt: skip


@pytest.mark.filterwarnings("ignore:Item.* `ReadOnly` qualifier:UserWarning")
@pytest.mark.parametrize(("call", "call_type", "path", "body"), PROXIED)
def test_a_request_the_proxy_hook_filtered_is_not_filtered_again(
    embedder: Embedder,
    fake: tuple[FakeUpstream, str],
    monkeypatch: pytest.MonkeyPatch,
    call: Callable[..., Awaitable[object]],
    call_type: str,
    path: str,
    body: dict[str, Any],
) -> None:
    """The proxy runs its pre-call hook, then LiteLLM the deployment (or pre-request) hook on
    the same request: the second must not index the routed subset, which would also push
    real catalogs out of the filter's cache."""
    upstream, url = fake
    builds: list[int] = []
    original = Router.from_catalog

    def spy(catalog: Any, **options: Any) -> Router:
        builds.append(len(catalog))
        return original(catalog, **options)

    monkeypatch.setattr(Router, "from_catalog", spy)
    hook = ToolgateHook(top_k=2, tool_filter=ToolFilter(embedder=embedder, cache=None))
    monkeypatch.setattr(litellm, "callbacks", [hook])  # the proxy loads its callbacks there
    model = "anthropic/fake-model" if call_type == "anthropic_messages" else "openai/fake-model"
    data = {"model": model, **body}

    async def proxied() -> None:
        filtered = await hook.async_pre_call_hook(None, None, data, call_type)
        base = url if call_type == "anthropic_messages" else url + "/v1"
        await call(**filtered, api_base=base, api_key="sk-x")

    asyncio.run(proxied())
    assert builds == [len(SPECS)]
    received = upstream.received[-1]
    assert received.path == path
    assert len(received.body["tools"]) == 2
    assert "toolgate" not in json.dumps(received.body)  # the mark stays inside LiteLLM


def test_threshold_none_lifts_the_filters_floor_as_in_tool_filter(embedder: Embedder) -> None:
    # threshold is ToolFilter.filter's: None is "no floor", not "the configured one", so a
    # hook can lift the floor of a shared filter whose config sets one.
    from toolgate.routing.config import RouterConfig

    strict = ToolFilter(config=RouterConfig(threshold=0.99), embedder=embedder, cache=None)
    data = {"model": "m", "messages": USER, "tools": chat_tools()}
    assert "tools" not in ToolgateHook(tool_filter=strict).filter(data).request
    lifted = ToolgateHook(top_k=2, threshold=None, tool_filter=strict).filter(data)
    assert len(lifted.kept) == 2

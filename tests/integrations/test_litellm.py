"""The LiteLLM hook, run by LiteLLM itself against a fake upstream on loopback."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

# LiteLLM fetches its model price list from GitHub on import unless told to use its own copy:
# tests never reach the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm

from tests.gateway.fake_upstream import FakeUpstream, serving
from tests.gateway.test_filter import SPECS, WEATHER, anthropic_tools, chat_tools
from toolgate.embedding.embedder import Embedder
from toolgate.gateway.filter import ToolFilter
from toolgate.integrations.litellm import ToolgateHook

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
        assert out["metadata"] == {"user": "u"}
        assert len(data["tools"]) == len(SPECS)
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

"""A bounded load test on loopback: concurrent clients, whole and streamed answers, several
tools arrays at once, every request answered. It stops by itself (a fixed number of
requests, each with a timeout)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.gateway.fake_upstream import FakeUpstream, serving
from tests.gateway.test_filter import SPECS, WEATHER, chat_tools
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, RouteConfig, Upstream
from toolgate.gateway.filter import ToolFilter
from toolgate.gateway.serve import KEEP_ALIVE_SECONDS

CLIENTS = 16
REQUESTS = 96


def _bodies() -> list[dict[str, Any]]:
    """Requests over three tools arrays (two of them new to the filter), half streamed."""
    arrays = [
        chat_tools(),
        [{**t, "function": {**t["function"], "name": t["function"]["name"] + "_b"}}
         for t in chat_tools()],
        chat_tools()[: len(SPECS) // 2],
    ]  # fmt: skip
    return [
        {
            "model": "m",
            "messages": [{"role": "user", "content": f"{WEATHER} ({i})"}],
            "tools": arrays[i % len(arrays)],
            "stream": i % 2 == 0,
        }
        for i in range(REQUESTS)
    ]


async def _drive(base: str, bodies: list[dict[str, Any]]) -> list[str]:
    """Every failure, as ``status: body`` or the exception's name."""
    failures: list[str] = []
    queue = list(reversed(bodies))
    limits = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:

        async def worker() -> None:
            while queue:
                body = queue.pop()
                try:
                    response = await client.post("/v1/chat/completions", json=body)
                    if response.status_code != 200:
                        failures.append(f"{response.status_code}: {response.text[:200]}")
                    elif body["stream"] and not response.text.endswith("data: [DONE]\n\n"):
                        failures.append(f"stream cut short: {response.text[-200:]!r}")
                except httpx.HTTPError as exc:
                    failures.append(type(exc).__name__)

        await asyncio.gather(*(worker() for _ in range(CLIENTS)))
    return failures


def test_concurrent_clients_get_every_answer(embedder: Any) -> None:
    upstream = FakeUpstream(record=False)
    tool_filter = ToolFilter(embedder=embedder, cache=None)
    with serving(upstream.app, timeout_keep_alive=KEEP_ALIVE_SECONDS) as url:
        config = GatewayConfig(upstreams={"openai": Upstream(url)}, default=RouteConfig(top_k=3))
        gateway = Gateway(config, tool_filter=tool_filter)
        with serving(gateway.app, timeout_keep_alive=KEEP_ALIVE_SECONDS) as base:
            failures = asyncio.run(_drive(base, _bodies()))
    assert failures == []
    answered = gateway.metrics.registry.get_sample_value(
        "toolgate_gateway_requests_total", {"endpoint": "openai", "status": "200"}
    )
    assert answered == REQUESTS

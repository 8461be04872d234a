"""The gateway under load on loopback: overhead against calling the upstream directly, at
117 (GitHub's MCP server) and 2,000 tools, throughput with 16 concurrent clients, a bounded
load test that must end with 0 errors, and the memory each extra uvicorn worker costs.

Run: ``.venv/bin/python -m benches.gateway_load`` (about 3 minutes; it stops by itself).
The fake upstream and the gateway (``toolgate gateway``) run as their own processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from tests.shared_data import SHARED

from benches.testbed import topup_tools

GITHUB = SHARED / "data" / "catalogs" / "github-mcp-server.tools-list.json"
PY = sys.executable


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become ready")


def chat_tools(count: int) -> list[dict[str, Any]]:
    real = json.loads(GITHUB.read_text())["tools"]
    tools = real + topup_tools(real, max(0, count - len(real)))
    out, seen = [], set()
    for i, tool in enumerate(tools[:count]):
        name = str(tool["name"]).replace("/", "_")[:60]
        name = name if name not in seen else f"{name}_{i}"
        seen.add(name)
        schema = tool.get("inputSchema") or tool.get("parameters") or {"type": "object"}
        out.append({"type": "function", "function": {
            "name": name, "description": str(tool.get("description", ""))[:1000],
            "parameters": schema}})  # fmt: skip
    return out


def queries(tools: list[dict[str, Any]], count: int) -> list[str]:
    """Distinct user messages (so no query embedding is cached)."""
    rng = random.Random(7)
    out = []
    for i in range(count):
        tool = rng.choice(tools)["function"]
        words = tool["description"].split()[:12]
        out.append(f"please {' '.join(words)} (request {i})")
    return out


def latencies(url: str, bodies: list[bytes], timeout: float = 60) -> list[float]:
    out = []
    with httpx.Client(timeout=timeout) as client:
        for body in bodies:
            started = time.perf_counter()
            response = client.post(url, content=body, headers={"content-type": "application/json"})
            out.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
    return out


async def concurrent(url: str, bodies: list[bytes], clients: int) -> tuple[float, int]:
    """Requests per second and errors with ``clients`` concurrent clients."""
    errors = 0
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while not queue.empty():
            body = queue.get_nowait()
            try:
                response = await client.post(
                    url, content=body, headers={"content-type": "application/json"}
                )
                errors += response.status_code != 200
            except httpx.HTTPError:
                errors += 1

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker(client) for _ in range(clients))), 600)
        return len(bodies) / (time.perf_counter() - started), errors


def memory(pid: int) -> tuple[int, int]:
    """RSS and PSS (kB) of a process."""
    rss = pss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1])
        elif line.startswith("Pss:"):
            pss = int(line.split()[1])
    return rss, pss


def workers_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children]


def start_gateway(upstream: str, workers: int, store: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    proc = subprocess.Popen(
        [PY, "-m", "toolgate", "gateway", "--listen", f"127.0.0.1:{port}",
         "--upstream", f"openai={upstream}", "--top-k", "5", "--workers", str(workers),
         "--store", store],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    _wait(url + "/healthz", proc)
    return proc, url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def main() -> None:
    fake_port = _port()
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    fake = subprocess.Popen(
        [PY, "-m", "uvicorn", "--factory", "tests.gateway.fake_upstream:create_app",
         "--port", str(fake_port), "--log-level", "warning"], env=env,
    )  # fmt: skip
    upstream = f"http://127.0.0.1:{fake_port}"
    store = tempfile.mkdtemp(prefix="toolgate-bench-store-")
    try:
        _wait(upstream + "/v1/models", fake)
        gateway, url = start_gateway(upstream, 1, store)
        try:
            for count in (117, 2000):
                tools = chat_tools(count)
                texts = queries(tools, 300)
                bodies = [json.dumps({"model": "m", "messages": [{"role": "user", "content": t}],
                                      "tools": tools}).encode() for t in texts]  # fmt: skip
                # Index the tools once (minutes at 2,000 tools on a busy 2-core box).
                latencies(url + "/v1/chat/completions", bodies[:3], timeout=900)
                direct = latencies(upstream + "/v1/chat/completions", bodies[:200])
                via = latencies(url + "/v1/chat/completions", bodies[:200])
                p50 = statistics.median(via) - statistics.median(direct)
                p99 = statistics.quantiles(via, n=100)[98] - statistics.quantiles(direct, n=100)[98]
                print(
                    f"{count} tools: direct p50 {statistics.median(direct):.2f} ms, gateway p50 "
                    f"{statistics.median(via):.2f} ms; overhead p50 {p50:.2f} ms, p99 {p99:.2f} ms"
                )
                load = bodies[:300] * 2  # bounded: 600 requests
                rate_direct, _ = asyncio.run(
                    concurrent(upstream + "/v1/chat/completions", load, 16)
                )
                rate, errors = asyncio.run(concurrent(url + "/v1/chat/completions", load, 16))
                print(
                    f"{count} tools, 16 clients, {len(load)} requests: gateway {rate:.0f} req/s "
                    f"(direct {rate_direct:.0f} req/s), errors {errors}"
                )
        finally:
            _stop(gateway)
        totals = {}
        tools = chat_tools(2000)
        user = [{"role": "user", "content": "list my open issues"}]
        body = json.dumps({"model": "m", "messages": user,
                           "tools": tools}).encode()  # fmt: skip
        for workers in (1, 3):
            gateway, url = start_gateway(upstream, workers, store)
            try:
                latencies(url + "/v1/chat/completions", [body], timeout=900)
                for _ in range(12 * workers):  # reach every worker (the kernel spreads accepts)
                    asyncio.run(concurrent(url + "/v1/chat/completions", [body] * 4, 4))
                pids = workers_of(gateway.pid)
                mem = [memory(pid) for pid in pids]
                totals[workers] = (sum(m[0] for m in mem), sum(m[1] for m in mem))
                print(
                    f"{workers} worker(s): RSS {[m[0] // 1024 for m in mem]} MB, "
                    f"PSS {[m[1] // 1024 for m in mem]} MB"
                )
            finally:
                gateway.terminate()
                gateway.wait(30)
        extra_rss = (totals[3][0] - totals[1][0]) / 2 / 1024
        extra_pss = (totals[3][1] - totals[1][1]) / 2 / 1024
        print(
            f"each extra worker (2,000 tools indexed): RSS +{extra_rss:.0f} MB, "
            f"PSS +{extra_pss:.0f} MB"
        )
    finally:
        _stop(fake)


if __name__ == "__main__":
    main()

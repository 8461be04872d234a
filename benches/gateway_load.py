"""The gateway under load on loopback, against calling its upstream directly.

Prints, at 117 tools (GitHub's MCP server) and at 2,000 (topped up with synthetic tools):
the p50 / p99 latency a client sees through ``toolgate gateway`` (one worker) and straight
at the fake upstream, request by request in turn, their difference (the overhead) and the
ratio of the p50s, for new user messages and for the same messages sent again; then the
throughput of 16 concurrent clients both ways, with every failed request listed (the run
must end with 0). Then the 117-tool requests' latency while one request indexes a 2,000-tool
array the gateway has not seen, against the same requests alone, and how long the gateway
takes to stop on SIGTERM with such a request running. Last, the memory one more uvicorn
worker costs (RSS and PSS of the whole process tree with 2 workers and with 3, the 2,000
tools indexed and shared through the router store). The machine's load average is printed
with the figures: on a busy shared box the absolute times mean little, the ratios in one run
more.

Run: ``make bench-gateway`` (``.venv/bin/python -m benches.gateway_load [--quick]``). It
stops by itself: a fixed number of requests, each with a timeout, and every process it
started is stopped (SIGTERM, then SIGKILL after 60 s). The tools are indexed before anything
is measured (the gateway's ``[[prewarm]]``; its ``/healthz`` answers 200 once done), which
takes minutes for 2,000 tools the first time and seconds once the embedding cache
(``$TOOLGATE_HOME/embeddings.sqlite3``) holds them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from tests.shared_data import SHARED

from benches.testbed import topup_tools

GITHUB = SHARED / "data" / "catalogs" / "github-mcp-server.tools-list.json"
PY = sys.executable
ROOT = Path(__file__).resolve().parents[1]
CHAT = "/v1/chat/completions"
CLIENTS = 16
# Longer than the gateway keeps its idle upstream connections, as real APIs' are.
UPSTREAM_KEEP_ALIVE = "75"


@dataclass(frozen=True)
class Sizes:
    """How many requests each measurement makes."""

    sequential: int
    concurrent: int
    warm_rounds: int


FULL = Sizes(sequential=300, concurrent=600, warm_rounds=12)
QUICK = Sizes(sequential=40, concurrent=96, warm_rounds=4)


def chat_tools(count: int) -> list[dict[str, Any]]:
    """``count`` OpenAI Chat tools: GitHub's MCP server's, then synthetic ones."""
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


def bodies(tools: list[dict[str, Any]], count: int, seed: int) -> list[bytes]:
    """``count`` requests carrying ``tools``, each with its own user message (so no query
    embedding comes from the cache)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        words = rng.choice(tools)["function"]["description"].split()[:12]
        message = {"role": "user", "content": f"please {' '.join(words)} (request {seed}-{i})"}
        body = {"model": "m", "messages": [message], "tools": tools}
        out.append(json.dumps(body).encode())
    return out


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> float:
    """Seconds until ``url`` answers 200; an error naming the log if the process exits or
    the time runs out."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} was not ready within {timeout:.0f} s; see {log}")


@dataclass
class Started:
    """A process running: its id, the seconds it took to get ready, and once the block has
    ended, the seconds it took to stop after SIGTERM."""

    pid: int
    seconds: float
    stopped: float = 0.0


@contextmanager
def running(command: list[str], log: Path, ready: str, timeout: float) -> Iterator[Started]:
    """Run ``command`` until the block ends, once ``ready`` answers 200."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        started = Started(proc.pid, 0.0)
        try:
            started.seconds = _wait_ready(ready, proc, log, timeout)
            yield started
        finally:
            proc.terminate()
            signalled = time.monotonic()
            try:
                proc.wait(60)
                started.stopped = time.monotonic() - signalled
            except subprocess.TimeoutExpired:
                print(f"warning: {command[2:4]} ignored SIGTERM for 60 s; killed", flush=True)
                proc.kill()
                proc.wait(30)


def fake_upstream(port: int, log: Path) -> Any:
    command = [
        PY, "-m", "uvicorn", "--factory", "tests.gateway.fake_upstream:create_app",
        "--port", str(port), "--log-level", "warning", "--timeout-keep-alive", UPSTREAM_KEEP_ALIVE,
    ]  # fmt: skip
    return running(command, log, f"http://127.0.0.1:{port}/v1/models", 120)


def gateway(upstream: str, workers: int, folder: Path, log: Path) -> tuple[Any, str]:
    """The gateway command, prewarming every tools file in ``folder``, and its URL."""
    port = _port()
    config = folder / "gateway.toml"
    config.write_text(
        "".join(
            f'[[prewarm]]\nprovider = "openai"\ntools = "{path.name}"\n'
            for path in sorted(folder.glob("tools-*.json"))
        )
    )
    command = [
        PY, "-m", "toolgate", "gateway", "--listen", f"127.0.0.1:{port}",
        "--upstream", f"openai={upstream}", "--top-k", "5", "--workers", str(workers),
        "--store", str(folder / "store"), "--config", str(config),
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    return running(command, log, url + "/healthz", 3600), url


def latencies(pairs: list[tuple[str, bytes]]) -> dict[str, list[float]]:
    """Milliseconds per request, by URL, the requests sent one at a time in the given order."""
    out: dict[str, list[float]] = {}
    with httpx.Client(timeout=120) as client:
        for url, body in pairs:
            started = time.perf_counter()
            response = client.post(url, content=body, headers={"content-type": "application/json"})
            elapsed = (time.perf_counter() - started) * 1000
            response.raise_for_status()
            out.setdefault(url, []).append(elapsed)
    return out


async def concurrent(url: str, load: list[bytes]) -> tuple[float, list[str]]:
    """Requests per second with ``CLIENTS`` concurrent clients, and every failure."""
    failures: list[str] = []
    queue = list(reversed(load))
    limits = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def worker() -> None:
            while queue:
                body = queue.pop()
                try:
                    response = await client.post(
                        url, content=body, headers={"content-type": "application/json"}
                    )
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.text[:300]}")
                except httpx.HTTPError as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")

        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CLIENTS))), 1800)
        return len(load) / (time.perf_counter() - started), failures


def sequential(label: str, upstream: str, url: str, sent: list[bytes]) -> None:
    """Prints the latency of ``sent`` straight at the upstream and through the gateway."""
    pairs = []
    for body in sent:  # in turn, so a slow moment of the machine hits both
        pairs += [(upstream + CHAT, body), (url + CHAT, body)]
    times = latencies(pairs)
    direct, via = times[upstream + CHAT], times[url + CHAT]
    print(
        f"{label}, {len(via)} requests each way: "
        f"direct p50 {statistics.median(direct):.2f} ms p99 {p99(direct):.2f} ms; "
        f"gateway p50 {statistics.median(via):.2f} ms p99 {p99(via):.2f} ms; overhead "
        f"p50 {statistics.median(via) - statistics.median(direct):.2f} ms "
        f"p99 {p99(via) - p99(direct):.2f} ms; p50 gateway / direct "
        f"{statistics.median(via) / statistics.median(direct):.2f}x",
        flush=True,
    )


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def overhead(count: int, upstream: str, url: str, sizes: Sizes) -> list[str]:
    """Sequential latency both ways, then 16 clients both ways; the failures."""
    tools = chat_tools(count)
    sent = bodies(tools, sizes.sequential, seed=count)
    sequential(f"{count:>5} tools, 1 client, new messages", upstream, url, sent)
    # An agent's turn often repeats a request (a retry, the same question asked again): its
    # query embedding comes from the cache, so what is left is the gateway's own work.
    sequential(f"{count:>5} tools, 1 client, same messages again", upstream, url, sent)
    load = bodies(tools, sizes.concurrent, seed=count + 1)
    rate_direct, failed_direct = asyncio.run(concurrent(upstream + CHAT, load))
    rate, failed = asyncio.run(concurrent(url + CHAT, load))
    print(
        f"{count:>5} tools, {CLIENTS} clients, {len(load)} requests each way: gateway "
        f"{rate:.0f} req/s, direct {rate_direct:.0f} req/s ({rate / rate_direct:.2f}x); "
        f"failed: gateway {len(failed)}, direct {len(failed_direct)}",
        flush=True,
    )
    return failed + failed_direct


def new_array(count: int, round_: int) -> list[dict[str, Any]]:
    """``count`` tools the gateway has not seen and whose texts the embedding cache lacks
    (each description ends in the round's number), so indexing them is the whole work."""
    tools = chat_tools(count)
    for tool in tools:
        tool["function"]["description"] += f" (round {round_})"
    return tools


@contextmanager
def indexing(url: str, tools: list[dict[str, Any]]) -> Iterator[list[float | str]]:
    """A request carrying ``tools`` running on another thread for the block; the list it
    yields gets the request's seconds, or its failure, once it ends."""
    body = bodies(tools, 1, seed=7)[0]
    outcome: list[float | str] = []

    def send() -> None:
        started = time.perf_counter()
        try:
            response = httpx.post(
                url + CHAT, content=body, headers={"content-type": "application/json"},
                timeout=1800,
            )  # fmt: skip
            outcome.append(time.perf_counter() - started if response.is_success else
                           f"{response.status_code} {response.text[:300]}")  # fmt: skip
        except httpx.HTTPError as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield outcome
    finally:
        thread.join(1800)


def during_indexing(url: str, sizes: Sizes) -> list[str]:
    """117-tool requests one at a time, alone and while another request indexes 2,000 new
    tools (until it ends); their latencies both ways. The failures."""
    load = bodies(chat_tools(117), sizes.sequential, seed=11)
    alone = latencies([(url + CHAT, body) for body in load[: sizes.sequential // 3]])
    meanwhile: list[float] = []
    with (
        indexing(url, new_array(2000, int(time.time()))) as outcome,
        httpx.Client(timeout=120) as client,
    ):
        for body in itertools.cycle(load):
            if outcome:
                break
            started = time.perf_counter()
            response = client.post(
                url + CHAT, content=body, headers={"content-type": "application/json"}
            )
            meanwhile.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
    before = alone[url + CHAT]
    if isinstance(outcome[0], str):
        return [f"indexing 2,000 new tools: {outcome[0]}"]
    print(
        f"  117 tools while one request indexed 2,000 new ones ({outcome[0]:.0f} s): "
        f"{len(meanwhile)} requests, p50 {statistics.median(meanwhile):.2f} ms, "
        f"max {max(meanwhile):.2f} ms; alone, {len(before)} requests: p50 "
        f"{statistics.median(before):.2f} ms, max {max(before):.2f} ms",
        flush=True,
    )
    return []


def tree_memory(pid: int) -> list[tuple[int, int, int]]:
    """(pid, RSS kB, PSS kB) of ``pid`` and every process under it."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        rss = pss = 0
        for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
        out.append((current, rss, pss))
        for task in Path(f"/proc/{current}/task").iterdir():
            todo += [int(child) for child in (task / "children").read_text().split()]
    return out


def worker_memory(upstream: str, folder: Path, logs: Path, sizes: Sizes) -> None:
    """What one more worker costs, every worker having served the 2,000 tools."""
    body = bodies(chat_tools(2000), 1, seed=3)[0]
    totals = {}
    for workers in (2, 3):
        process, url = gateway(upstream, workers, folder, logs / f"gateway-{workers}w.log")
        with process as started:
            # The kernel spreads connections over the workers: enough rounds reach each.
            for _ in range(sizes.warm_rounds * workers):
                _rate, failed = asyncio.run(concurrent(url + CHAT, [body] * 4))
                if failed:
                    raise RuntimeError(f"warming {workers} workers: {failed[:3]}")
            processes = tree_memory(started.pid)
            totals[workers] = (sum(p[1] for p in processes), sum(p[2] for p in processes))
            rss_each = [p[1] // 1024 for p in processes]
            pss_each = [p[2] // 1024 for p in processes]
            print(
                f"{workers} workers: {len(processes)} processes, RSS {rss_each} MB, "
                f"PSS {pss_each} MB",
                flush=True,
            )
    rss = (totals[3][0] - totals[2][0]) / 1024
    pss = (totals[3][1] - totals[2][1]) / 1024
    print(f"one more worker (2,000 tools indexed): RSS +{rss:.0f} MB, PSS +{pss:.0f} MB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="toolgate-bench-gateway-") as temp:
        folder, logs = Path(temp), Path(temp) / "logs"
        logs.mkdir()
        for count in (117, 2000):
            (folder / f"tools-{count}.json").write_text(json.dumps(chat_tools(count)))
        port = _port()
        with fake_upstream(port, logs / "upstream.log"):
            upstream = f"http://127.0.0.1:{port}"
            process, url = gateway(upstream, 1, folder, logs / "gateway.log")
            with ExitStack() as later, process as started:
                print(f"prewarm of 117 + 2,000 tools: {started.seconds:.0f} s", flush=True)
                for count in (117, 2000):
                    failures += overhead(count, upstream, url, sizes)
                failures += during_indexing(url, sizes)
                # Still indexing when the gateway is told to stop; ended with the stack.
                later.enter_context(indexing(url, new_array(2000, -int(time.time()))))
                time.sleep(2)
            print(
                f"SIGTERM with a request indexing 2,000 new tools: stopped in "
                f"{started.stopped:.1f} s (--graceful-timeout 10)",
                flush=True,
            )
            worker_memory(upstream, folder, logs, sizes)
        for failure in failures:
            print(f"failed: {failure}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

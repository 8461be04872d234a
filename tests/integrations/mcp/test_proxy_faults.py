"""``toolgate mcp-proxy`` when upstreams fail: a server that dies during a call, one that
hangs as it starts again, a command that is not there, configs written by Cline and Roo
Code, and servers on the 1.x SDK, which must not be sent a request they log at length."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION

from tests.fixtures.http_sessions import (
    AnswersAtLength,
    BalancedAwayDuringACall,
    ExpiresDuringACall,
    ForgetsAfterACall,
    RestartsMidAnswer,
    SessionServer,
    ShedsAListing,
    served,
)
from tests.fixtures.mcp import (
    UPSTREAM,
    log_server,
    proxy_params,
    run,
    served_over_http,
    text_of,
)
from tests.fixtures.upstreams import path
from toolgate import InvalidInputError
from toolgate.integrations.mcp.server_config import (
    HttpServer,
    ServerSpec,
    StdioServer,
    load_servers,
    request_timeout,
)
from toolgate.integrations.mcp.upstreams import Upstreams, why_not_started


def lines(file: Path) -> list[str]:
    return file.read_text(encoding="utf-8").splitlines() if file.exists() else []


def gone_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` ends (or is a zombie: nothing may reap an orphan here)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


# -- configs written by Cline and Roo Code -------------------------------------------------

CLINE = {
    "mcpServers": {
        "github": {
            "command": "github-mcp-server",
            "args": ["stdio"],
            "autoApprove": ["get_issue", "list_issues"],
            "timeout": 60,
            "disabled": False,
        },
        "docs": {"type": "streamableHttp", "url": "https://example.com/mcp", "timeout": 15},
        "old": {"command": "old-server", "autoApprove": [], "disabled": True},
    }
}

ROO = {
    "mcpServers": {
        "time": {
            "command": "uvx",
            "args": ["mcp-server-time"],
            "alwaysAllow": ["get_current_time"],
            "timeout": 1.5,
            "disabled": False,
        },
        "git": {"command": "uvx", "args": ["mcp-server-git"], "disabled": True},
    }
}


def test_configs_written_by_cline_and_roo_code_are_read(tmp_path: Path) -> None:
    config = tmp_path / "cline.json"
    config.write_text(json.dumps(CLINE), encoding="utf-8")
    cline = load_servers(config)
    assert list(cline) == ["github", "docs"]  # the disabled one is skipped
    github = cline["github"]
    assert isinstance(github, StdioServer)
    assert (github.command, github.args, request_timeout(github)) == (
        "github-mcp-server",
        ["stdio"],
        60.0,
    )
    assert cline["docs"] == HttpServer("https://example.com/mcp", {}, 15.0)
    config.write_text(json.dumps(ROO), encoding="utf-8")
    roo = load_servers(config)
    assert list(roo) == ["time"]
    assert request_timeout(roo["time"]) == 1.5
    # A server given in code has the SDK's timeout.
    assert request_timeout(StdioServerParameters(command="x")) is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": "x", "timeout": 0}, "'timeout' must be finite seconds > 0, got 0"),
        ({"command": "x", "timeout": "60"}, "'timeout' must be finite seconds > 0, got '60'"),
        ({"command": "x", "timeout": True}, "'timeout' must be finite seconds > 0, got True"),
        ({"command": "x", "timeout": 2**1024 - 1}, "'timeout' must be finite seconds > 0"),
        ({"command": "x", "autoApprove": "all"}, "'autoApprove' must be a list of tool names"),
        ({"url": "http://x", "alwaysAllow": [1]}, "'alwaysAllow' must be a list of tool names"),
    ],
)
def test_a_bad_cline_or_roo_key_is_named(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": entry}}), encoding="utf-8")
    with pytest.raises(InvalidInputError, match=f"mcpServers.a: {message}"):
        load_servers(config)


def test_a_servers_timeout_ends_a_call_that_takes_longer(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    reports = {"command": sys.executable, "args": [path("slow_tool"), str(pid_file)], "timeout": 2}
    proxy = proxy_params(tmp_path, {"reports": reports})

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(proxy) as client:
                call = {"name": "build_report", "arguments": {"title": "Q3"}}
                late = await client.call_tool("call_tool", call)
                body = json.loads(text_of(late))
                assert body["error"] == "upstream_error"
                assert "timed out" in body["message"]

    run(main)
    # Stuck in its tool, the server cannot stop when the proxy closes it: the proxy kills
    # it before its own client gives up on the proxy and kills that.
    assert gone_within(int(pid_file.read_text()), seconds=5.0)


def test_closing_the_upstreams_kills_a_server_that_cannot_stop(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    spec = StdioServerParameters(command=sys.executable, args=[path("slow_tool"), str(pid_file)])

    async def main() -> None:
        upstreams = Upstreams(["reports"])
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(upstreams.hold, "reports", spec, {})
                await upstreams.settled["reports"].wait()
                with anyio.move_on_after(0.5):  # the server is now stuck in its tool
                    await upstreams.connected["reports"].call_tool("build_report", {"title": "Q"})
                await upstreams.close(timeout=0.2)
                # Killed by close itself, not seconds later by the SDK's shutdown, which a
                # client killing the proxy meanwhile would cut short.
                assert gone_within(int(pid_file.read_text()), seconds=0.5)

    run(main)


# -- an upstream that answers with megabytes -----------------------------------------------


@asynccontextmanager
async def _held(
    name: str, spec: ServerSpec, options: dict[str, Any] | None = None
) -> AsyncIterator[Upstreams]:
    """Upstreams holding ``spec``'s server as ``name`` for the block, connected (or failed to),
    and closed after it."""
    upstreams = Upstreams([name])
    async with anyio.create_task_group() as group:
        group.start_soon(upstreams.hold, name, spec, options or {})
        await upstreams.settled[name].wait()
        try:
            yield upstreams
        finally:
            await upstreams.close(timeout=10)


def test_an_http_upstreams_answer_is_read_up_to_its_servers_limit() -> None:
    two_megabytes = {"chars": 2 << 20}

    async def main() -> None:
        with anyio.fail_after(60):
            async with served_over_http(log_server()) as url:
                upstreams = Upstreams(["logs", "capped"])
                specs = {
                    "logs": HttpServer(url),
                    "capped": HttpServer(url, max_result_bytes=1 << 16),
                }
                async with anyio.create_task_group() as group:
                    for name, spec in specs.items():
                        # On the handshake era, the server answers on an event stream.
                        group.start_soon(upstreams.hold, name, spec, {"mode": "legacy"})
                        await upstreams.settled[name].wait()
                    # Past the SDK's 1 MiB, within the proxy's 4 MiB: the limit the model is
                    # told of decides.
                    whole = await upstreams.connected["logs"].call_tool("read_log", two_megabytes)
                    assert len(text_of(whole)) == 2 << 20
                    # Far past a server's own limit: cut off as it is read.
                    with pytest.raises(MCPError, match="exceeded the 196608 byte limit"):
                        await upstreams.connected["capped"].call_tool("read_log", two_megabytes)
                    await upstreams.close(timeout=10)

    run(main)


@pytest.mark.parametrize("gzip", [False, True])
def test_an_http_upstreams_plain_json_answer_is_read_up_to_its_servers_limit(gzip: bool) -> None:
    # An answer sent as one JSON body, not an event stream, was read whole by the SDK; one
    # compressed was counted as it came on the wire, so 24 KB of gzip were 24 MB read whole.
    notes = AnswersAtLength(gzip=gzip)

    async def main() -> None:
        with anyio.fail_after(60):
            async with served(notes) as url:
                spec = HttpServer(url, max_result_bytes=1024)
                async with _held("notes", spec, {"mode": "legacy"}) as upstreams:
                    client = upstreams.connected["notes"]
                    tracemalloc.start()
                    try:
                        with pytest.raises(MCPError, match="more than the 67,584 bytes the"):
                            await client.call_tool("add_note", {"title": "24"})
                        peak = tracemalloc.get_traced_memory()[1]
                    finally:
                        tracemalloc.stop()
                    assert peak < 4 << 20
                    assert text_of(await client.call_tool("add_note", {"title": "0"})) == ""

    run(main)


# The id where the Python SDK writes it, and where the TypeScript SDK's JSON.stringify does.
@pytest.mark.parametrize("id_at", ["first", "last"])
def test_a_stdio_upstreams_line_is_read_up_to_its_servers_limit(id_at: str) -> None:
    # Far past the limit: dropped as it is read (the SDK read it whole, joining each piece
    # to the ones before), the call it answers told so, and the connection goes on.
    spec = StdioServer(command=sys.executable, args=[path("long_lines")], max_result_bytes=1024)

    async def main() -> None:
        with anyio.fail_after(60):
            async with _held("dump", spec) as upstreams:
                client = upstreams.connected["dump"]
                tracemalloc.start()
                try:
                    with pytest.raises(MCPError, match="more than the 67,584 bytes the proxy"):
                        await client.call_tool("dump", {"mb": 24, "id_at": id_at})
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                assert peak < 4 << 20
                answer = await client.call_tool("dump", {"mb": 0, "id_at": id_at})
                assert text_of(answer) == ""

    run(main)


def test_a_stdio_servers_own_request_too_long_is_refused_to_it_not_to_a_call() -> None:
    # The server's request has an id, of the server's own count: it was taken for the answer
    # to the client's request of that id, which failed, and the server waited for ever.
    spec = StdioServer(command=sys.executable, args=[path("long_lines")], max_result_bytes=1024)

    async def main() -> None:
        with anyio.fail_after(60):
            async with _held("dump", spec) as upstreams:
                client = upstreams.connected["dump"]
                answer = await client.call_tool("dump", {"mb": 2, "ask": True})
                assert "more than the 67,584 bytes the proxy reads" in text_of(answer)
                assert text_of(await client.call_tool("dump", {"mb": 0})) == ""

    run(main)


def test_a_stdio_line_too_long_naming_no_request_closes_its_connection() -> None:
    # No request can be told of it: closed rather than have its call wait forever.
    spec = StdioServer(command=sys.executable, args=[path("long_lines")], max_result_bytes=1024)

    async def main() -> None:
        with anyio.fail_after(60):
            async with _held("dump", spec) as upstreams:
                with pytest.raises(MCPError, match="Connection closed"):
                    await upstreams.connected["dump"].call_tool("dump", {"mb": 2, "id_at": "none"})

    run(main)


# -- a key in an upstream's URL -------------------------------------------------------------


def test_an_http_upstreams_key_in_its_url_is_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)

    async def main() -> None:
        with anyio.fail_after(60):
            async with served_over_http(log_server()) as url:
                upstreams = Upstreams(["logs"])
                spec = HttpServer(f"{url}?api_key=sk-url-secret")
                async with anyio.create_task_group() as group:
                    group.start_soon(upstreams.hold, "logs", spec, {"mode": "legacy"})
                    await upstreams.settled["logs"].wait()
                    await upstreams.connected["logs"].list_tools()
                    await upstreams.close(timeout=10)

    run(main)
    # The client side's records (the test's server logs its own access lines).
    logged = [r.getMessage() for r in caplog.records if r.name.split(".")[0] in ("httpx2", "mcp")]
    logged = [m for m in logged if "127.0.0.1" in m]
    assert any("HTTP Request: POST http://127.0.0.1:" in m for m in logged)
    assert not [m for m in logged if "sk-url-secret" in m]


def test_why_an_http_server_did_not_start_names_no_key_in_its_url() -> None:
    spec = HttpServer("https://mcp.example.com/sk-path-secret/mcp?api_key=query-secret")
    error = RuntimeError(f"Client error '401 Unauthorized' for url '{spec.url}'")
    assert why_not_started(spec, error) == (
        "RuntimeError(\"Client error '401 Unauthorized' for url 'https://mcp.example.com/...'\")"
    )


# -- a command that is not there -----------------------------------------------------------


def test_a_missing_command_is_named_with_its_server(tmp_path: Path) -> None:
    servers = {
        "git": {"command": "no-such-mcp-server-git", "args": ["--repository", "."]},
        "notes": {"command": sys.executable, "args": [str(tmp_path / "notes.py")]},
    }
    (tmp_path / "notes.py").write_text(UPSTREAM, encoding="utf-8")
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    with subprocess.Popen(
        [sys.executable, "-m", "toolgate", "mcp-proxy", "--config", str(config), "--lenient"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    ) as process:
        assert process.stderr is not None
        try:
            first = process.stderr.readline().decode()
        finally:
            process.kill()
    assert first == (
        "toolgate mcp-proxy: cannot connect to MCP server 'git': command "
        "'no-such-mcp-server-git' not found on PATH; going on without it\n"
    )


def test_why_a_stdio_server_did_not_start_names_what_is_missing(tmp_path: Path) -> None:
    missing = StdioServerParameters(command=str(tmp_path / "bin" / "server"))
    assert why_not_started(missing, FileNotFoundError(2, "No such file or directory")) == (
        f"command {str(tmp_path / 'bin' / 'server')!r} not found"
    )
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\n", encoding="utf-8")  # there, but not executable
    denied = StdioServerParameters(command=str(script))
    assert why_not_started(denied, PermissionError(13, "Permission denied")) == (
        f"command {str(script)!r} cannot be run: Permission denied"
    )
    elsewhere = StdioServerParameters(command="sh", cwd=str(tmp_path / "gone"))
    assert why_not_started(elsewhere, FileNotFoundError(2, "No such file or directory")) == (
        f"its working directory {str(tmp_path / 'gone')!r} does not exist"
    )
    # Not a start failure: said as it is.
    assert why_not_started(missing, TimeoutError("no answer within 5 s")) == (
        "TimeoutError('no answer within 5 s')"
    )


# -- a server that dies during a call ------------------------------------------------------


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_call_cut_off_by_its_servers_death_is_resent_only_if_harmless(
    tmp_path: Path, idempotent: bool
) -> None:
    calls, marker = tmp_path / "calls.txt", tmp_path / "crashed"
    args = [path("crashing"), str(calls), str(marker)]
    flaky = {"command": sys.executable, "args": [*args, "--idempotent"] if idempotent else args}
    proxy = proxy_params(tmp_path, {"flaky": flaky})
    call = {"name": "fragile_job", "arguments": {"name": "nightly"}}

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(proxy) as client:
                first = await client.call_tool("call_tool", call)
                if idempotent:  # sent again to the restarted server
                    assert text_of(first) == "job nightly done"
                    assert lines(calls) == ["called", "called"]
                    return
                assert first.is_error
                body = json.loads(text_of(first))
                assert body["error"] == "interrupted"
                assert body["servers"] == ["flaky"]
                assert "may or may not have run" in body["message"]
                assert "was started again" in body["message"]
                assert lines(calls) == ["called"]  # not run twice
                # The server is back: the model's own retry runs.
                again = await client.call_tool("call_tool", call)
                assert text_of(again) == "job nightly done"
                assert lines(calls) == ["called", "called"]

    run(main)


# -- an HTTP server that forgets the proxy's session -----------------------------------------


@asynccontextmanager
async def _proxied(tmp_path: Path, notes: SessionServer) -> AsyncIterator[Client]:
    """A client of a proxy in front of ``notes``, served over HTTP."""
    async with (
        served(notes) as url,
        Client(proxy_params(tmp_path, {"notes": {"url": url}})) as client,
    ):
        yield client


# -32000, in the TypeScript SDK's example servers' 400, is the code the Python SDK gives a
# closed connection: the status of the call's own request, not the code, tells it did not run.
@pytest.mark.parametrize(("forgotten", "code"), [(404, None), (400, None), (400, -32000)])
def test_a_session_the_http_server_forgot_is_started_anew_and_the_call_resent(
    tmp_path: Path, forgotten: int, code: int | None
) -> None:
    notes = SessionServer(forgotten, code)

    async def main() -> None:
        with anyio.fail_after(120):
            async with _proxied(tmp_path, notes) as client:
                call = {"name": "add_note", "arguments": {"title": "first"}}
                assert text_of(await client.call_tool("call_tool", call)) == "saved first"
                notes.forget()  # restarted, redeployed, expired: the session is gone
                # Not run by the server, so sent again, in a new session, though the
                # tool is not marked idempotent.
                call = {"name": "add_note", "arguments": {"title": "second"}}
                assert text_of(await client.call_tool("call_tool", call)) == "saved second"
                assert notes.initialized == 2
                assert notes.calls == ["first", "second"]

    run(main)


def test_a_call_that_ran_in_a_new_session_is_not_reported_failed(tmp_path: Path) -> None:
    # The new session is listed before it takes the call: a listing inside the call, refused
    # after the call ran, told the model the call failed, and it would call it again.
    notes = ForgetsAfterACall(404)

    async def main() -> None:
        with anyio.fail_after(120):
            async with _proxied(tmp_path, notes) as client:
                call = {"name": "add_note", "arguments": {"title": "first"}}
                assert text_of(await client.call_tool("call_tool", call)) == "saved first"
                notes.forget()
                call = {"name": "add_note", "arguments": {"title": "second"}}
                assert text_of(await client.call_tool("call_tool", call)) == "saved second"
                assert notes.calls == ["first", "second"]

    run(main)


def test_an_http_servers_400_in_a_live_session_is_passed_on_not_resent(tmp_path: Path) -> None:
    notes = SessionServer(forgotten=400)

    async def main() -> None:
        with anyio.fail_after(120):
            async with _proxied(tmp_path, notes) as client:
                call = {"name": "strict_note", "arguments": {"title": "long"}}
                refused = await client.call_tool("call_tool", call)
                assert refused.is_error
                assert "the title is too long" in json.loads(text_of(refused))["message"]
                assert notes.initialized == 1  # the session was not started again
                call = {"name": "add_note", "arguments": {"title": "short"}}
                assert text_of(await client.call_tool("call_tool", call)) == "saved short"
                assert notes.initialized == 1

    run(main)


# A tool's own error that merely mentions sessions (one starting a browser session) answers
# the call by its id: it is no refusal of the proxy's session.
@pytest.mark.parametrize(
    "refusal",
    [(-32602, "Invalid params: the title is too long"), (-32000, "session limit reached")],
)
def test_a_400_naming_no_session_is_the_servers_answer_whatever_the_listing_after_it(
    tmp_path: Path, refusal: tuple[int, str]
) -> None:
    # The JSON-RPC error in the 400's body is the server's answer in a live session: the
    # proxy neither checks the session with a listing (here refused by a busy gateway) nor
    # starts a new one and sends the call there again.
    notes = ShedsAListing(refusal)

    async def main() -> None:
        with anyio.fail_after(120):
            async with _proxied(tmp_path, notes) as client:
                call = {"name": "add_note", "arguments": {"title": "first"}}
                assert text_of(await client.call_tool("call_tool", call)) == "saved first"
                lists = notes.lists
                call = {"name": "strict_note", "arguments": {"title": "long"}}
                refused = await client.call_tool("call_tool", call)
                assert refused.is_error
                assert refusal[1] in json.loads(text_of(refused))["message"]
                assert notes.strict == 1  # not sent again
                assert notes.initialized == 1  # nor in a new session
                assert notes.lists == lists  # nor the session checked

    run(main)


def test_a_call_whose_answer_a_restart_cut_off_is_not_resent(tmp_path: Path) -> None:
    notes = RestartsMidAnswer()

    async def main() -> None:
        with anyio.fail_after(120):
            async with _proxied(tmp_path, notes) as client:
                call = {"name": "add_note", "arguments": {"title": "pay invoice 42"}}
                cut = await client.call_tool("call_tool", call)
                # The call ran: the 404 the resumption of its answer got says nothing
                # of the call itself, which is not marked idempotent.
                assert cut.is_error
                body = json.loads(text_of(cut))
                assert body["error"] == "interrupted"
                assert "may or may not have run" in body["message"]
                assert notes.calls == ["pay invoice 42"]
                # The server, restarted, is given a new session.
                call = {"name": "add_note", "arguments": {"title": "next"}}
                assert text_of(await client.call_tool("call_tool", call)) == "saved next"
                assert notes.initialized == 2

    run(main)


def _slow_call_then_fast(
    tmp_path: Path,
    notes: SessionServer,
    meanwhile: Callable[[], None],
    then: Callable[[], None] = lambda: None,
) -> dict[str, str]:
    """The answers to note ``slow`` and then ``fast`` through a proxy in front of ``notes``:
    ``meanwhile`` runs once the server holds the slow call, ``then`` once fast is answered."""
    answers: dict[str, str] = {}

    async def main() -> None:
        with anyio.fail_after(120):
            async with served(notes) as url:
                proxy = proxy_params(tmp_path, {"notes": {"url": url}})
                async with Client(proxy) as client, anyio.create_task_group() as group:

                    async def add(title: str) -> None:
                        call = {"name": "add_note", "arguments": {"title": title}}
                        answers[title] = text_of(await client.call_tool("call_tool", call))

                    group.start_soon(add, "slow")
                    while notes.calls != ["slow"]:
                        await anyio.sleep(0.01)
                    meanwhile()
                    await add("fast")
                    then()

    run(main)
    return answers


def test_a_call_refused_as_of_a_forgotten_session_is_resent_whatever_else_is_answered(
    tmp_path: Path,
) -> None:
    # The session expires while the slow call runs: the fast call is refused, so not run;
    # the slow call's 200, which comes in between, does not make the refusal a failure.
    notes = ExpiresDuringACall()
    answers = _slow_call_then_fast(tmp_path, notes, notes.forget)
    assert answers == {"slow": "saved slow", "fast": "saved fast"}
    assert notes.calls == ["slow", "fast"]
    assert notes.initialized == 2


def test_a_new_session_does_not_cut_the_calls_under_way_in_the_old_one(tmp_path: Path) -> None:
    # The old connection is closed once its calls are done, not under them: the slow call
    # was not refused, and its answer still comes.
    notes = BalancedAwayDuringACall()
    sessions: list[int] = []

    def away() -> None:  # the fast call is refused, so sent again in a new session
        notes.away = True

    def released() -> None:
        sessions.append(notes.initialized)
        notes.release.set()

    answers = _slow_call_then_fast(tmp_path, notes, away, released)
    assert answers == {"slow": "saved slow", "fast": "saved fast"}
    assert notes.calls == ["slow", "fast"]
    assert sessions == [2]


# -- a server that hangs as it starts again ------------------------------------------------


GIT_STATUS = {"name": "git_status", "arguments": {"path": "."}}


def git_that_hangs_on_restart(tmp_path: Path, retry_after: str) -> StdioServerParameters:
    """The proxy in front of :mod:`tests.fixtures.upstreams.hangs_on_restart`, which writes
    its starts to ``starts.txt`` and hangs when started again until ``release`` exists."""
    starts, release = tmp_path / "starts.txt", tmp_path / "release"
    git = {"command": sys.executable, "args": [path("hangs_on_restart"), str(starts), str(release)]}
    flags = ["--connect-timeout", "10", "--retry-after", retry_after]
    return proxy_params(tmp_path, {"git": git}, *flags)


async def call_git_status_that_kills_it(client: Client) -> None:
    """Call ``git_status``, which kills the server; the restart hangs, and this call waits
    the connect timeout."""
    first = json.loads(text_of(await client.call_tool("call_tool", GIT_STATUS)))
    assert first["error"] == "server_unavailable"


def test_a_server_that_hangs_on_restart_is_down_at_once_not_restarted_per_call(
    tmp_path: Path,
) -> None:
    # Started again 10 minutes later at the soonest: within the test, not at all.
    proxy = git_that_hangs_on_restart(tmp_path, "600")
    call = GIT_STATUS

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(proxy) as client:
                await call_git_status_that_kills_it(client)
                for _ in range(3):  # each answered at once, without starting it again
                    later = await client.call_tool("call_tool", call)
                    body = json.loads(text_of(later))
                    assert body == {
                        "error": "server_unavailable",
                        "message": "Calling 'git_status' failed: server 'git' is not "
                        "answering; retry later.",
                        "servers": ["git"],
                    }
                assert lines(tmp_path / "starts.txt") == ["started", "started"]

    run(main)


def test_a_server_that_hung_on_restart_is_tried_again_and_comes_back(tmp_path: Path) -> None:
    proxy = git_that_hangs_on_restart(tmp_path, "0.5")
    call = GIT_STATUS

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(proxy) as client:
                await call_git_status_that_kills_it(client)
                (tmp_path / "release").touch()  # the next start in the background gets through
                done = await client.call_tool("call_tool", call)
                while done.is_error:
                    assert json.loads(text_of(done))["error"] == "server_unavailable"
                    await anyio.sleep(0.2)
                    done = await client.call_tool("call_tool", call)
                assert text_of(done) == "clean: ."
        # Tried again at growing intervals, not at every call.
        assert 3 <= len(lines(tmp_path / "starts.txt")) <= 5

    run(main)


# -- the era probe -------------------------------------------------------------------------


def test_upstreams_are_asked_their_era_in_a_way_1x_servers_take_quietly(tmp_path: Path) -> None:
    log = tmp_path / "old.log"
    old = [path("handshake_era"), str(log)]
    servers = {
        "old": StdioServerParameters(command=sys.executable, args=old),
        "new": StdioServerParameters(command=sys.executable, args=[path("crashing"), "-", "-"]),
    }

    async def main() -> None:
        upstreams = Upstreams(list(servers))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                for name, spec in servers.items():
                    group.start_soon(upstreams.hold, name, spec, {})
                for event in upstreams.settled.values():
                    await event.wait()
                assert upstreams.errors == {}
                old, new = upstreams.connected["old"], upstreams.connected["new"]
                assert old.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
                assert new.protocol_version == LATEST_MODERN_VERSION  # still the newest era
                tools = await old.list_tools()
                assert [tool.name for tool in tools.tools] == ["get_current_time"]
                await upstreams.close(timeout=10)

    run(main)
    assert lines(log) == []  # nothing it could not read

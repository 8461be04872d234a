"""What ``toolgate mcp-proxy`` answers on the wire to lines that are no MCP message: a client
that sends one is told, never left waiting."""

from __future__ import annotations

import importlib
import json
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.types import JSONRPCError

from tests.fixtures.mcp import UPSTREAM
from tests.integrations.mcp.test_serve import initialize, proxy_process
from toolgate.integrations.mcp.stdio_server import checked_line, refusal


def answers(process: subprocess.Popen[bytes], count: int, timeout: float = 30.0) -> list[Any]:
    """The next ``count`` lines the proxy writes, as JSON (fewer if it stays silent)."""
    assert process.stdout is not None
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and (left := deadline - time.monotonic()) > 0:
        if select.select([process.stdout], [], [], left)[0]:
            out.append(json.loads(process.stdout.readline()))
    return out


def test_lines_that_are_no_mcp_message_are_answered_over_stdio(tmp_path: Path) -> None:
    upstream = tmp_path / "notes_server.py"
    upstream.write_text(textwrap.dedent(UPSTREAM), encoding="utf-8")
    config = tmp_path / "servers.json"
    notes = {"command": sys.executable, "args": [str(upstream)]}
    config.write_text(json.dumps({"mcpServers": {"notes": notes}}), encoding="utf-8")
    with proxy_process(config) as process:
        assert initialize(process)["result"]["serverInfo"]["name"] == "toolgate"
        assert process.stdin is not None
        lines = [
            '{"jsonrpc": "2.0", "id": 2, "method": "ping"',  # cut short
            json.dumps([{"jsonrpc": "2.0", "id": 3, "method": "ping"}]),  # a batch
            json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}),
            json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}),
            json.dumps({"id": 7, "method": "ping"}),  # no "jsonrpc"
            json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": 5}),
            '"ping"',
            "",  # a blank line is no message, and no answer
            json.dumps({"jsonrpc": "2.0", "method": "notifications/made_up"}),  # ignored
            json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
        ]
        process.stdin.write("".join(f"{line}\n" for line in lines).encode())
        process.stdin.flush()
        try:
            got = answers(process, 8)
            # Nothing more came for the blank line or the notification: the next answer is
            # to the next request.
            process.stdin.write(b'{"jsonrpc": "2.0", "id": 10, "method": "ping"}\n')
            process.stdin.flush()
            last = answers(process, 1)
        finally:
            process.kill()
    assert last == [{"jsonrpc": "2.0", "id": 10, "result": {}}]
    assert {"jsonrpc": "2.0", "id": 9, "result": {}} in got
    errors = sorted(
        ((a["id"] if a["id"] is not None else -1), a["error"]["code"]) for a in got if "error" in a
    )
    # Each: JSON-RPC's parse error or invalid request, with the request's id where it has
    # one that can be an id.
    invalid = [(-1, -32600)] * 4
    assert errors == [(-1, -32700), *invalid, (7, -32600), (8, -32600)]
    batch = next(a for a in got if "batch" in a.get("error", {}).get("message", ""))
    assert batch["id"] is None


def test_a_refusal_names_what_is_wrong() -> None:
    parse = refusal("{")
    assert parse is not None
    assert parse.error.code == -32700
    assert parse.error.message.startswith("Parse error")
    bad_id = refusal('{"jsonrpc": "2.0", "id": true, "method": "ping"}')
    assert bad_id is not None
    assert bad_id.id is None
    assert "id" in bad_id.error.message
    # MCP messages pass, requests, notifications and answers alike.
    for line in (
        '{"jsonrpc": "2.0", "id": "a", "method": "ping"}',
        '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        '{"jsonrpc": "2.0", "id": 4, "result": {}}',
        '{"jsonrpc": "2.0", "id": 4, "error": {"code": -1, "message": "no"}}',
    ):
        assert refusal(line) is None
    # A broken answer to the proxy's own request answers nothing: there is nobody to tell.
    assert refusal('{"jsonrpc": "2.0", "id": 4, "result": 5}') is None


def test_a_broken_answer_to_the_proxys_request_fails_that_request() -> None:
    # The SDK drops an answer it cannot read, and the proxy's request it answers (an
    # upstream's elicitation, passed on) waited its whole 10 minutes: it now fails at once.
    for line in (
        '{"jsonrpc": "2.0", "id": 4, "result": null}',
        '{"jsonrpc": "2.0", "id": 4, "error": {"code": "no"}}',
    ):
        read = checked_line(line)
        assert isinstance(read, str)
        error = JSONRPCError.model_validate_json(read)
        assert error.id == 4
        assert "answer" in error.error.message
    # One that names no request of the proxy's is left to the SDK, which drops it.
    unnamed = '{"jsonrpc": "2.0", "id": null, "result": 5}'
    assert checked_line(unnamed) == unnamed
    fine = '{"jsonrpc": "2.0", "id": 4, "result": {}}'
    assert checked_line(fine) == fine


def test_a_notification_with_a_null_id_is_read_as_one() -> None:
    # JSON-RPC 1.0 spelled a notification with "id": null, and clients built on its
    # libraries still do; the SDK reads one as the notification it is. Refused, a client's
    # notifications/initialized was lost (its session never began), and it got an answer
    # to a message that awaits none.
    for line in (
        '{"jsonrpc": "2.0", "id": null, "method": "notifications/initialized"}',
        '{"jsonrpc": "2.0", "id": null, "method": "notifications/cancelled", '
        '"params": {"requestId": 3}}',
    ):
        assert refusal(line) is None
        assert checked_line(line) == line
    # A request with a null id is still refused: its client waits for an answer.
    assert refusal('{"jsonrpc": "2.0", "id": null, "method": "ping"}') is not None


def test_the_proxy_loads_without_the_sdks_private_claim_of_stdin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # _claim_fd is the SDK's private helper, which any 2.x release may rename: imported with
    # the module, its loss failed `import` of both transports (http reads checked_line here).
    import mcp.server.stdio

    import toolgate.integrations.mcp.stdio_server as module

    monkeypatch.delattr(mcp.server.stdio, "_claim_fd")
    reloaded = importlib.reload(module)
    try:
        buffer, release = reloaded.claimed_stdin()
        # stdin is read in place then, as the SDK itself does when it cannot claim it.
        assert buffer is sys.stdin.buffer
        assert release is None
    finally:
        monkeypatch.undo()
        importlib.reload(module)

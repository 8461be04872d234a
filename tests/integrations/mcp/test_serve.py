"""``toolgate mcp-proxy`` as a process: its config file, starting, restarting and ordering
its upstreams, and stopping on a signal."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.fixtures.mcp import (
    PID_WRITING_UPSTREAM,
    UPSTREAM,
    answer_folder,
    found_tools,
    github_server,
    proxy_params,
    run,
    text_of,
    use_notes_through_proxy,
)
from tests.fixtures.upstreams import path
from toolgate import InvalidInputError
from toolgate.integrations.mcp.answers import MAX_RESULT_BYTES
from toolgate.integrations.mcp.server_config import (
    HttpServer,
    load_servers,
    result_limit,
    tool_overrides,
)
from toolgate.integrations.mcp.upstreams import Upstreams

#: An upstream whose one tool fails with the code the SDK gives a closed connection.
BUSY_UPSTREAM = '''
import sys
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

server = MCPServer("seats")

@server.tool()
def reserve_seat(row: int) -> str:
    """Reserve a seat in a row of the theatre."""
    with open(sys.argv[1], "a") as calls:
        calls.write("called\\n")
    raise MCPError(-32000, "no seats left")

server.run("stdio")
'''


def test_a_normal_stop_over_stdio_prints_nothing(tmp_path: Path) -> None:
    upstream = tmp_path / "notes_server.py"
    upstream.write_text(textwrap.dedent(UPSTREAM), encoding="utf-8")
    notes = {"command": sys.executable, "args": [str(upstream)]}
    proxy = proxy_params(tmp_path, {"notes": notes}, "--top-k", "1")
    errors = tmp_path / "stderr.txt"

    async def main() -> None:
        with anyio.fail_after(120), errors.open("w") as errlog:
            client = Client(stdio_client(proxy, errlog=errlog), elicitation_callback=answer_folder)
            async with client:
                await use_notes_through_proxy(client, "groceries")

    run(main)  # the client closes the proxy's stdin: a normal stop
    # Not "stopped watching 'notes': SubscriptionLost(...)": the upstream closing as the
    # proxy stops is no failure to report.
    assert errors.read_text(encoding="utf-8") == ""


def test_an_upstream_that_dies_while_the_proxy_runs_is_still_reported(tmp_path: Path) -> None:
    calls, marker = tmp_path / "calls.txt", tmp_path / "crashed"
    flaky = {"command": sys.executable, "args": [path("crashing"), str(calls), str(marker)]}
    proxy = proxy_params(tmp_path, {"flaky": flaky})
    errors = tmp_path / "stderr.txt"
    call = {"name": "fragile_job", "arguments": {"name": "nightly"}}

    async def main() -> None:
        with anyio.fail_after(120), errors.open("w") as errlog:
            async with Client(stdio_client(proxy, errlog=errlog)) as client:
                assert (await client.call_tool("call_tool", call)).is_error  # it died
                assert text_of(await client.call_tool("call_tool", call)) == "job nightly done"

    run(main)
    stderr = errors.read_text(encoding="utf-8")
    assert "toolgate mcp-proxy: stopped watching 'flaky': " in stderr
    assert "restarted 'flaky'" in stderr


def test_an_upstream_error_with_the_closed_connection_code_is_not_called_twice(
    tmp_path: Path,
) -> None:
    upstream, calls = tmp_path / "seats.py", tmp_path / "calls.txt"
    upstream.write_text(textwrap.dedent(BUSY_UPSTREAM), encoding="utf-8")
    servers = {"seats": {"command": sys.executable, "args": [str(upstream), str(calls)]}}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    argv = ["-m", "toolgate", "mcp-proxy", "--config", str(config)]
    proxy = StdioServerParameters(command=sys.executable, args=argv)

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(proxy) as client:
                call = {"name": "reserve_seat", "arguments": {"row": 3}}
                failed = await client.call_tool("call_tool", call)
                assert failed.is_error
                assert "no seats left" in text_of(failed)

    run(main)
    # The server answered: its error is not a dead connection, and the call is not resent.
    assert calls.read_text(encoding="utf-8").splitlines() == ["called"]


#: An upstream whose one tool answers with as many characters as it is asked for.
LOG_UPSTREAM = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("logs")

@server.tool()
def read_log(chars: int) -> str:
    """Read the server's log, up to a number of characters."""
    return "x" * chars

server.run("stdio")
'''


def test_a_servers_max_result_bytes_bounds_the_answers_passed_on(tmp_path: Path) -> None:
    upstream = tmp_path / "logs.py"
    upstream.write_text(LOG_UPSTREAM, encoding="utf-8")
    logs = {"command": sys.executable, "args": [str(upstream)], "maxResultBytes": 4096}
    proxy = proxy_params(tmp_path, {"logs": logs})

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(proxy) as client:
                call = {"name": "read_log", "arguments": {"chars": 1000}}
                assert text_of(await client.call_tool("call_tool", call)) == "x" * 1000
                call["arguments"] = {"chars": 10_000}
                dropped = json.loads(text_of(await client.call_tool("call_tool", call)))
                assert (dropped["error"], dropped["limit"]) == ("result_too_large", 4096)

    run(main)


def test_toolgate_mcp_proxy_serves_over_stdio(tmp_path: Path) -> None:
    upstream = tmp_path / "notes_server.py"
    upstream.write_text(textwrap.dedent(UPSTREAM), encoding="utf-8")
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps({"mcpServers": {"notes": {"command": sys.executable, "args": [str(upstream)]}}}),
        encoding="utf-8",
    )
    events = tmp_path / "events.jsonl"
    argv = ["-m", "toolgate", "mcp-proxy", "--config", str(config), "--top-k", "1"]
    proxy = StdioServerParameters(command=sys.executable, args=[*argv, "--events", str(events)])

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(proxy, elicitation_callback=answer_folder) as client:
                await use_notes_through_proxy(client, "groceries")

    run(main)
    # The searches and calls were logged, for toolgate stats.
    stats = subprocess.run(
        [sys.executable, "-m", "toolgate", "stats", "--events", str(events), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    usage = json.loads(stats.stdout)["usage"]
    # archive_notes twice: the call, then again with the user's answer (each is checked).
    assert usage["called"] == {"notes/delete_note": 1, "notes/archive_notes": 2}
    assert usage["routed"] == {"notes/delete_note": 1}
    assert usage["search_calls"] == 1  # the search_tools call, counted as a search


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{", "not a JSON file"),
        ('{"servers": {}}', 'expected {"mcpServers"'),
        ('{"mcpServers": {"a": []}}', "mcpServers.a: expected an object, got list"),
        ('{"mcpServers": {"a": {}}}', "mcpServers.a: needs 'command'"),
        ('{"mcpServers": {"a": {"url": "ftp://x"}}}', "'url' must be an http"),
        ('{"mcpServers": {"a": {"command": "x", "arg": ["y"]}}}', r"unknown keys \['arg'\]"),
        ('{"mcpServers": {"a": {"url": "http://x", "headers": {"A": 1}}}}', "'headers' must map"),
        ('{"mcpServers": {"a": {"type": "ws", "command": "x"}}}', "'type' must be 'stdio'"),
        (
            '{"mcpServers": {"a": {"type": "sse", "url": "https://x/sse"}}}',
            r"mcpServers.a: 'type' 'sse' \(MCP's deprecated HTTP\+SSE transport\) is not",
        ),
        (
            '{"servers": {"a": {"type": "sse", "url": "https://x/sse"}}, "mcpServers": {}}',
            "holds both 'mcpServers' and VS Code's 'servers'",
        ),
        ('{"inputs": [], "servers": {"a": {"command": "x", "arg": []}}}', "servers.a: unknown"),
        ('{"mcpServers": {"a": {"type": "stdio", "url": "http://x"}}}', "does not fit"),
        ('{"mcpServers": {"a": {"command": "x", "disabled": true}}}', "every server is disabled"),
        ('{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', "'a' is given twice"),
        ('{"mcpServers": {"a": {"command": "x", "command": "y"}}}', "'command' is given twice"),
        (
            '{"mcpServers": {"": {"command": "x"}, " ": {"command": "y"}, "b": {"command": "z"}}}',
            r"mcpServers\.'': the server's name is blank; mcpServers\.' ': the server's name",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "timeout": 1e400}}}',
            "mcpServers.a: 'timeout' must be finite seconds > 0, got inf",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "maxResultBytes": 4}}}',
            "mcpServers.a: 'maxResultBytes' must be a whole number of bytes from 1,024 to "
            "4,294,967,295, got 4",
        ),
        ('{"mcpServers": {"a": {"url": "http://x", "maxResultBytes": "4MB"}}}', "got '4MB'"),
        ('{"mcpServers": {"a": {"command": "x", "maxResultBytes": 4096.5}}}', "got 4096.5"),
        (
            '{"mcpServers": {"a": {"command": "x", "args": "y"}, "b": {"command": "z", "env": 1}}}',
            r"mcpServers.a: 'args' must be a list of strings, got a string; mcpServers.b: 'env'",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "overrides": ["get_page"]}}}',
            "mcpServers.a: 'overrides' must map tool names to objects, got list",
        ),
        (
            '{"mcpServers": {"a": {"url": "http://x", "overrides": {"get_page": true}}}}',
            "mcpServers.a: overrides.get_page: x-toolgate block must be an object, got bool",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "overrides": {"get_page": {"pined": true}}}}}',
            r"mcpServers.a: overrides.get_page: x-toolgate has unknown keys \['pined'\]",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "overrides": {"t": {"pinned": 1}}}}}',
            "mcpServers.a: overrides.t: x-toolgate pinned must be true or false",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "overrides": {"t": {"summary": " "}}}}}',
            "mcpServers.a: overrides.t: x-toolgate summary must be a non-empty string",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "overrides": {"t": {"tags": "docs"}}}}}',
            "mcpServers.a: overrides.t: x-toolgate tags must be a list of strings",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "overrides": {" ": {"pinned": true}}}}}',
            "mcpServers.a: overrides: a tool name is blank",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "overrides": {"rm": {"requires": {}}}}}}',
            "mcpServers.a: overrides.rm: 'requires' gates a tool on the caller's state",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "overrides": {"t": {"pinned": 1}, '
            '"u": {"tags": [1]}}}}}',
            "overrides.t: x-toolgate pinned must be true or false; overrides.u: x-toolgate tags",
        ),
    ],
)
def test_a_bad_server_config_is_named(tmp_path: Path, config: str, message: str) -> None:
    path = tmp_path / "servers.json"
    path.write_text(config, encoding="utf-8")
    with pytest.raises(InvalidInputError, match=message):
        load_servers(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"mcpServers": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"mcpServers": {"a": {"command": "x", "timeout": ' + "9" * 5_000 + "}}}", "4300 digits"),
        (None, "not a regular file"),  # a link to /dev/zero: read until memory runs out
        ("fifo", "not a regular file"),  # opening a FIFO blocks until a writer comes
    ],
)
def test_a_hostile_server_config_is_named_not_raised_or_hung(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "servers.json"
    if content is None:
        path.symlink_to("/dev/zero")
    elif content == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(InvalidInputError, match=message):
        load_servers(path)


def test_a_server_config_repr_leaves_its_secrets_out(tmp_path: Path) -> None:
    """The headers' and environment's values and the URL's path and query often hold keys:
    a traceback's locals (Sentry, rich) and debug logs show the repr."""
    path = tmp_path / "servers.json"
    entries = {
        "gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "ghp_env_secret"}},
        "docs": {
            "url": "https://example.com/mcp/sk-path-secret?api_key=query-secret",
            "headers": {"Authorization": "Bearer header-secret"},
        },
    }
    path.write_text(json.dumps({"mcpServers": entries}), encoding="utf-8")
    servers = load_servers(path)
    shown = repr(servers)
    for secret in ("ghp_env_secret", "sk-path-secret", "query-secret", "header-secret"):
        assert secret not in shown
    for kept in ("gh-mcp", "GITHUB_TOKEN", "example.com", "Authorization"):
        assert kept in shown
    assert servers["gh"].env == {"GITHUB_TOKEN": "ghp_env_secret"}  # the values stay


def test_a_server_config_reads_commands_and_urls(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    entries = {
        "gh": {"command": "gh-mcp", "args": ["stdio"], "env": {"TOKEN": "t"}, "cwd": "/tmp"},
        "docs": {"type": "http", "url": "https://example.com/mcp", "headers": {"X-Key": "k"}},
        "off": {"command": "old-server", "disabled": True},
        "shots": {"command": "screenshots", "maxResultBytes": 16 << 20},
    }
    entries["docs"]["overrides"] = {"get_page": {"pinned": True, "summary": "Fetch a page."}}
    entries["gh"]["overrides"] = {"repos/delete": {"pinned": False, "tags": ["admin"]}}
    path.write_text(json.dumps({"mcpServers": entries}), encoding="utf-8")
    servers = load_servers(path)
    assert list(servers) == ["gh", "docs", "shots"]
    # Each server's are keyed by tool id, as McpRouter's overrides are.
    assert tool_overrides(servers) == {
        "gh/repos/delete": {"pinned": False, "tags": ["admin"]},
        "docs/get_page": {"pinned": True, "summary": "Fetch a page."},
    }
    docs_overrides = {"get_page": {"pinned": True, "summary": "Fetch a page."}}
    assert servers["docs"] == HttpServer(
        "https://example.com/mcp", {"X-Key": "k"}, overrides=docs_overrides
    )
    assert [result_limit(spec) for spec in servers.values()] == [
        MAX_RESULT_BYTES,
        MAX_RESULT_BYTES,
        16 << 20,
    ]
    stdio = servers["gh"]
    assert isinstance(stdio, StdioServerParameters)
    assert (stdio.command, stdio.args, stdio.env, str(stdio.cwd)) == (
        "gh-mcp",
        ["stdio"],
        {"TOKEN": "t"},
        "/tmp",
    )
    with pytest.raises(InvalidInputError, match="cannot read"):
        load_servers(tmp_path / "missing.json")


def test_a_server_config_takes_environment_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GH_TOKEN", "s3cret")
    monkeypatch.setenv("EMPTY", "")
    monkeypatch.delenv("UNSET_PORT", raising=False)
    entries = {
        "gh": {
            "command": "${HOME}/bin/gh-mcp",
            "args": ["--port", "${UNSET_PORT:-8080}", "$GH_TOKEN"],
            "env": {"GITHUB_TOKEN": "${GH_TOKEN}", "LEVEL": "${EMPTY:-info}"},
        },
        "docs": {
            "url": "https://example.com/mcp",
            "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
        },
    }
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": entries}), encoding="utf-8")
    servers = load_servers(path)
    gh = servers["gh"]
    assert isinstance(gh, StdioServerParameters)
    assert gh.command == f"{os.environ['HOME']}/bin/gh-mcp"
    assert gh.args == ["--port", "8080", "$GH_TOKEN"]  # no braces: kept, as clients keep it
    assert gh.env == {"GITHUB_TOKEN": "s3cret", "LEVEL": "info"}
    assert servers["docs"] == HttpServer(
        "https://example.com/mcp", {"Authorization": "Bearer s3cret"}
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"command": "gh-mcp", "args": ["--token", "${GH_TOKEN}", 3]},
            "'args' must be a list of strings: args[2] is a number",
        ),
        (
            {"command": "gh-mcp", "env": {"TOKEN": "${GH_TOKEN}", "PORT": 8080}},
            "'env' must map names to string values: env.PORT is a number",
        ),
        (
            {"url": "mcp.example.com/mcp?api_key=${GH_TOKEN}"},
            "'url' must be an http(s) URL, got one with no scheme",
        ),
        (
            {"url": "ftp://mcp.example.com/${GH_TOKEN}", "headers": {"X-Key": "${GH_TOKEN}"}},
            "'url' must be an http(s) URL, got one with the scheme 'ftp'",
        ),
        (
            {"url": "https://mcp.example.com", "headers": {"X-Key": "${GH_TOKEN}", "X-N": 1}},
            "'headers' must map names to string values: headers.X-N is a number",
        ),
    ],
)
def test_a_bad_value_is_named_without_the_secrets_expanded_into_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: dict[str, Any], message: str
) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp_s3cret")
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"gh": entry}}), encoding="utf-8")
    with pytest.raises(InvalidInputError) as raised:
        load_servers(path)
    assert f"mcpServers.gh: {message}" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_a_variable_not_set_is_named_with_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    monkeypatch.delenv("NO_SUCH_HOST", raising=False)
    entries = {
        "gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "${NO_SUCH_TOKEN}"}},
        "docs": {"url": "https://${NO_SUCH_HOST}/mcp"},
        "off": {"command": "${NO_SUCH_TOKEN}", "disabled": True},  # off: needs nothing
    }
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": entries}), encoding="utf-8")
    with pytest.raises(InvalidInputError) as raised:
        load_servers(path)
    message = str(raised.value)
    assert "mcpServers.gh: env.GITHUB_TOKEN: ${NO_SUCH_TOKEN} is not set" in message
    assert "mcpServers.docs: url: ${NO_SUCH_HOST} is not set" in message
    assert "mcpServers.off" not in message


def test_the_env_spelling_of_vs_code_and_cursor_is_a_variable_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cursor's and VS Code's files write ``${env:NAME}``: kept as written, the server
    would get the text ``${env:NAME}`` for its token and fail at its first call."""
    monkeypatch.setenv("GH_TOKEN", "s3cret")
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    entry = {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "${env:GH_TOKEN}"}}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"gh": entry}}), encoding="utf-8")
    gh = load_servers(path)["gh"]
    assert isinstance(gh, StdioServerParameters)
    assert gh.env == {"GITHUB_TOKEN": "s3cret"}
    entry["env"] = {"GITHUB_TOKEN": "${env:NO_SUCH_TOKEN}"}
    path.write_text(json.dumps({"mcpServers": {"gh": entry}}), encoding="utf-8")
    with pytest.raises(InvalidInputError) as raised:
        load_servers(path)
    assert "env.GITHUB_TOKEN: ${env:NO_SUCH_TOKEN} is not set" in str(raised.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("${input:github_token}", r"\$\{input:github_token\} is a VS Code input"),
        ("${workspaceFolder}/server.js", r"\$\{workspaceFolder\} is an editor's own variable"),
        ("${userHome}/bin", r"\$\{userHome\} is an editor's own variable"),
        ("${fileDirname}/x", r"\$\{fileDirname\} is an editor's own variable"),
        ("${GH_TOKEN:-${FALLBACK}}", r"\$\{GH_TOKEN:-\.\.\.\} holds another variable"),
    ],
)
def test_a_variable_toolgate_cannot_fill_in_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    """Kept as written (or, nested, cut at the first ``}``), each would reach the server as
    a wrong value that fails only once it is used."""
    monkeypatch.setenv("GH_TOKEN", "s3cret")
    path = tmp_path / "servers.json"
    entry = {"command": "gh-mcp", "args": [value]}
    path.write_text(json.dumps({"mcpServers": {"gh": entry}}), encoding="utf-8")
    with pytest.raises(InvalidInputError, match=f"mcpServers.gh: args\\[0\\]: {message}"):
        load_servers(path)


def test_a_vs_code_config_is_read_as_it_is(tmp_path: Path) -> None:
    """VS Code's mcp.json names its servers ``servers``, beside its ``inputs`` prompts."""
    path = tmp_path / "mcp.json"
    config = {
        "inputs": [{"type": "promptString", "id": "token", "password": True}],
        "servers": {
            "gh": {"type": "stdio", "command": "gh-mcp", "args": ["stdio"]},
            "docs": {"type": "http", "url": "https://example.com/mcp"},
        },
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    servers = load_servers(path)
    assert list(servers) == ["gh", "docs"]
    assert servers["docs"] == HttpServer("https://example.com/mcp")


def test_a_header_from_a_secret_file_loses_its_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCS_TOKEN", "s3cret\n")  # as a Kubernetes secret file keeps it
    path = tmp_path / "servers.json"
    entry = {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}
    path.write_text(json.dumps({"mcpServers": {"docs": entry}}))
    docs = load_servers(path)["docs"]
    assert isinstance(docs, HttpServer)
    assert docs.headers == {"Authorization": "Bearer s3cret"}
    monkeypatch.setenv("DOCS_TOKEN", "s3cret\nX-Other: 1")
    with pytest.raises(InvalidInputError, match="Authorization holds a control character") as err:
        load_servers(path)
    assert "s3cret" not in str(err.value)


def test_a_windsurf_config_names_a_remote_servers_url_server_url(tmp_path: Path) -> None:
    path = tmp_path / "mcp_config.json"
    path.write_text(json.dumps({"mcpServers": {"docs": {"serverUrl": "https://example.com/mcp"}}}))
    assert load_servers(path)["docs"] == HttpServer("https://example.com/mcp")
    both = {"docs": {"serverUrl": "https://example.com/mcp", "url": "https://example.com/x"}}
    path.write_text(json.dumps({"mcpServers": both}))
    with pytest.raises(InvalidInputError, match=r"mcpServers\.docs: give 'url' or Windsurf's"):
        load_servers(path)


def test_a_config_may_hold_comments_and_trailing_commas(tmp_path: Path) -> None:
    """As VS Code's and Cursor's editors let one write their mcp.json (JSONC); a ``//`` or
    ``,}`` inside a string is kept."""
    path = tmp_path / "mcp.json"
    path.write_text(
        '{\n  // the servers\n  "servers": {\n'
        '    "docs": {"url": "https://example.com/mcp", /* remote */ },\n'
        '    "gh": {"command": "gh-mcp", "args": ["--x=,}", "/*not*/"],},\n  },\n}\n',
        encoding="utf-8",
    )
    servers = load_servers(path)
    assert servers["docs"] == HttpServer("https://example.com/mcp")
    gh = servers["gh"]
    assert isinstance(gh, StdioServerParameters)
    assert gh.args == ["--x=,}", "/*not*/"]
    path.write_text('{"mcpServers": {"gh": {"command": "x"}},\n  "oops": [1,, 2]}')
    with pytest.raises(InvalidInputError, match=r"not a JSON file: .* line 2 column"):
        load_servers(path)


def test_a_variable_named_like_an_editors_own_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the editor's own names are refused: ``${file_token}`` or ``${filename}`` is an
    environment variable like any other (read so before editor variables were refused)."""
    monkeypatch.setenv("file_token", "s3cret")
    monkeypatch.setenv("filename", "notes.txt")
    monkeypatch.setenv("relativeFileRoot", "docs")
    entry = {"command": "gh-mcp", "args": ["${filename}", "${relativeFileRoot}"],
             "env": {"TOKEN": "${file_token}"}}  # fmt: skip
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"gh": entry}}), encoding="utf-8")
    gh = load_servers(path)["gh"]
    assert isinstance(gh, StdioServerParameters)
    assert (gh.args, gh.env) == (["notes.txt", "docs"], {"TOKEN": "s3cret"})


def test_a_config_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"  # as Windows editors save it
    path.write_text(json.dumps({"mcpServers": {"gh": {"command": "gh"}}}), encoding="utf-8-sig")
    assert list(load_servers(path)) == ["gh"]


def test_an_upstream_that_cannot_start_is_named(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    broken = {"command": str(tmp_path / "no-such-server")}
    config.write_text(json.dumps({"mcpServers": {"broken": broken}}), encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "toolgate", "mcp-proxy", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert completed.returncode == 2
    assert "mcp-proxy: error: cannot connect to MCP server 'broken'" in completed.stderr
    assert completed.stdout == ""


def test_a_proxy_without_the_embedding_model_stops_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = tmp_path / "notes_server.py"
    upstream.write_text(textwrap.dedent(UPSTREAM), encoding="utf-8")
    config = tmp_path / "servers.json"
    notes = {"command": sys.executable, "args": [str(upstream)]}
    config.write_text(json.dumps({"mcpServers": {"notes": notes}}), encoding="utf-8")
    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "no-model"))
    client = {"name": "test", "version": "0"}
    start = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": start},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    with proxy_process(config) as process:
        try:
            assert process.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # it may have stopped already
                process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
                process.stdin.flush()
            assert process.wait(timeout=120) == 2
        finally:
            process.kill()
        assert process.stderr is not None
        stderr = process.stderr.read().decode()
    assert stderr.startswith("toolgate mcp-proxy: error: ")
    assert stderr.count("\n") == 1  # no traceback after it
    assert "model ensure" in stderr


def proxy_process(config: Path, *flags: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "toolgate", "mcp-proxy", "--config", str(config), *flags]
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def initialize(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The proxy's answer to a handshake-era ``initialize``, written as a client would."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(json.dumps(request).encode() + b"\n")
    process.stdin.flush()
    return dict(json.loads(process.stdout.readline()))


def test_sigterm_stops_the_proxy_and_its_upstreams(tmp_path: Path) -> None:
    upstream = tmp_path / "notes_server.py"
    upstream.write_text(textwrap.dedent(PID_WRITING_UPSTREAM), encoding="utf-8")
    pid_file = tmp_path / "upstream.pid"
    notes = {"command": sys.executable, "args": [str(upstream), str(pid_file)]}
    hanging = {"command": sys.executable, "args": ["-c", "import time; time.sleep(600)"]}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"notes": notes, "stuck": hanging}}))

    # Long enough for the notes upstream to import the MCP SDK on a loaded machine.
    with proxy_process(config, "--lenient", "--connect-timeout", "10") as process:
        try:
            answer = initialize(process)  # served, though "stuck" never answered
            upstream_pid = int(pid_file.read_text())
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        finally:
            process.kill()
        assert process.stderr is not None
        assert "cannot connect to MCP server 'stuck'" in process.stderr.read().decode()
    assert "Server notes: Notes are kept for 30 days." in answer["result"]["instructions"]
    with pytest.raises(ProcessLookupError):  # the upstream went with the proxy
        os.kill(upstream_pid, 0)


HANGING_UPSTREAM = """
import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
"""


def test_sigterm_while_starting_stops_the_upstreams_started(tmp_path: Path) -> None:
    upstream = tmp_path / "hanging.py"
    upstream.write_text(HANGING_UPSTREAM, encoding="utf-8")
    pid_file = tmp_path / "upstream.pid"
    hanging = {"command": sys.executable, "args": [str(upstream), str(pid_file)]}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"stuck": hanging}}))

    with proxy_process(config, "--connect-timeout", "60") as process:
        try:
            for _ in range(600):  # the upstream is up, the proxy still waiting for it
                if pid_file.exists() and pid_file.read_text():
                    break
                time.sleep(0.05)
            upstream_pid = int(pid_file.read_text())
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        finally:
            process.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(upstream_pid, 0)


LATE_UPSTREAM = '''
import os, sys
from mcp.server.mcpserver import MCPServer

marker = sys.argv[1]
if not os.path.exists(marker):  # the first start fails, as a server still installing might
    open(marker, "w").close()
    sys.exit("not ready yet")

server = MCPServer("late")

@server.tool()
def water_plants(garden: str) -> str:
    """Water the plants of a garden."""
    return f"watered {garden}"

server.run("stdio")
'''


def test_an_upstream_left_out_at_start_joins_when_it_can_be_started(tmp_path: Path) -> None:
    upstream = tmp_path / "late.py"
    upstream.write_text(LATE_UPSTREAM, encoding="utf-8")
    notes = tmp_path / "notes_server.py"
    notes.write_text(textwrap.dedent(UPSTREAM), encoding="utf-8")
    servers = {
        "notes": {"command": sys.executable, "args": [str(notes)]},
        "late": {"command": sys.executable, "args": [str(upstream), str(tmp_path / "tried")]},
    }
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    args = ["--config", str(config), "--lenient", "--retry-after", "0.2", "--top-k", "1"]
    proxy = StdioServerParameters(
        command=sys.executable, args=["-m", "toolgate", "mcp-proxy", *args]
    )
    query = {"query": "water the garden plants"}

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(proxy) as client:
                assert (tmp_path / "tried").exists()  # its first start failed
                # Searched until it joins: without the retries it never would.
                found = await client.call_tool("search_tools", query)
                while [t["name"] for t in found_tools(found)] != ["water_plants"]:
                    await anyio.sleep(0.2)
                    found = await client.call_tool("search_tools", query)
                done = await client.call_tool(
                    "call_tool", {"name": "water_plants", "arguments": {"garden": "back"}}
                )
                assert text_of(done) == "watered back"

    run(main)


def test_upstreams_are_served_in_the_configs_order() -> None:
    async def main() -> None:
        upstreams = Upstreams(["zeta", "alpha", "mid"])
        for name in ["mid", "alpha", "zeta"]:  # the order they came up in
            upstreams.connected[name] = Client(github_server(Counter()))
        upstreams.errors["mid"] = RuntimeError("gone since")
        # Not the order they came up in, which changes from run to run and would change
        # which server's prompt keeps a shared name.
        assert list(upstreams.clients) == ["zeta", "alpha"]

    run(main)


#: An upstream whose tools/list answers only once the file ``sys.argv[1]`` exists.
SLOW_LISTING_UPSTREAM = """
import os, sys
import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

release = sys.argv[1]

async def list_tools(_ctx, _params):
    while not os.path.exists(release):
        await anyio.sleep(0.05)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    weather = Tool(name="get_weather", description="Weather in a city.", input_schema=schema)
    return ListToolsResult(tools=[weather])

async def call_tool(_ctx, _params):
    return CallToolResult(content=[TextContent(type="text", text="sunny")])

server = Server("weather", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


def _slow_listing_config(tmp_path: Path, upstream_text: str = SLOW_LISTING_UPSTREAM) -> Path:
    """A proxy config of one upstream whose listing waits for ``tmp_path / "release"``."""
    upstream = tmp_path / "weather.py"
    upstream.write_text(upstream_text, encoding="utf-8")
    weather = {"command": sys.executable, "args": [str(upstream), str(tmp_path / "release")]}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"weather": weather}}), encoding="utf-8")
    return config


def test_the_handshake_is_answered_while_the_upstreams_are_listed(tmp_path: Path) -> None:
    upstream, release = tmp_path / "weather.py", tmp_path / "release"
    upstream.write_text(SLOW_LISTING_UPSTREAM, encoding="utf-8")
    weather = {"command": sys.executable, "args": [str(upstream), str(release)]}
    proxy = proxy_params(tmp_path, {"weather": weather})

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(proxy) as client:
                # Initialized while the upstream's listing cannot have ended: it waits for
                # this file, which only now exists.
                release.touch()
                found = await client.call_tool("search_tools", {"query": "weather in Lisbon"})
                assert [t["name"] for t in found_tools(found)] == ["get_weather"]

    run(main)


def test_a_server_that_is_not_answering_is_named_in_the_tool_error(tmp_path: Path) -> None:
    notes = tmp_path / "notes_server.py"
    notes.write_text(textwrap.dedent(UPSTREAM), encoding="utf-8")
    servers = {
        "notes": {"command": sys.executable, "args": [str(notes)]},
        "git": {"command": sys.executable, "args": ["-c", "raise SystemExit('no repository')"]},
    }
    proxy = proxy_params(tmp_path, servers, "--lenient", "--retry-after", "600")

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(proxy) as client:
                failed = await client.call_tool("call_tool", {"name": "git_log", "arguments": {}})
                assert failed.is_error
                body = json.loads(text_of(failed))
                assert body["error"] == "server_unavailable"
                assert "Server 'git' is not answering" in body["message"]
                assert "retry later" in body["message"]
                found = await client.call_tool("search_tools", {"query": "commit history"})
                assert found.structured_content is not None
                assert found.structured_content["unavailable"] == ["git"]
                # A tool of a server that answers is still called.
                done = await client.call_tool(
                    "call_tool", {"name": "add_note", "arguments": {"title": "a", "body": "b"}}
                )
                assert text_of(done) == "saved a"

    run(main)


#: An upstream whose one tool kills it, and that cannot start a second time.
DYING_UPSTREAM = '''
import os, sys
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

marker = sys.argv[1]
if os.path.exists(marker):
    sys.exit("cannot start again")
open(marker, "w").close()
server = MCPServer("git")

# Read-only: sent again once the server is back, which it never is.
@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def git_log(path: str) -> str:
    """Show the commit history of a repository."""
    os._exit(1)

server.run("stdio")
'''


def test_a_server_that_died_for_good_is_named_in_the_tool_error(tmp_path: Path) -> None:
    upstream = tmp_path / "git.py"
    upstream.write_text(DYING_UPSTREAM, encoding="utf-8")
    git = {"command": sys.executable, "args": [str(upstream), str(tmp_path / "started")]}
    proxy = proxy_params(tmp_path, {"git": git})

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(proxy) as client:
                call = {"name": "git_log", "arguments": {"path": "."}}
                failed = await client.call_tool("call_tool", call)
                body = json.loads(text_of(failed))
                assert body == {
                    "error": "server_unavailable",
                    "message": "Calling 'git_log' failed: server 'git' is not answering; "
                    "retry later.",
                    "servers": ["git"],
                }

    run(main)


def test_a_listing_that_fails_after_the_handshake_ends_the_proxy_with_the_error(
    tmp_path: Path,
) -> None:
    # A tool whose input schema is not a schema: a bad tool, an error without --lenient.
    bad_tool = SLOW_LISTING_UPSTREAM.replace('"type": "string"', '"type": 5')
    config, release = _slow_listing_config(tmp_path, bad_tool), tmp_path / "release"
    with proxy_process(config) as process:
        try:
            assert initialize(process)["result"]["serverInfo"]["name"] == "toolgate"
            release.touch()
            assert process.wait(timeout=60) == 2
        finally:
            process.kill()
        assert process.stderr is not None
        stderr = process.stderr.read().decode()
    assert "toolgate mcp-proxy: error: " in stderr
    assert "weather/get_weather" in stderr


def test_a_client_that_leaves_while_the_upstreams_are_listed_is_a_normal_stop(
    tmp_path: Path,
) -> None:
    with proxy_process(_slow_listing_config(tmp_path)) as process:
        try:
            assert initialize(process)["result"]["serverInfo"]["name"] == "toolgate"
            assert process.stdin is not None
            # A host probing, or a window closed: gone while the listing waits.
            process.stdin.close()
            code = process.wait(timeout=60)
        finally:
            process.kill()
        assert process.stderr is not None
        stderr = process.stderr.read().decode()
    # Not "tools/list failed: Connection closed" and code 2: the proxy closed that
    # connection itself, stopping.
    assert (code, stderr) == (0, "")


#: An upstream whose tools pin themselves, one listed at start and one added on a call.
SELF_PINNING_UPSTREAM = '''
import contextlib
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("docs")
PIN = {"toolgate": {"pinned": True}}

@server.tool(meta=PIN)
def get_page(title: str) -> str:
    """Fetch one documentation page by title."""
    return f"page {title}"

@server.tool()
async def enable_search(ctx: Context) -> str:
    """Turn on the documentation search tool."""

    def search_docs(query: str) -> str:
        return f"found {query}"

    server.add_tool(search_docs, description="Search the documentation.", meta=PIN)
    await ctx.notify_tools_changed()
    with contextlib.suppress(Exception):  # an earlier-protocol connection hears it so
        await ctx.session.send_tool_list_changed()
    return "search enabled"

server.run("stdio")
'''


def test_an_upstream_pinning_its_own_tools_does_not_stop_the_proxy(tmp_path: Path) -> None:
    upstream = tmp_path / "docs.py"
    upstream.write_text(SELF_PINNING_UPSTREAM, encoding="utf-8")
    proxy = proxy_params(tmp_path, {"docs": {"command": sys.executable, "args": [str(upstream)]}})
    errors = tmp_path / "stderr.txt"

    async def call(client: Client, name: str, arguments: dict[str, Any]) -> str:
        return text_of(await client.call_tool("call_tool", {"name": name, "arguments": arguments}))

    async def main() -> None:
        with anyio.fail_after(120), errors.open("w") as errlog:
            async with Client(stdio_client(proxy, errlog=errlog)) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                assert names == ["search_tools", "call_tool"]  # not pinned by its own say
                assert await call(client, "get_page", {"title": "intro"}) == "page intro"
                # A tool that pins itself, listed after a change, does not stop it either.
                assert await call(client, "enable_search", {}) == "search enabled"
                for _ in range(100):
                    found = await client.call_tool("search_tools", {"query": "search the docs"})
                    if "search_docs" in [t["name"] for t in found_tools(found)]:
                        break
                    await anyio.sleep(0.1)
                assert await call(client, "search_docs", {"query": "x"}) == "found x"
                names = [t.name for t in (await client.list_tools()).tools]
                assert names == ["search_tools", "call_tool"]

    run(main)
    stderr = errors.read_text(encoding="utf-8")
    assert "server 'docs': tool 'get_page' pins itself" in stderr
    assert "server 'docs': tool 'search_docs' pins itself" in stderr


def test_the_configs_overrides_pin_a_servers_tool(tmp_path: Path) -> None:
    upstream = tmp_path / "docs.py"
    upstream.write_text(SELF_PINNING_UPSTREAM, encoding="utf-8")
    overrides = {"get_page": {"pinned": True}, "get_pages": {"pinned": True}}  # one a typo
    docs = {"command": sys.executable, "args": [str(upstream)], "overrides": overrides}
    proxy = proxy_params(tmp_path, {"docs": docs})
    errors = tmp_path / "stderr.txt"

    async def main() -> None:
        with anyio.fail_after(120), errors.open("w") as errlog:
            async with Client(stdio_client(proxy, errlog=errlog)) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                assert names == ["search_tools", "call_tool", "get_page"]
                page = await client.call_tool("get_page", {"title": "intro"})
                assert text_of(page) == "page intro"

    run(main)
    stderr = errors.read_text(encoding="utf-8")
    assert "'get_page' pins itself" not in stderr  # the config decided
    assert "mcpServers.docs.overrides names tools 'docs' does not list" in stderr
    assert "applies to nothing: 'get_pages' (name tools" in stderr

"""The upstream servers of ``toolgate mcp-proxy``: an MCP client configuration file.

The servers come in the ``mcpServers`` form MCP clients write (VS Code's ``servers`` too,
and the comments and trailing commas VS Code and Cursor allow)::

    {"mcpServers": {
        "github": {"command": "github-mcp-server", "args": ["stdio"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "..."}},
        "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}},
        "old": {"command": "old-server", "disabled": true}}}

Files written by Cline and Roo Code are read as they are: their ``timeout`` is how many
seconds each request to the server may take (the SDK's ``read_timeout_seconds``), and their
``autoApprove`` / ``alwaysAllow`` lists (the tools those clients call without asking the
user) are checked and then ignored: the proxy never asks the user before a call, so it has
nothing to approve; the host in front of it keeps its own approvals. Cline's ``type``
``streamableHttp`` is ``http``.

``maxResultBytes``, toolgate's own key, is the most bytes of JSON one answer of the server's
(a tool result, a prompt, a read) may take to be passed on (default
:data:`~toolgate.integrations.mcp.answers.MAX_RESULT_BYTES`, 4 MiB).

``overrides``, toolgate's own too, maps the server's tool names (as it lists them) to
``x-toolgate`` blocks (:mod:`toolgate.catalog.tool`), the host's say over those tools::

    "docs": {"command": "docs-server",
             "overrides": {"get_page": {"pinned": true, "summary": "Fetch a docs page."}}}

Each block is checked as the catalog checks one, when the file is read. ``requires`` is
refused: it gates a tool on the caller's state, which the proxy's clients have no way to
give, so the tool would only vanish from searches (``--deny`` keeps a tool out).

As in MCP clients' own files, ``${VAR}`` in a value (``command``, ``args``, ``env``,
``cwd``, ``url``, ``headers``) is the environment variable ``VAR`` (``${env:VAR}`` too, as
VS Code, Cursor and Windsurf write it), and ``${VAR:-default}`` is ``default`` when ``VAR``
is unset or empty; so a token stays out of the file. A variable that is not set, with no
default, is an error naming it and where it is; so is one only an editor fills in (VS Code's
``${input:...}`` prompts, ``${workspaceFolder}``, ``${userHome}``). ``$VAR`` without
braces is kept as written, as those clients keep it. An error about a value names its place
and kind, never the value, which may hold a variable's token.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters
from pydantic import Field

from toolgate.arguments import MAX_COUNT, shown
from toolgate.catalog.build import block_problem
from toolgate.errors import InvalidInputError
from toolgate.integrations.mcp.answers import MAX_RESULT_BYTES, MIN_RESULT_BYTES
from toolgate.json_limits import JsonLimitError, loads, read_text
from toolgate.redaction import redacted_url

__all__ = [
    "MAX_CONFIG_BYTES",
    "HttpServer",
    "ServerSpec",
    "StdioServer",
    "load_servers",
    "request_timeout",
    "result_limit",
    "server_overrides",
    "tool_overrides",
]

#: The largest configuration file read: far past any list of servers a client writes.
MAX_CONFIG_BYTES = 16 << 20

#: Keys any entry may have: Cline's and Roo Code's besides the common ``disabled``, and
#: toolgate's own ``maxResultBytes`` and ``overrides``.
_COMMON_KEYS = {
    "type",
    "disabled",
    "timeout",
    "autoApprove",
    "alwaysAllow",
    "maxResultBytes",
    "overrides",
}
_STDIO_KEYS = _COMMON_KEYS | {"command", "args", "env", "cwd"}
_HTTP_KEYS = _COMMON_KEYS | {"url", "headers"}

#: The ``type`` spellings of a Streamable HTTP entry (``streamableHttp``: Cline's).
_HTTP_TYPES = ("http", "streamable-http", "streamableHttp")

#: Cline's and Roo Code's lists of tools they call without asking (read, then ignored).
_APPROVAL_KEYS = ("autoApprove", "alwaysAllow")

#: The keys whose values (strings, or lists or objects of strings) take ``${VAR}``.
_EXPANDED_KEYS = ("command", "args", "env", "cwd", "url", "headers")

#: A URL's scheme (what an error about a URL may show of it).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,31})://")

#: A JSON string (kept), or a JSONC comment; then a string, or a comma closing nothing. An
#: unclosed string or comment runs to the end, so no scan restarts inside it (quadratic).
_STRING = r'"(?:[^"\\]|\\.)*"?'
_COMMENT = re.compile(rf"{_STRING}|//[^\n]*|/\*(?:.*?\*/|.*)", re.DOTALL)
_TRAILING_COMMA = re.compile(rf"{_STRING}|,(?=\s*[}}\]])")

#: ``${NAME}`` or ``${env:NAME}`` (VS Code's, Cursor's and Windsurf's spelling), either with
#: ``:-default``.
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

#: What VS Code and Cursor fill in themselves, which no environment holds: an input prompt,
#: a setting, a command's output, or one of the editor's paths (the workspace, the open file).
#: Named one by one: any other name (``${file_token}``) is an environment variable.
_EDITOR_VARIABLE = re.compile(
    r"\$\{(?:(?:input|config|command):[^}]*|/|workspaceFolder(?:Basename)?|userHome|"
    r"pathSeparator|cwd|execPath|file(?:WorkspaceFolder(?:Basename)?|Basename(?:NoExtension)?|"
    r"Extname|Dirname(?:Basename)?)?|relativeFile(?:Dirname)?|lineNumber|selectedText|"
    r"defaultBuildTask|extensionInstallFolder)\}"
)


@dataclass(frozen=True)
class HttpServer:
    """A Streamable HTTP upstream: its URL, the headers every request carries, how many
    seconds each request may take (``None``: the SDK's default), the most bytes of JSON
    an answer of its may take (``None``: :data:`MAX_RESULT_BYTES`) and the ``x-toolgate``
    overrides of its tools, by tool name."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    max_result_bytes: int | None = None
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __repr__(self) -> str:
        # The URL's path and query and the headers' values often hold keys, and a repr
        # reaches tracebacks' locals and debug logs: only the host and the header names.
        return (
            f"HttpServer({redacted_url(self.url)!r}, headers={sorted(self.headers)!r}, "
            f"timeout={self.timeout!r}, max_result_bytes={self.max_result_bytes!r})"
        )


class StdioServer(StdioServerParameters):
    """A stdio upstream read from a config file: the SDK's parameters, how many seconds each
    request may take (``None``: the SDK's default), the most bytes of JSON an answer of
    its may take (``None``: :data:`MAX_RESULT_BYTES`) and the ``x-toolgate`` overrides of
    its tools, by tool name."""

    timeout: float | None = None
    max_result_bytes: int | None = None
    overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def __repr_args__(self) -> Any:
        # The environment's values are where a server's keys go: only their names shown.
        for name, value in super().__repr_args__():
            yield name, sorted(value) if name == "env" and value else value


ServerSpec = StdioServerParameters | HttpServer


def request_timeout(spec: ServerSpec) -> float | None:
    """How many seconds each request to the server of ``spec`` may take (its config's
    ``timeout``); ``None`` for the SDK's default."""
    return spec.timeout if isinstance(spec, (StdioServer, HttpServer)) else None


def result_limit(spec: ServerSpec) -> int:
    """The most bytes of JSON an answer of the server of ``spec`` may take (its config's
    ``maxResultBytes``, else :data:`MAX_RESULT_BYTES`)."""
    limit = spec.max_result_bytes if isinstance(spec, (StdioServer, HttpServer)) else None
    return MAX_RESULT_BYTES if limit is None else limit


def server_overrides(spec: ServerSpec) -> Mapping[str, Mapping[str, Any]]:
    """The ``overrides`` of the server of ``spec`` (its config's), by tool name."""
    return spec.overrides if isinstance(spec, (StdioServer, HttpServer)) else {}


def tool_overrides(servers: Mapping[str, ServerSpec]) -> dict[str, dict[str, Any]]:
    """Every server's ``overrides``, keyed by tool id (``server/tool``) as
    :class:`~toolgate.integrations.mcp.McpRouter` takes them: by id, so one server's never
    reach another's tool of the same name."""
    return {
        f"{name}/{tool}": dict(block)
        for name, spec in servers.items()
        for tool, block in server_overrides(spec).items()
    }


def load_servers(path: str | Path) -> dict[str, ServerSpec]:
    """The upstream servers of an MCP client configuration file, without the disabled ones.

    Each entry is a stdio command (``command``, ``args``, ``env``, ``cwd``) or a Streamable
    HTTP endpoint (``url``, ``headers``), optionally with ``type`` (``stdio``, ``http``),
    ``disabled``, ``timeout`` (seconds a request may take), ``maxResultBytes`` (bytes an
    answer may take), ``overrides`` (the host's ``x-toolgate`` blocks for its tools) and
    Cline's or Roo Code's ``autoApprove`` / ``alwaysAllow`` (see the module docstring).
    Every problem is reported at once, naming the entry; an unknown key is one, since a
    misspelt ``args`` would otherwise start the command without its arguments.
    """
    try:
        # Bounded: a path to /dev/zero or a FIFO, or JSON nested past the parser, would hang,
        # exhaust memory or raise outside the exception tree.
        text = read_text(Path(path), MAX_CONFIG_BYTES)
        try:
            config = loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError:  # read again as JSONC; plain JSON pays nothing for it
            config = loads(_without_comments(text), object_pairs_hook=_unique_keys)
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
    except JsonLimitError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc}") from None
    except _DuplicateKeyError as exc:
        raise InvalidInputError(f"{path}: {exc}") from None
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, a 5,000-digit number
        raise InvalidInputError(f"{path}: not a JSON file: {exc}") from None
    key = "mcpServers"
    if isinstance(config, dict) and "servers" in config:  # VS Code's mcp.json
        if key in config:
            raise InvalidInputError(
                f"{path}: holds both 'mcpServers' and VS Code's 'servers': keep one of them"
            )
        key = "servers"
    servers = config.get(key) if isinstance(config, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise InvalidInputError(
            f'{path}: expected {{"mcpServers": {{name: {{...}}, ...}}}} '
            '(or VS Code\'s {"servers": {...}})'
        )
    specs: dict[str, ServerSpec] = {}
    problems: list[str] = []
    for name, entry in servers.items():
        if not name.strip():  # it names the server's tools: refused now, not once serving
            problems.append(f"{key}.{name!r}: the server's name is blank")
            continue
        try:
            spec = _server_spec(entry)
        except ValueError as exc:
            problems.append(f"{key}.{name}: {exc}")
            continue
        if spec is not None:
            specs[name] = spec
    if problems:
        raise InvalidInputError(f"{path}: {'; '.join(problems)}")
    if not specs:
        raise InvalidInputError(f"{path}: every server is disabled")
    return specs


def _without_comments(text: str) -> str:
    """``text`` with JSONC's comments and trailing commas blanked out, as VS Code and Cursor
    let their files hold them; strings are kept as written, and so is every line and column,
    for the JSON reader's errors."""

    def blank(found: re.Match[str]) -> str:
        token = found[0]
        return token if token.startswith('"') else re.sub(r"[^\n]", " ", token)

    return _TRAILING_COMMA.sub(blank, _COMMENT.sub(blank, text))


class _DuplicateKeyError(ValueError):
    """A key given twice in one JSON object."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a key given twice: ``json`` would keep the
    last in silence, so a second server of one name would replace the first unseen."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKeyError(f"{key!r} is given twice in one object")
        obj[key] = value
    return obj


def _server_spec(entry: Any) -> ServerSpec | None:
    """One ``mcpServers`` entry; ``None`` when it is disabled."""
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object, got {type(entry).__name__}")
    if "serverUrl" in entry:  # Windsurf's name for a remote server's 'url'
        if "url" in entry:
            raise ValueError("give 'url' or Windsurf's 'serverUrl', not both")
        entry = {("url" if key == "serverUrl" else key): value for key, value in entry.items()}
    if entry.get("disabled") is not True:  # a server left off needs no variables set
        entry = _expanded(entry)
    http = "url" in entry or entry.get("type") in _HTTP_TYPES
    if unknown := sorted(set(entry) - (_HTTP_KEYS if http else _STDIO_KEYS)):
        raise ValueError(f"unknown keys {unknown}")
    kind = entry.get("type", "http" if http else "stdio")
    if kind == "sse":
        raise ValueError(
            "'type' 'sse' (MCP's deprecated HTTP+SSE transport) is not supported: the proxy "
            "connects to Streamable HTTP servers ('http'), which most serve at /mcp"
        )
    if kind not in ("stdio", *_HTTP_TYPES):
        raise ValueError(f"'type' must be 'stdio' or 'http', got {kind!r}")
    if (kind == "stdio") == http:
        raise ValueError(f"'type' {kind!r} does not fit the entry's keys ('url' or 'command')")
    if not isinstance(entry.get("disabled", False), bool):
        raise ValueError(f"'disabled' must be true or false, got {entry['disabled']!r}")
    for key in _APPROVAL_KEYS:
        names = entry.get(key, [])
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise ValueError(f"{key!r} must be a list of tool names, got {names!r}")
    options = _Options(
        _timeout(entry.get("timeout")),
        _max_result_bytes(entry.get("maxResultBytes")),
        _overrides(entry.get("overrides")),
    )
    spec = _http_spec(entry, options) if http else _stdio_spec(entry, options)
    return None if entry.get("disabled", False) else spec


@dataclass(frozen=True)
class _Options:
    """What toolgate and Cline add to an entry: ``timeout``, ``maxResultBytes``,
    ``overrides``, read."""

    timeout: float | None
    max_result_bytes: int | None
    overrides: dict[str, dict[str, Any]]


def _overrides(value: Any) -> dict[str, dict[str, Any]]:
    """An entry's ``overrides``: tool names to ``x-toolgate`` blocks, each checked as the
    catalog checks one; a :class:`ValueError` naming every bad tool and key."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"'overrides' must map tool names to objects, got {type(value).__name__}")
    problems: list[str] = []
    for tool, block in value.items():
        if not tool.strip():
            problems.append("overrides: a tool name is blank")
        elif isinstance(block, dict) and "requires" in block:
            problems.append(
                f"overrides.{tool}: 'requires' gates a tool on the caller's state, which the "
                "proxy's clients have no way to give: the tool would only vanish from "
                "searches (keep a tool out with --deny)"
            )
        elif (problem := block_problem(block)) is not None:
            problems.append(f"overrides.{tool}: {problem}")
    if problems:
        raise ValueError("; ".join(problems))
    return {tool: dict(block) for tool, block in value.items()}


def _timeout(value: Any) -> float | None:
    """A ``timeout`` in seconds, as Cline and Roo Code write it: a finite number > 0 (``1e400``
    and the ``Infinity`` Python's reader accepts are infinity, which no timer takes)."""
    if value is None:
        return None
    seconds = math.inf
    if isinstance(value, int) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an integer past float's range
            seconds = float(value)
    elif isinstance(value, float):
        seconds = value
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"'timeout' must be finite seconds > 0, got {value!r}")
    return seconds


def _max_result_bytes(value: Any) -> int | None:
    """A ``maxResultBytes``: a whole number of bytes from :data:`MIN_RESULT_BYTES` on."""
    if value is None:
        return None
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not (whole and MIN_RESULT_BYTES <= value <= MAX_COUNT):
        raise ValueError(
            f"'maxResultBytes' must be a whole number of bytes from {MIN_RESULT_BYTES:,} to "
            f"{MAX_COUNT:,}, got {shown(value)}"
        )
    return int(value)


# The values below come after ``${VAR}`` expansion, and a variable may hold a token: an error
# about one says where it is and what kind of value it is, never the value.


def _http_spec(entry: dict[str, Any], options: _Options) -> HttpServer:
    url, headers = entry.get("url"), entry.get("headers", {})
    if not isinstance(url, str):
        raise ValueError(f"'url' must be an http(s) URL, got {_kind(url)}")
    if not url.startswith(("http://", "https://")):
        scheme = _SCHEME.match(url)
        got = f"the scheme {scheme[1]!r}" if scheme else "no scheme"
        raise ValueError(f"'url' must be an http(s) URL, got one with {got}")
    _check_str_map("headers", headers)
    # A value's surrounding whitespace is no part of it in HTTP, and a `${TOKEN}` read from a
    # secret file keeps its last newline, which no header can carry: every call failed.
    headers = {name: value.strip() for name, value in headers.items()}
    if bad := [name for name, value in headers.items() if _CONTROL.search(value)]:
        raise ValueError(f"'headers': {', '.join(bad)} holds a control character")
    return HttpServer(url, headers, options.timeout, options.max_result_bytes, options.overrides)


def _stdio_spec(entry: dict[str, Any], options: _Options) -> StdioServer:
    command, args, env = entry.get("command"), entry.get("args", []), entry.get("env")
    if not isinstance(command, str) or not command:
        raise ValueError("needs 'command' (a stdio server) or 'url' (a Streamable HTTP one)")
    if not isinstance(args, list):
        raise ValueError(f"'args' must be a list of strings, got {_kind(args)}")
    if bad := [f"args[{i}] is {_kind(a)}" for i, a in enumerate(args) if not isinstance(a, str)]:
        raise ValueError(f"'args' must be a list of strings: {', '.join(bad)}")
    if env is not None:
        _check_str_map("env", env)
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ValueError(f"'cwd' must be a directory's path, got {_kind(cwd)}")
    return StdioServer(
        command=command,
        args=args,
        env=env,
        cwd=cwd,
        timeout=options.timeout,
        max_result_bytes=options.max_result_bytes,
        overrides=options.overrides,
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_str_map(key: str, value: Any) -> None:
    """A :class:`ValueError` unless ``value``, the entry's ``key``, maps names to strings."""
    if not isinstance(value, dict):
        raise ValueError(f"{key!r} must map names to string values, got {_kind(value)}")
    if bad := [f"{key}.{n} is {_kind(v)}" for n, v in value.items() if not isinstance(v, str)]:
        raise ValueError(f"{key!r} must map names to string values: {', '.join(bad)}")


def _kind(value: Any) -> str:
    """What kind of JSON value ``value`` is, for a message that must not show it."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    kinds = ((str, "a string"), (int, "a number"), (float, "a number"), (list, "a list"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "an object")


def _expanded(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with the ``${VAR}`` in its values replaced from the environment; a
    :class:`ValueError` naming every variable not set, or not an environment's, and where
    it is."""
    missing: list[str] = []
    unread: list[str] = []  # kept as written, each would reach the server as a wrong value

    def expand(text: str, where: str) -> str:
        for found in _EDITOR_VARIABLE.finditer(text):
            kind = (
                "a VS Code input prompt, which toolgate cannot show: put the value in an "
                "environment variable"
                if found[0].startswith("${input:")
                else "an editor's own variable, which toolgate has no value for: write the "
                "value itself, or an environment variable"
            )
            unread.append(f"{where}: {found[0]} is {kind} (${{env:NAME}})")

        def value(found: re.Match[str]) -> str:
            name, default = found.group(1), found.group(2)
            if _EDITOR_VARIABLE.fullmatch(found[0]):
                return found[0]  # reported above
            if default is not None and "${" in default:  # cut at the inner "}" otherwise
                unread.append(
                    f"{where}: ${{{name}:-...}} holds another variable in its default, which "
                    "is not read: write the default itself"
                )
                return ""
            given = os.environ.get(name)
            if default is not None:  # the shell's ":-": the default for unset or empty
                return given or default
            if given is None:
                missing.append(f"{where}: {found[0]} is not set")
                return ""
            return given

        return _VARIABLE.sub(value, text)

    out = dict(entry)
    for key in _EXPANDED_KEYS:
        value = entry.get(key)
        if isinstance(value, str):
            out[key] = expand(value, key)
        elif isinstance(value, list):
            out[key] = [
                expand(item, f"{key}[{i}]") if isinstance(item, str) else item
                for i, item in enumerate(value)
            ]
        elif isinstance(value, dict):
            out[key] = {
                name: expand(item, f"{key}.{name}") if isinstance(item, str) else item
                for name, item in value.items()
            }
    if missing:
        unread.append("; ".join(missing) + " (set it, or give a default: ${NAME:-default})")
    if unread:
        raise ValueError("; ".join(unread))
    return out

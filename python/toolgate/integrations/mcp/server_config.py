"""The upstream servers of ``toolgate mcp-proxy``: an MCP client configuration file.

The servers come in the ``mcpServers`` form MCP clients write::

    {"mcpServers": {
        "github": {"command": "github-mcp-server", "args": ["stdio"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "..."}},
        "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}},
        "old": {"command": "old-server", "disabled": true}}}

As in MCP clients' own files, ``${VAR}`` in a value (``command``, ``args``, ``env``,
``cwd``, ``url``, ``headers``) is the environment variable ``VAR``, and ``${VAR:-default}``
is ``default`` when ``VAR`` is unset or empty; so a token stays out of the file. A variable
that is not set, with no default, is an error naming it and where it is. ``$VAR`` without
braces is kept as written, as those clients keep it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters

from toolgate.errors import InvalidInputError

__all__ = ["HttpServer", "ServerSpec", "load_servers"]

_STDIO_KEYS = {"type", "command", "args", "env", "cwd", "disabled"}
_HTTP_KEYS = {"type", "url", "headers", "disabled"}

#: The keys whose values (strings, or lists or objects of strings) take ``${VAR}``.
_EXPANDED_KEYS = ("command", "args", "env", "cwd", "url", "headers")

#: ``${NAME}`` or ``${NAME:-default}``.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class HttpServer:
    """A Streamable HTTP upstream: its URL and the headers every request carries."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


ServerSpec = StdioServerParameters | HttpServer


def load_servers(path: str | Path) -> dict[str, ServerSpec]:
    """The upstream servers of an MCP client configuration file, without the disabled ones.

    Each entry is a stdio command (``command``, ``args``, ``env``, ``cwd``) or a Streamable
    HTTP endpoint (``url``, ``headers``), optionally with ``type`` (``stdio``, ``http``) and
    ``disabled``. Every problem is reported at once, naming the entry; an unknown key is one,
    since a misspelt ``args`` would otherwise start the command without its arguments.
    """
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"{path}: not a JSON file: {exc}") from None
    servers = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise InvalidInputError(f'{path}: expected {{"mcpServers": {{name: {{...}}, ...}}}}')
    specs: dict[str, ServerSpec] = {}
    problems: list[str] = []
    for name, entry in servers.items():
        try:
            spec = _server_spec(entry)
        except ValueError as exc:
            problems.append(f"mcpServers.{name}: {exc}")
            continue
        if spec is not None:
            specs[name] = spec
    if problems:
        raise InvalidInputError(f"{path}: {'; '.join(problems)}")
    if not specs:
        raise InvalidInputError(f"{path}: every server is disabled")
    return specs


def _server_spec(entry: Any) -> ServerSpec | None:
    """One ``mcpServers`` entry; ``None`` when it is disabled."""
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object, got {type(entry).__name__}")
    if entry.get("disabled") is not True:  # a server left off needs no variables set
        entry = _expanded(entry)
    http = "url" in entry or entry.get("type") in ("http", "streamable-http")
    if unknown := sorted(set(entry) - (_HTTP_KEYS if http else _STDIO_KEYS)):
        raise ValueError(f"unknown keys {unknown}")
    kind = entry.get("type", "http" if http else "stdio")
    if kind not in ("stdio", "http", "streamable-http"):
        raise ValueError(f"'type' must be 'stdio' or 'http', got {kind!r}")
    if (kind == "stdio") == http:
        raise ValueError(f"'type' {kind!r} does not fit the entry's keys ('url' or 'command')")
    if not isinstance(entry.get("disabled", False), bool):
        raise ValueError(f"'disabled' must be true or false, got {entry['disabled']!r}")
    spec = _http_spec(entry) if http else _stdio_spec(entry)
    return None if entry.get("disabled", False) else spec


def _http_spec(entry: dict[str, Any]) -> HttpServer:
    url, headers = entry.get("url"), entry.get("headers", {})
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"'url' must be an http(s) URL, got {url!r}")
    if not _str_map(headers):
        raise ValueError("'headers' must map names to string values")
    return HttpServer(url, dict(headers))


def _stdio_spec(entry: dict[str, Any]) -> StdioServerParameters:
    command, args, env = entry.get("command"), entry.get("args", []), entry.get("env")
    if not isinstance(command, str) or not command:
        raise ValueError("needs 'command' (a stdio server) or 'url' (a Streamable HTTP one)")
    if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        raise ValueError(f"'args' must be a list of strings, got {args!r}")
    if env is not None and not _str_map(env):
        raise ValueError("'env' must map names to string values")
    return StdioServerParameters(command=command, args=args, env=env, cwd=entry.get("cwd"))


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _expanded(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with the ``${VAR}`` in its values replaced from the environment; a
    :class:`ValueError` naming every variable not set and where it is."""
    missing: list[str] = []

    def expand(text: str, where: str) -> str:
        def value(found: re.Match[str]) -> str:
            name, default = found.group(1), found.group(2)
            given = os.environ.get(name)
            if default is not None:  # the shell's ":-": the default for unset or empty
                return given or default
            if given is None:
                missing.append(f"{where}: ${{{name}}} is not set")
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
        raise ValueError("; ".join(missing) + " (set it, or give a default: ${NAME:-default})")
    return out

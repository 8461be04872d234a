"""The upstream servers of ``toolgate mcp-proxy``: an MCP client configuration file.

The servers come in the ``mcpServers`` form MCP clients write::

    {"mcpServers": {
        "github": {"command": "github-mcp-server", "args": ["stdio"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "..."}},
        "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}},
        "old": {"command": "old-server", "disabled": true}}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters

from toolgate.errors import InvalidInputError

__all__ = ["HttpServer", "ServerSpec", "load_servers"]

_STDIO_KEYS = {"type", "command", "args", "env", "cwd", "disabled"}
_HTTP_KEYS = {"type", "url", "headers", "disabled"}


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

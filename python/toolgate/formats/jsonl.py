"""JSONL registries: one tool per line, ``{"server", "name", "description", "inputSchema"}``.

Any tool shape :func:`toolgate.formats.tool_dict.parse_tool_dict` knows is accepted on a line; blank
lines are skipped, and a line that is not JSON is reported with its number.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from toolgate.formats.raw import RawTool, ToolView
from toolgate.formats.tool_dict import parse_tool_dict
from toolgate.json_limits import loads

__all__ = ["dumps", "parse"]


def parse(text: str | Iterable[str], server: str | None) -> list[RawTool]:
    """Read JSONL text (or an iterable of lines) into raw tools."""
    # Lines end at a line feed only: JSON strings may hold U+2028, U+2029 and U+0085 raw,
    # at which str.splitlines() would cut them (a trailing CR is JSON whitespace).
    lines = text.split("\n") if isinstance(text, str) else text
    out: list[RawTool] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            obj: Any = loads(line)
        except ValueError as exc:  # also a number past 4,300 digits, or nesting too deep
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            out.append(RawTool(where=where, problem=f"not valid JSON ({reason})"))
            continue
        out.extend(parse_tool_dict(obj, where, server))
    return out


def dumps(tools: Iterable[ToolView]) -> str:
    """Write tools as JSONL with their original server and name, one per line."""
    rows = (
        {
            "server": t.server,
            "name": t.name,
            "description": t.description,
            "inputSchema": t.input_schema,
        }
        for t in tools
    )
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

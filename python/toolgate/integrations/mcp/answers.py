"""The answers toolgate gives in a server's place: ``CallToolResult`` texts for a model, and
upstream answers passed on as the proxy's own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from mcp.types import (
    CallToolResult,
    CompleteResult,
    GetPromptResult,
    InputRequiredResult,
    ReadResourceResult,
)
from pydantic import BaseModel

from toolgate.catalog.catalog import Catalog
from toolgate.verify import Verdict, closest_name

__all__ = [
    "MAX_RESULT_BYTES",
    "MIN_RESULT_BYTES",
    "ResultT",
    "dropped_answer",
    "error_result",
    "json_size",
    "not_answering",
    "passed_on",
    "text_result",
    "unknown_names_note",
]

#: The most bytes of JSON an upstream's answer to a tool call, a prompt or a read may take to
#: be passed on, unless its server's entry says otherwise (``maxResultBytes``): past a model's
#: whole context many times over, yet room for a few large screenshots.
MAX_RESULT_BYTES = 4 << 20

#: The smallest such limit taken: a smaller one would refuse every answer (and a 4 in a
#: config was meant as megabytes).
MIN_RESULT_BYTES = 1024

ResultT = TypeVar(
    "ResultT",
    CallToolResult,
    CompleteResult,
    GetPromptResult,
    InputRequiredResult,
    ReadResourceResult,
)

# An upstream's own name in its answers' ``_meta``, which the proxy must not pass off as its.
_SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"


def text_result(text: str, *, is_error: bool = False) -> CallToolResult:
    """A result holding ``text`` alone."""
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "isError": is_error}
    )


def dropped_answer(server: str, limit: int, size: int | None = None) -> str:
    """Why an answer of ``server``'s, of ``size`` bytes if known, was dropped as it was read:
    past the ``limit`` bytes the proxy reads of one."""
    what = f"MCP server {server!r}'s answer" if server else "An MCP server's answer"
    is_ = "is more than" if size is None else f"is {size:,} bytes, more than"
    return (
        f"{what} {is_} the {limit:,} bytes the proxy reads, so it was dropped. The call "
        "reached the server, which may have acted on it: only its answer is missing. If the "
        "tool can, call it again asking for less."
    )


def error_result(verdict: Verdict) -> CallToolResult:
    """A refused call's verdict as the error result the model reads."""
    return CallToolResult.model_validate(verdict.to_tool_result("mcp"))


#: Unknown ``select:`` names given the closest tool name, and unknown names listed at all. Each
#: suggestion is an edit distance to every tool of the catalog, in the event loop: a model's
#: ``select:`` of hundreds of made-up names held a proxy of 2,000 tools for minutes.
SUGGESTED_NAMES = 3
LISTED_NAMES = 20


def unknown_names_note(unknown: Sequence[str], catalog: Catalog) -> str:
    """``No tool is named: x (did you mean 'y'?).`` for names a ``select:`` asked for that
    no tool of ``catalog`` has: the first :data:`SUGGESTED_NAMES` with the closest exposed
    name if one is close, at most :data:`LISTED_NAMES` in all, and how many more there are."""
    names = [tool.exposed_name for tool in catalog]
    distinct = list(dict.fromkeys(unknown))
    parts = []
    for i, name in enumerate(distinct[:LISTED_NAMES]):
        close = closest_name(name, names) if i < SUGGESTED_NAMES else None
        parts.append(f"{name} (did you mean {close!r}?)" if close else name)
    if len(distinct) > LISTED_NAMES:
        parts.append(f"and {len(distinct) - LISTED_NAMES:,} more")
    return f"No tool is named: {', '.join(parts)}."


def passed_on(result: ResultT) -> ResultT:
    """An upstream's result to pass on as the proxy's: without the upstream's server info in
    its ``_meta`` (the SDK puts the proxy's own there); copied only when there is something
    to drop (a result may be megabytes)."""
    meta = result.meta
    if not (meta and _SERVER_INFO_META in meta):
        return result
    rest = {k: v for k, v in meta.items() if k != _SERVER_INFO_META}
    return result.model_copy(update={"meta": rest or None})


def json_size(result: BaseModel) -> int:
    """How many bytes ``result`` takes as JSON, as the proxy sends it on."""
    serializer = type(result).__pydantic_serializer__
    return len(serializer.to_json(result, by_alias=True, exclude_none=True))


def not_answering(servers: Sequence[str], *, start: str = "server") -> str:
    """``server 'git' is not answering`` (``servers 'git', 'fetch' are ...``); ``start``
    is the first word's spelling (``"Server"`` begins a sentence)."""
    names = ", ".join(repr(server) for server in servers)
    if len(servers) > 1:
        return f"{start}s {names} are not answering"
    return f"{start} {names} is not answering"

"""A model's tool call in any provider's shape, read as a name and its arguments."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.json_limits import json_problem, loads

__all__ = ["parse_tool_call"]


@dataclass(frozen=True)
class ParsedCall:
    """A tool call reduced to its name, arguments and call id, whatever its provider."""

    name: str
    arguments: Any
    call_id: str | None = None
    problem: str | None = None


# Where each provider nests a call (key -> its argument field), tried in order. OpenAI Chat
# wraps it in "function" (legacy messages in "function_call"), Gemini in "functionCall"
# (REST) or "function_call" (the Python SDK's serialisation), MCP's JSON-RPC request
# "tools/call" in "params".
_WRAPPERS = (
    ("function", "arguments"),
    ("functionCall", "args"),
    ("function_call", None),
    ("params", "arguments"),
)


def _unwrap(call: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None, str | None]:
    """The mapping holding the name and arguments, the arguments' key, and a problem."""
    for key, args_key in _WRAPPERS:
        if key not in call or (key == "params" and call.get("method") != "tools/call"):
            continue
        inner = call[key]
        if not isinstance(inner, Mapping):
            return call, None, f"{key!r} must be an object"
        if args_key is None:  # OpenAI's legacy "arguments" or Gemini's "args"
            args_key = "arguments" if "arguments" in inner else "args"
        return inner, args_key, None
    if call.get("type") == "tool_use":
        return call, "input", None
    args_key = next((k for k in ("arguments", "args", "input") if k in call), None)
    return call, args_key, None


def parse_tool_call(call: Any) -> ParsedCall:
    """Read an OpenAI, Anthropic, Gemini or MCP tool call; never raises."""
    if not isinstance(call, Mapping):
        return ParsedCall(
            "", None, None, f"a tool call is a JSON object, got {type(call).__name__}"
        )
    inner, args_key, problem = _unwrap(call)
    # A Responses function_call item has both: its "id" (fc_...) names the item, its
    # "call_id" the call that the function_call_output must answer.
    call_id = call.get("call_id") or inner.get("id") or call.get("id")
    if problem:
        return ParsedCall("", None, call_id, problem)
    name = inner.get("name")
    if name is not None and not isinstance(name, str):
        # The type, not the repr: no repr takes an integer of 5,000 digits or deep nesting.
        problem = f"the tool name must be a string, got {type(name).__name__}"
        return ParsedCall("", None, call_id, problem)
    parsed = ParsedCall(name or "", inner.get(args_key, {}) if args_key else {}, call_id)
    if parsed.problem:
        return parsed
    if not parsed.name:
        return ParsedCall("", None, parsed.call_id, "the call has no tool name")
    args = parsed.arguments
    if args is None or args == "":
        args = {}
    if isinstance(args, str):
        try:
            args = loads(args)
        except json.JSONDecodeError as exc:
            problem = f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
            return ParsedCall(parsed.name, None, parsed.call_id, problem)
        except ValueError as exc:  # nested too deeply, or a number too long to read
            return ParsedCall(
                parsed.name, None, parsed.call_id, f"arguments are not valid JSON ({exc})"
            )
    if not isinstance(args, Mapping):
        problem = f"arguments must be a JSON object, got {type(args).__name__}"
        return ParsedCall(parsed.name, None, parsed.call_id, problem)
    # Validation walks the arguments recursively; bounded here, before anything does.
    problem = json_problem(args, strict=False)
    if problem:
        return ParsedCall(parsed.name, None, parsed.call_id, f"arguments hold {problem}")
    return ParsedCall(parsed.name, dict(args), parsed.call_id)

"""A model's tool call in any provider's shape, read as a name and its arguments."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.json_limits import MAX_VALUES, json_problem, loads

__all__ = ["answer_tool_calls", "call_name", "parse_tool_call", "plain_json"]


@dataclass(frozen=True)
class ParsedCall:
    """A tool call reduced to its name, arguments and call id, whatever its provider."""

    name: str
    arguments: Any
    call_id: str | None = None
    problem: str | None = None


# Where each provider nests a call (key -> its argument field), tried in order. OpenAI Chat
# wraps it in "function" (legacy messages in "function_call"; a custom tool's, of type
# "custom", in "custom", its input free text), Gemini in "functionCall" (REST) or
# "function_call" (the Python SDK's serialisation), MCP's JSON-RPC request "tools/call" in
# "params".
_WRAPPERS = (
    ("function", "arguments"),
    ("custom", "input"),
    ("functionCall", "args"),
    ("function_call", None),
    ("params", "arguments"),
)


def _unwrap(call: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None, str | None]:
    """The mapping holding the name and arguments, the arguments' key, and a problem."""
    for key, args_key in _WRAPPERS:
        if key not in call or (key == "params" and call.get("method") != "tools/call"):
            continue
        if key == "custom" and call.get("type") != "custom":  # a key of the caller's own
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


def plain_json(value: Any) -> Any:
    """``value`` as the JSON it stands for when it is a provider SDK's object, else itself.

    The openai, anthropic and google-genai clients hand back pydantic models
    (``ChatCompletionMessageToolCall``, a Responses ``ResponseFunctionToolCall``,
    ``ToolUseBlock``, ``FunctionCall`` or a ``Part`` holding one); dumped by alias, they are
    the provider's wire JSON, which the readers here know. Nothing is imported from the SDKs.
    """
    dump = getattr(value, "model_dump", None)
    if isinstance(value, (Mapping, type)) or not callable(dump):
        return value
    try:
        return dump(mode="json", by_alias=True, exclude_none=True)
    except (TypeError, ValueError):  # a look-alike method that is not pydantic's
        return value


def _no_constant(name: str) -> Any:
    """Refuses ``NaN`` and ``Infinity``, which Python's reader takes and JSON has not: NaN
    passes every bound a schema sets, so verify would let it through to the tool."""
    raise ValueError(f"{name} is no JSON number")


def parse_tool_call(call: Any) -> ParsedCall:
    """Read an OpenAI, Anthropic, Gemini or MCP tool call (a dict, or the SDK's own object);
    never raises."""
    call = plain_json(call)
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
            args = loads(args, parse_constant=_no_constant)
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
    # Validation walks the arguments recursively; bounded here, before anything does (in
    # depth and in values: each costs microseconds of Python, on a proxy's event loop).
    problem = json_problem(args, strict=False, max_values=MAX_VALUES)
    if problem:
        return ParsedCall(parsed.name, None, parsed.call_id, f"arguments hold {problem}")
    return ParsedCall(parsed.name, dict(args), parsed.call_id)


def call_name(call: Any) -> str:
    """The tool name a call in any provider's shape names (``""`` when none), its arguments
    left unread."""
    call = plain_json(call)
    if not isinstance(call, Mapping):
        return ""
    inner, _, problem = _unwrap(call)
    name = inner.get("name")
    return name if problem is None and isinstance(name, str) else ""


def answer_tool_calls(answer: Any, shape: str) -> list[Any]:
    """The tool calls in a model's whole (not streamed) answer, as the provider writes them.

    ``shape`` is the request's: ``"openai"`` (Chat: each choice's ``tool_calls``, to function
    and custom tools, and legacy ``function_call``), ``"openai-responses"``
    (``function_call`` and ``custom_tool_call`` output items),
    ``"anthropic"`` (``tool_use`` blocks; server tools run by the provider are not calls to
    check) or ``"gemini"`` (each candidate's ``functionCall`` parts, of one response or of a
    stream's JSON array of them). Anything else in the
    answer is skipped: an answer in no known form has no calls.
    """
    answer = plain_json(answer)
    if shape == "gemini":
        # A stream read whole (streamGenerateContent without SSE) is an array of responses.
        responses = _items(answer) if isinstance(answer, list) else _items([answer])
        return [
            part
            for response in responses
            for candidate in _items(response.get("candidates"))
            for part in _items(_get(candidate.get("content"), "parts"))
            if "functionCall" in part or "function_call" in part
        ]
    if not isinstance(answer, Mapping):
        return []
    if shape == "openai":
        calls: list[Any] = []
        for choice in _items(answer.get("choices")):
            message = choice.get("message")
            if isinstance(message, Mapping):
                calls += [c for c in _items(message.get("tool_calls")) if _is_chat_call(c)]
                if isinstance(message.get("function_call"), Mapping):
                    calls.append({"function_call": message["function_call"]})
        return calls
    if shape == "openai-responses":
        output = _items(answer.get("output"))
        return [item for item in output if item.get("type") in RESPONSES_CALLS]
    if shape == "anthropic":
        return [block for block in _items(answer.get("content")) if block.get("type") == "tool_use"]
    return []


# The Responses output items that are calls the application runs: to a function, to a
# custom tool (its input free text).
RESPONSES_CALLS = ("function_call", "custom_tool_call")


def _is_chat_call(call: Mapping[str, Any]) -> bool:
    """A Chat ``tool_calls`` entry calling a function, or a custom tool (under ``custom``)."""
    return "function" in call or (call.get("type") == "custom" and "custom" in call)


def _items(value: Any) -> list[Mapping[str, Any]]:
    """The mappings in ``value`` when it is a list, else none."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else None

"""The hallucination gate: check a model's tool call against this turn's active set.

:func:`verify_call` accepts a tool call in any provider's shape, maps the called name back to a
tool through its exposed name, and answers with a :class:`Verdict`: ``ok``, or an ``error`` of

- ``malformed_call``: no name, or arguments that are not a JSON object;
- ``unknown_tool``: no tool in the catalog has that name;
- ``tool_not_available``: the tool exists but was not promoted this turn (a routing miss);
- ``invalid_arguments``: the arguments break the tool's JSON Schema (``path`` says where).

Each error carries a ``message`` the model can act on, the names it may call (``available``)
and the ``closest`` one, and :meth:`Verdict.to_tool_result` wraps it as the provider's in-band
tool result, so the model recovers on its next turn.

>>> call = {"name": "get_mee", "arguments": {}}
>>> verdict = verify_call(catalog, ["github/get_me"], call)  # doctest: +SKIP
>>> verdict.error, verdict.closest  # doctest: +SKIP
('unknown_tool', 'get_me')
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolgate.catalog import Catalog
from toolgate.errors import InvalidInputError
from toolgate.promote import TOOL_SEARCH_ID
from toolgate.tool import Tool, split_name

__all__ = ["Verdict", "closest_name", "parse_tool_call", "verify_call"]

_MIN_SIMILARITY = 0.34
_MAX_LISTED = 50


@dataclass(frozen=True)
class ParsedCall:
    """A tool call reduced to its name, arguments and call id, whatever its provider."""

    name: str
    arguments: Any
    call_id: str | None = None
    problem: str | None = None


def _from_openai(call: Mapping[str, Any]) -> ParsedCall:
    fn = call["function"]
    if not isinstance(fn, Mapping):
        return ParsedCall("", None, call.get("id"), "'function' must be an object")
    return ParsedCall(str(fn.get("name") or ""), fn.get("arguments", "{}"), call.get("id"))


def parse_tool_call(call: Any) -> ParsedCall:
    """Read an OpenAI, Anthropic, Gemini or MCP tool call; never raises."""
    if not isinstance(call, Mapping):
        return ParsedCall(
            "", None, None, f"a tool call is a JSON object, got {type(call).__name__}"
        )
    if "function" in call:
        parsed = _from_openai(call)
    elif "functionCall" in call:
        inner = call["functionCall"]
        if not isinstance(inner, Mapping):
            return ParsedCall("", None, None, "'functionCall' must be an object")
        parsed = ParsedCall(str(inner.get("name") or ""), inner.get("args", {}), inner.get("id"))
    elif call.get("type") == "tool_use":
        parsed = ParsedCall(str(call.get("name") or ""), call.get("input", {}), call.get("id"))
    else:
        args = call.get("arguments", call.get("args", call.get("input", {})))
        call_id = call.get("call_id", call.get("id"))
        parsed = ParsedCall(str(call.get("name") or ""), args, call_id)
    if parsed.problem:
        return parsed
    if not parsed.name:
        return ParsedCall("", None, parsed.call_id, "the call has no tool name")
    args = parsed.arguments
    if args is None or args == "":
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as exc:
            problem = f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
            return ParsedCall(parsed.name, None, parsed.call_id, problem)
    if not isinstance(args, Mapping):
        problem = f"arguments must be a JSON object, got {type(args).__name__}"
        return ParsedCall(parsed.name, None, parsed.call_id, problem)
    return ParsedCall(parsed.name, dict(args), parsed.call_id)


def _levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _words(name: str) -> set[str]:
    return set(split_name(name).split())


def closest_name(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` by edit distance or shared words, if any is close.

    >>> closest_name("create_isue", ["create_issue", "list_issues"])
    'create_issue'
    """
    best, best_score = None, 0.0
    wanted = _words(name)
    for candidate in sorted(candidates):
        longest = max(len(name), len(candidate)) or 1
        edit = 1 - _levenshtein(name.lower(), candidate.lower()) / longest
        theirs = _words(candidate)
        overlap = len(wanted & theirs) / len(wanted | theirs) if wanted | theirs else 0.0
        score = max(edit, overlap)
        if score > best_score:
            best, best_score = candidate, score
    return best if best_score >= _MIN_SIMILARITY else None


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one tool call."""

    ok: bool
    error: str | None = None
    tool_id: str | None = None
    name: str = ""
    available: tuple[str, ...] = ()
    closest: str | None = None
    path: str | None = None
    message: str = ""
    call_id: str | None = None
    arguments: dict[str, Any] | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        if self.ok:
            return f"Verdict(ok, {self.tool_id})"
        return f"Verdict({self.error}, {self.name!r}, closest={self.closest!r})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (without the arguments, which may hold user data)."""
        return {
            "ok": self.ok,
            "error": self.error,
            "tool_id": self.tool_id,
            "name": self.name,
            "available": list(self.available),
            "closest": self.closest,
            "path": self.path,
            "message": self.message,
        }

    def _payload(self) -> dict[str, Any]:
        listed = list(self.available[:_MAX_LISTED])
        body: dict[str, Any] = {"error": self.error, "message": self.message, "available": listed}
        if len(self.available) > _MAX_LISTED:
            body["available_truncated"] = len(self.available)
        if self.closest:
            body["closest"] = self.closest
        if self.path:
            body["path"] = self.path
        return body

    def to_tool_result(self, provider: str = "openai") -> dict[str, Any]:
        """The error as the tool result ``provider`` expects, ready to append to the history.

        ``"openai"`` (a ``role: tool`` message), ``"openai-responses"``
        (``function_call_output``), ``"anthropic"`` (a ``tool_result`` block with
        ``is_error``), ``"gemini"`` (a ``functionResponse`` part) or ``"mcp"`` (a
        ``CallToolResult`` with ``isError``).
        """
        if self.ok:
            raise InvalidInputError("the call passed verification; there is no error to report")
        text = json.dumps(self._payload(), ensure_ascii=False)
        if provider == "openai":
            return {"role": "tool", "tool_call_id": self.call_id or "", "content": text}
        if provider == "openai-responses":
            return {"type": "function_call_output", "call_id": self.call_id or "", "output": text}
        if provider == "anthropic":
            return {
                "type": "tool_result",
                "tool_use_id": self.call_id or "",
                "content": text,
                "is_error": True,
            }
        if provider == "gemini":
            response = {"functionResponse": {"name": self.name, "response": self._payload()}}
            if self.call_id:
                response["functionResponse"]["id"] = self.call_id
            return response
        if provider == "mcp":
            return {"content": [{"type": "text", "text": text}], "isError": True}
        raise InvalidInputError(
            f"unknown provider {provider!r}; expected openai, openai-responses, anthropic, "
            "gemini or mcp"
        )


_VALIDATORS: dict[tuple[str, str], Any] = {}
_VALIDATORS_LOCK = threading.Lock()


def _validator(tool: Tool) -> Any:
    from jsonschema.validators import (  # type: ignore[import-untyped]
        Draft202012Validator,
        validator_for,
    )

    key = (tool.id, tool.fingerprint)
    with _VALIDATORS_LOCK:
        found = _VALIDATORS.get(key)
    if found is None:
        cls = validator_for(tool.input_schema, default=Draft202012Validator)
        found = cls(tool.input_schema, format_checker=cls.FORMAT_CHECKER)
        with _VALIDATORS_LOCK:
            if len(_VALIDATORS) > 4096:
                _VALIDATORS.clear()
            _VALIDATORS[key] = found
    return found


def _json_path(parts: Iterable[Any]) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _resolve(catalog: Catalog, name: str) -> Tool | None:
    tool = catalog.get(name)  # a full id
    if tool is None:
        try:
            tool = catalog.by_exposed_name(name)
        except KeyError:
            matches = catalog.with_name(name)
            tool = matches[0] if len(matches) == 1 else None
    return tool


def _active_set(catalog: Catalog, active: Any) -> tuple[list[str], str | None]:
    search_name = getattr(active, "search_tool_name", None)
    ids = getattr(active, "active_ids", None)
    if ids is None:
        ids = getattr(active, "ids", active)
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InvalidInputError(
            "active_ids must be a list of tool ids, a RouteResult or a Promotion"
        )
    return [i for i in ids if i in catalog], search_name


def verify_call(catalog: Catalog, active_ids: Any, tool_call: Any) -> Verdict:
    """Check one tool call against the tools active this turn.

    ``active_ids`` is a list of tool ids, a ``RouteResult`` or a
    :class:`~toolgate.promote.Promotion` (then calls to its ``tool_search`` tool pass too).
    Pinned tools are always active.
    """
    active, search_name = _active_set(catalog, active_ids)
    active_set = set(active) | set(catalog.pinned_ids)
    available = tuple(catalog[i].exposed_name for i in catalog.in_catalog_order(active_set))
    if search_name:
        available = (search_name, *available)
    call = parse_tool_call(tool_call)
    base: dict[str, Any] = {"name": call.name, "available": available, "call_id": call.call_id}

    if call.problem and not call.name:
        return Verdict(
            False, "malformed_call", message=f"Malformed tool call: {call.problem}.", **base
        )
    if search_name and call.name == search_name:
        return Verdict(True, tool_id=TOOL_SEARCH_ID, arguments=call.arguments, **base)
    tool = _resolve(catalog, call.name)
    if tool is None or tool.id not in active_set:
        closest = closest_name(call.name, available)
        hint = f" Did you mean {closest!r}?" if closest else ""
        listed = ", ".join(available[:_MAX_LISTED]) or "none"
        if tool is None:
            return Verdict(
                False,
                "unknown_tool",
                closest=closest,
                message=(
                    f"There is no tool called {call.name!r}.{hint} "
                    f"Tools you can call now: {listed}."
                ),
                **base,
            )
        return Verdict(
            False,
            "tool_not_available",
            tool_id=tool.id,
            closest=closest,
            message=(
                f"Tool {call.name!r} is not available this turn.{hint} Tools you can call now: "
                f"{listed}. Ask for {call.name!r} again if it is really needed."
            ),
            **base,
        )
    if call.problem:
        return Verdict(
            False,
            "malformed_call",
            tool_id=tool.id,
            message=f"Malformed call to {call.name!r}: {call.problem}.",
            **base,
        )
    return _check_arguments(tool, call, base)


def _check_arguments(tool: Tool, call: ParsedCall, base: dict[str, Any]) -> Verdict:
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

    error = best_match(_validator(tool).iter_errors(call.arguments))
    if error is None:
        return Verdict(True, tool_id=tool.id, arguments=call.arguments, **base)
    parts = list(error.absolute_path)
    if error.validator == "required":
        # Point at the missing argument itself rather than at the object that lacks it.
        missing = re.match(r"^'(.+)' is a required property$", error.message)
        if missing:
            parts.append(missing.group(1))
    path = _json_path(parts)
    message = (
        f"Invalid arguments for {call.name!r} at {path}: {error.message}. "
        "Fix the arguments to match the tool's schema and call it again."
    )
    return Verdict(
        False,
        "invalid_arguments",
        tool_id=tool.id,
        path=path,
        message=message,
        arguments=call.arguments,
        **base,
    )

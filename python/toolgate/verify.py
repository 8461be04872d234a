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

import contextlib
import json
import re
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rapidfuzz.distance import Levenshtein

from toolgate.arguments import shown
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.names import name_words
from toolgate.catalog.schema import reference_problem, schema_validator
from toolgate.catalog.tool import Tool
from toolgate.errors import InvalidInputError
from toolgate.formats.calls import ParsedCall, parse_tool_call
from toolgate.formats.raw import PROVIDERS, base_provider
from toolgate.json_limits import json_problem
from toolgate.promotion.active_set import ActiveSet
from toolgate.promotion.discovery import TOOL_SEARCH_ID, search_tool
from toolgate.unicode import printable

__all__ = ["Verdict", "closest_name", "verify_call", "verify_name"]


# The floors a suggestion must reach. Two names of a dozen letters each, unrelated, still
# share about a third of their letters (``delete_everything`` and ``write_query``): an
# edit similarity must pass half to mean a misspelling, while one shared word in three is
# already a kinship (``search`` and ``slack__search``).
_MIN_EDIT_SIMILARITY = 0.5
_MIN_WORD_OVERLAP = 0.34

# Past this length a called name is no slip of a tool's name (providers cap those far below
# it) but junk or an attack, and suggesting for it would cost a pass over it per tool.
_MAX_SUGGESTED_LENGTH = 256


_MAX_LISTED = 50


def _edit_similarity(a: str, b: str) -> float:
    """1 less the edit distance over the longer length; 0 below the suggestion floor, where
    rapidfuzz stops counting (a catalog of thousands is compared on every unknown name)."""
    return Levenshtein.normalized_similarity(a, b, score_cutoff=_MIN_EDIT_SIMILARITY)


def _words(name: str) -> set[str]:
    return set(name_words(name))


def closest_name(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` by edit distance or shared words, if any is close
    enough to be worth suggesting: at most half its letters edited, or one word in three
    shared; an unrelated name gets no suggestion, which would only mislead, and neither does
    a name far longer than any tool's.

    >>> closest_name("create_isue", ["create_issue", "list_issues"])
    'create_issue'
    >>> closest_name("delete_everything", ["write_query", "read_query"]) is None
    True
    """
    if len(name) > _MAX_SUGGESTED_LENGTH:
        return None
    best, best_score = None, 0.0
    wanted = _words(name)
    lowered = name.lower()
    for candidate in sorted(candidates):
        longest = max(len(name), len(candidate)) or 1
        theirs = _words(candidate)
        overlap = len(wanted & theirs) / len(wanted | theirs) if wanted | theirs else 0.0
        score = overlap if overlap >= _MIN_WORD_OVERLAP else 0.0
        # The edit distance is at least the length difference. Unless that leaves room to
        # reach the floor and beat both the best so far and the shared words, the quadratic
        # distance cannot change the outcome.
        edit_bound = 1 - abs(len(name) - len(candidate)) / longest
        if edit_bound >= _MIN_EDIT_SIMILARITY and edit_bound > max(best_score, score):
            score = max(_edit_similarity(lowered, candidate.lower()), score)
        if score > best_score:
            best, best_score = candidate, score
    return best


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
    #: ``path`` with each argument key the tool's schema does not name as ``*``: what
    #: telemetry stores. The key of a free-form map (headers, environment variables) is the
    #: model's choice and may be a secret; the model and the caller still see it in ``path``.
    log_path: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return self.ok

    def __hash__(self) -> int:
        # Of the fields but the arguments, a dict: the generated hash took them, so a verdict
        # that passed (with arguments) was a TypeError and one that failed (none) was not.
        return hash((self.ok, self.error, self.tool_id, self.name, self.path, self.call_id))

    def __repr__(self) -> str:
        if self.ok:
            return f"Verdict(ok, {self.tool_id})"
        # The name is the model's, of any length: cut short (the message keeps it whole).
        return f"Verdict({self.error}, {shown(self.name)}, closest={self.closest!r})"

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
        ``is_error``), ``"gemini"`` or ``"gemini-json-schema"`` (a ``functionResponse`` part)
        or ``"mcp"`` (a ``CallToolResult`` with ``isError``): a :class:`Promotion`'s format
        will do.
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
        if base_provider(provider) == "gemini":
            response = {"functionResponse": {"name": self.name, "response": self._payload()}}
            if self.call_id:
                response["functionResponse"]["id"] = self.call_id
            return response
        if provider == "mcp":
            return {"content": [{"type": "text", "text": text}], "isError": True}
        raise InvalidInputError(
            f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}"
        )


# Each tool's validator while the tool lives (an equal tool, of the same id and content,
# shares it). Keyed by the tool itself, weakly: keyed by its id and fingerprint, the
# validators (each holding its schema) outlived their catalogs, and a gateway seeing a
# stream of tools arrays held 4,096 parsed schemas, up to a gigabyte, past the bound on
# its routers.
_VALIDATORS: weakref.WeakKeyDictionary[Tool, Any] = weakref.WeakKeyDictionary()


_VALIDATORS_LOCK = threading.Lock()


class _BrokenReferences(ValueError):
    """A tool's schema refers back to itself without descending into the arguments, or its
    references fan out too far (loading refuses both; a tool built in code may carry them)."""


def _validator(tool: Tool) -> Any:
    with _VALIDATORS_LOCK:
        found = _VALIDATORS.get(tool)
    if found is None:
        # Checked before validating: a cycle recurses until a panic no handler catches, a
        # fan-out checks a call for hours.
        problem = reference_problem(tool.input_schema)
        if problem is not None:
            raise _BrokenReferences(problem)
        # Offline: a $ref in an untrusted tool's schema must never make verification fetch a URL.
        found = schema_validator(tool.input_schema)
        with _VALIDATORS_LOCK:
            if len(_VALIDATORS) > 4096:
                _VALIDATORS.clear()
            _VALIDATORS[tool] = found
    return found


def _json_path(parts: Iterable[Any]) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _named_keys(schema: Any) -> set[str]:
    """Every property name ``schema`` declares (in ``properties`` or ``required``), anywhere
    in it: a key among them was written by the tool's author, not chosen by the model."""
    names: set[str] = set()
    stack = [schema]
    while stack:  # a loop, not recursion: a schema may nest deeper than the stack allows
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                names.update(k for k in node["properties"] if isinstance(k, str))
            if isinstance(node.get("required"), list):
                names.update(k for k in node["required"] if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return names


def _log_path(parts: Sequence[Any], schema: Any) -> str:
    """The JSON path of ``parts``, with each key ``schema`` does not name as ``*``."""
    named = _named_keys(schema)
    return _json_path(p if isinstance(p, int) or p in named else "*" for p in parts)


def _resolve(catalog: Catalog, name: str, active: set[str]) -> Tool | None:
    """The tool the model meant by ``name``: a full id, an exposed name, or an original name.

    An original name that several servers share resolves to the one of them that is active
    (the model saw only that one); exposed names are unique ignoring case, so a client that
    folds case still reaches its tool.
    """
    tool = catalog.get(name)  # a full id
    if tool is not None:
        return tool
    with contextlib.suppress(KeyError):
        return catalog.by_exposed_name(name)
    matches = catalog.with_name(name)
    if matches:
        live = [t for t in matches if t.id in active]
        if len(live) == 1:
            return live[0]
        # Several active tools share the name (the model must use an exposed name), or
        # several inactive ones do and no one of them is the tool meant.
        return matches[0] if len(matches) == 1 else None
    return catalog.get_exposed(name, ignore_case=True)


def verify_call(catalog: Catalog, active_ids: Any, tool_call: Any) -> Verdict:
    """Check one tool call against the tools active this turn.

    ``active_ids`` is a ``RouteResult``, a :class:`~toolgate.promotion.promote.Promotion` (then
    calls
    to its ``tool_search`` tool, by the name it was sent under, pass too; a tool its budget
    dropped does not), or a list of tool ids, to which the pinned tools are added. Raises
    :class:`InvalidInputError` for a promotion built from another catalog.
    """
    offered = ActiveSet.of(catalog, active_ids, strict=False)
    active_set, search_name = set(offered.ids), offered.search_tool_name
    available = tuple(catalog[i].exposed_name for i in catalog.in_catalog_order(active_set))
    if search_name:
        available = (search_name, *available)
    call = parse_tool_call(tool_call)
    base: dict[str, Any] = {"name": call.name, "available": available, "call_id": call.call_id}

    if call.problem and not call.name:
        return Verdict(
            False, "malformed_call", message=f"Malformed tool call: {call.problem}.", **base
        )
    # Case folded like exposed names (ASCII letters only): the search name is unique among
    # them ignoring case.
    if search_name and call.name.isascii() and call.name.casefold() == search_name.casefold():
        return _check_search_call(catalog, call, base)
    tool = _resolve(catalog, call.name, active_set)
    if tool is None or tool.id not in active_set:
        closest = _closest_available(call.name, catalog, active_set, available)
        hint = f" Did you mean {closest!r}?" if closest else ""
        listed = ", ".join(available[:_MAX_LISTED]) or "none"
        # Tools of several servers go by this name and none is active: it is not available,
        # but which one the model meant is unknown, so none is charged with a routing miss.
        namesakes = catalog.with_name(call.name) if tool is None else []
        unclear = bool(namesakes) and not any(t.id in active_set for t in namesakes)
        if tool is None and not unclear:
            return _unknown_tool(catalog, call.name, active_set, (closest, hint, listed), base)
        return Verdict(
            False,
            "tool_not_available",
            tool_id=None if tool is None else tool.id,
            closest=closest,
            message=_not_available_message(call.name, hint, listed),
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


def _closest_available(
    name: str, catalog: Catalog, active: set[str], available: tuple[str, ...]
) -> str | None:
    """The available (exposed) name closest to ``name``, also judged by the original names
    of the active tools: ``get_confg`` points to ``dart__get_config``."""
    originals = {
        tool.name: tool.exposed_name
        for tool in (catalog[i] for i in catalog.in_catalog_order(active))
        if tool.name != tool.exposed_name
    }
    found = closest_name(name, [*available, *originals])
    return originals.get(found, found) if found is not None else None


def _check_search_call(catalog: Catalog, call: ParsedCall, base: dict[str, Any]) -> Verdict:
    """A call to the promotion's ``tool_search``, checked like any tool's: its ``query``
    argument is what the caller hands to :meth:`Router.route`."""
    search = search_tool(catalog)
    if call.problem:
        verdict = Verdict(
            False, "malformed_call", message=f"Malformed call to {call.name!r}: {call.problem}.",
            **base,
        )  # fmt: skip
    else:
        verdict = _check_arguments(search, call, base)
    return replace(verdict, tool_id=TOOL_SEARCH_ID)


def _unknown_tool(
    catalog: Catalog,
    name: str,
    active: set[str],
    advice: tuple[str | None, str, str],
    base: dict[str, Any],
) -> Verdict:
    """No tool is ``name``: several active tools share it, or nothing by that name exists.

    ``advice`` is the closest available name, the hint naming it, and the available list.
    """
    closest, hint, listed = advice
    shared = [t.exposed_name for t in catalog.with_name(name) if t.id in active]
    if shared:
        closest = shared[0]
        message = (
            f"Several tools are called {name!r}; call one of them by its own name: "
            f"{', '.join(shared[:_MAX_LISTED])}."
        )
    else:
        message = _unknown_message(name, hint, listed)
    return Verdict(False, "unknown_tool", closest=closest, message=message, **base)


def verify_name(tool_call: Any, available: Sequence[str], *, known: Iterable[str] = ()) -> Verdict:
    """Check a call by its name alone against the names of the tools the model was offered.

    For tools known only by name, without a catalog (a framework's tool objects, a request's
    tools array that was not routed): a call to one of ``available`` passes, its arguments
    unchecked; one to a tool of ``known`` that was not offered is ``tool_not_available``;
    any other is ``unknown_tool``; a call without a name, or to an offered tool with
    arguments that are no JSON object, is ``malformed_call``.

    >>> verify_name({"name": "send_emial", "arguments": {}}, ["send_email"]).closest
    'send_email'
    """
    call = parse_tool_call(tool_call)
    offered = tuple(available)
    base: dict[str, Any] = {"name": call.name, "available": offered, "call_id": call.call_id}
    # A call naming a tool not offered says so before its arguments are read, as
    # verify_call says it: a custom tool's free-text input is no JSON object.
    if call.problem and (not call.name or call.name in offered):
        message = f"Malformed tool call: {call.problem}."
        return Verdict(False, "malformed_call", message=message, **base)
    if call.name in offered:
        return Verdict(True, arguments=call.arguments, **base)
    closest = closest_name(call.name, offered)
    hint = f" Did you mean {closest!r}?" if closest else ""
    listed = ", ".join(offered[:_MAX_LISTED]) or "none"
    if call.name in set(known):
        message = _not_available_message(call.name, hint, listed)
        return Verdict(False, "tool_not_available", closest=closest, message=message, **base)
    message = _unknown_message(call.name, hint, listed)
    return Verdict(False, "unknown_tool", closest=closest, message=message, **base)


def _not_available_message(name: str, hint: str, listed: str) -> str:
    return (
        f"Tool {name!r} is not available this turn.{hint} Tools you can call now: {listed}. "
        f"Ask for {name!r} again if it is really needed."
    )


def _unknown_message(name: str, hint: str, listed: str) -> str:
    # Cut short: the message goes back to the model, and a made-up name has no length bound.
    return f"There is no tool called {shown(name)}.{hint} Tools you can call now: {listed}."


def _schema_failure(exc: Exception) -> str:
    if isinstance(exc, re.error):
        return f"a pattern is not a valid regular expression ({exc})"
    if isinstance(exc, _BrokenReferences):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "its references loop forever"
    if not hasattr(exc, "ref"):
        return f"a $ref is malformed ({exc})"
    return f"$ref {getattr(exc, 'ref', '?')!r} does not resolve inside it"


# Of an enum, the values a refusal lists: the model needs a few to see their shape, and the
# closest (a misspelling), not all of a long list (2,000 regions were a 32 KB refusal).
_MAX_ENUM_LISTED = 10
# Of each key in a refusal's path, the characters shown (the value's cut, ``shown``'s).
_MAX_KEY_SHOWN = 80
# A jsonschema message past this is cut in its middle, which keeps its start and its end
# ("... is not of type 'integer'"): a const or a pattern of the tool's may be of any size.
_MAX_SCHEMA_MESSAGE = 400


def _bounded(error: Any) -> str:
    """jsonschema's message for ``error``, small whatever the schema and the value: a long
    enum listed by its first values, its count and the closest to the value; the value (which
    the messages quote whole, a model's 50 KB argument) cut short."""
    values = error.validator_value
    if error.validator == "enum" and isinstance(values, list) and len(values) > _MAX_ENUM_LISTED:
        listed = ", ".join(shown(value) for value in values[:_MAX_ENUM_LISTED])
        message = (
            f"{shown(error.instance)} is not one of the {len(values)} values allowed "
            f"({listed} and {len(values) - _MAX_ENUM_LISTED} more)"
        )
        if isinstance(error.instance, str):
            strings = (value for value in values if isinstance(value, str))
            closest = closest_name(error.instance, strings)
            message += f"; the closest is {closest!r}" if closest is not None else ""
        return message
    message = str(error.message)
    quoted = shown(error.instance)
    if quoted.endswith("...") and message.startswith(whole := repr(error.instance)):
        message = quoted + message[len(whole) :]
    if len(message) > _MAX_SCHEMA_MESSAGE:
        half = _MAX_SCHEMA_MESSAGE // 2
        message = f"{message[:half]}...{message[-half:]}"
    return message


def _refused_whole(tool: Tool, call: ParsedCall, base: dict[str, Any], message: str) -> Verdict:
    """An ``invalid_arguments`` verdict about the arguments as a whole (path ``$``)."""
    return Verdict(
        False,
        "invalid_arguments",
        tool_id=tool.id,
        path="$",
        log_path="$",
        message=message,
        arguments=call.arguments,
        **base,
    )


def _unusable_schema(tool: Tool, call: ParsedCall, base: dict[str, Any], exc: Exception) -> Verdict:
    """The verdict when the tool's own schema cannot be applied: fail closed, never crash."""
    message = (
        f"The arguments for {call.name!r} cannot be checked: the tool's input schema is broken "
        f"({_schema_failure(exc)}). Do not retry this tool; report that it is misconfigured."
    )
    return _refused_whole(tool, call, base, message)


def _check_arguments(tool: Tool, call: ParsedCall, base: dict[str, Any]) -> Verdict:
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]
    from referencing.exceptions import Unresolvable

    # NaN passes every bound a schema sets. A call's text refuses it as it is read; an
    # arguments object (a call built in code, a Gemini args dict) is walked here.
    problem = json_problem(call.arguments, strict=False, finite=True)
    if problem:
        message = f"Invalid arguments for {call.name!r}: they hold {problem}."
        return _refused_whole(tool, call, base, f"{message} Fix the arguments and call it again.")
    try:
        error = best_match(_validator(tool).iter_errors(call.arguments))
    except (Unresolvable, re.error, RecursionError, ValueError) as exc:
        # Catalog loading rejects such schemas, but Tool objects built in code and saved
        # catalogs reopened without re-validation can still carry one.
        return _unusable_schema(tool, call, base, exc)
    if error is None:
        return Verdict(True, tool_id=tool.id, arguments=call.arguments, **base)
    parts = list(error.absolute_path)
    if error.validator == "required":
        # Point at the missing argument itself rather than at the object that lacks it.
        missing = re.match(r"^'(.+)' is a required property$", error.message)
        if missing:
            parts.append(missing.group(1))
    path = _json_path(parts)
    # A key may be the model's own (a free-form map's): cut short, as its value is.
    named = _json_path(printable(p, _MAX_KEY_SHOWN) if isinstance(p, str) else p for p in parts)
    message = (
        f"Invalid arguments for {call.name!r} at {named}: {_bounded(error)}. "
        "Fix the arguments to match the tool's schema and call it again."
    )
    return Verdict(
        False,
        "invalid_arguments",
        tool_id=tool.id,
        path=path,
        log_path=_log_path(parts, tool.input_schema),
        message=message,
        arguments=call.arguments,
        **base,
    )

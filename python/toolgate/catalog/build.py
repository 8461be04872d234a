"""Building tools from what a format read: every check a tool must pass to enter a catalog."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import lru_cache, partial
from typing import Any

from toolgate.catalog.schema import reference_and_regex_problem
from toolgate.catalog.summary import SUMMARY_MAX_TOKENS
from toolgate.catalog.tool import Tool, canonical_json, satisfied_by_run
from toolgate.errors import CatalogError, CatalogWarning, InvalidInputError, Offender
from toolgate.formats.raw import EMPTY_SCHEMA
from toolgate.formats.schema_walk import normalize_type_aliases
from toolgate.formats.tokens import count_text
from toolgate.json_limits import json_problem
from toolgate.memo import Memo
from toolgate.unicode import lone_surrogate_at

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "MAX_SCHEMA_BYTES",
    "SELF_PINS",
    "Offender",
    "RequirementIndex",
    "block_problem",
    "build_tools",
    "check_self_pins",
    "validated_schema",
]


#: Longest tool or server name accepted.
MAX_NAME_CHARS = 256


#: Longest description accepted (longer is almost always a pasted README, not a description).
MAX_DESCRIPTION_CHARS = 10_000


#: Largest input schema accepted, as compact JSON.
MAX_SCHEMA_BYTES = 100_000


_META_KEYS = {"requires", "scopes", "tags", "pinned", "summary"}


#: What becomes of a pin a tool's own block gives it (the one key of the block that widens
#: the tool's reach rather than narrowing it): ``"refuse"`` makes the tool a bad tool,
#: ``"ignore"`` keeps it unpinned, with a warning.
SELF_PINS = ("refuse", "ignore")


_REQUIRES_KEYS = {"scopes", "tools", "milestones"}


class _Reject(Exception):
    """One tool's problem, caught by :func:`build_tools` and turned into an :class:`Offender`."""


@lru_cache(maxsize=8)
def _metaschema_validator(draft: Any) -> Any:
    # One validator per draft, reused: building it (and its reference registry) per schema
    # costs four times more than the check itself.
    return draft(draft.META_SCHEMA)


_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})


_ANY_VALUE_KEYS = frozenset({"default", "const"})


_BOOL_KEYS = frozenset({"deprecated", "readOnly", "writeOnly"})


_STRING_KEYS = frozenset({"description", "title", "format", "pattern", "$comment"})


_COUNT_KEYS = frozenset(
    {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}
)


_NUMBER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def _unique_strings(value: Any, allowed: frozenset[str] | None = None) -> bool:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return False
    return len(set(value)) == len(value) and (allowed is None or set(value) <= allowed)


def _is_plainly_valid(node: Any, depth: int = 0) -> bool:
    """True only for schemas in a small, common subset that is valid under every draft.

    Most tool schemas are flat objects of typed, described properties, and checking those by
    hand is far cheaper than the metaschema. Anything outside the subset returns False and goes
    to the full metaschema check, so this can only skip work, never accept a bad schema.
    """
    if isinstance(node, bool):
        return True
    if not isinstance(node, dict) or depth > 16:
        return False
    for key, value in node.items():
        if key in _ANY_VALUE_KEYS:
            continue
        if key in _STRING_KEYS:
            ok = isinstance(value, str)
        elif key in _COUNT_KEYS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif key in _NUMBER_KEYS:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif key == "type":
            ok = (
                value in _JSON_TYPES
                if isinstance(value, str)
                else (_unique_strings(value, _JSON_TYPES) and bool(value))
            )
        elif key == "required":
            ok = _unique_strings(value)
        elif key in ("enum", "examples"):
            ok = isinstance(value, list)
        elif key in _BOOL_KEYS:
            ok = isinstance(value, bool)
        elif key == "properties":
            ok = isinstance(value, dict) and all(
                _is_plainly_valid(sub, depth + 1) for sub in value.values()
            )
        elif key in ("items", "additionalProperties"):
            ok = _is_plainly_valid(value, depth + 1)
        elif key in ("anyOf", "oneOf", "allOf"):
            ok = (
                isinstance(value, list)
                and bool(value)
                and all(_is_plainly_valid(sub, depth + 1) for sub in value)
            )
        else:
            return False
        if not ok:
            return False
    return True


# Registries repeat the same small schemas many times; each distinct one is checked once.
# Keyed by a digest of its text: keyed by the text (up to MAX_SCHEMA_BYTES), the memo kept
# 4,096 schemas' JSON alive long after their catalogs were gone (a gateway sees a stream of
# tools arrays: up to 400 MB past the routers' own bound).
_SCHEMA_PROBLEMS: Memo[bytes, str | None] = Memo(4096)


def _schema_problem(canonical: str) -> str | None:
    """Why the schema whose canonical JSON is ``canonical`` is refused, or None."""
    key = hashlib.blake2b(canonical.encode(), digest_size=16).digest()
    return _SCHEMA_PROBLEMS.get(key, partial(_find_schema_problem, canonical))


def _find_schema_problem(canonical: str) -> str | None:
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]
    from jsonschema.validators import (  # type: ignore[import-untyped]
        Draft202012Validator,
        validator_for,
    )

    schema = json.loads(canonical)
    draft = validator_for(schema, default=Draft202012Validator)
    plain = "$schema" not in schema and _is_plainly_valid(schema)
    error = None if plain else best_match(_metaschema_validator(draft).iter_errors(schema))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return f"invalid JSON Schema at {where}: {error.message}"
    kind = schema.get("type", "object")
    if kind != "object":
        return f"input schema must have type 'object', not {kind!r}"
    return reference_and_regex_problem(schema, draft)


def _check_schema(schema: Any) -> dict[str, Any]:
    if schema is None:
        return dict(EMPTY_SCHEMA)
    if not isinstance(schema, dict):
        raise _Reject(f"input schema must be a JSON object, got {type(schema).__name__}")
    # Before any walk: every one recurses, and NaN or a lone surrogate breaks every export.
    problem = json_problem(schema)
    if problem:
        raise _Reject(f"input schema holds {problem}")
    try:
        normalized = _typed_root(normalize_type_aliases(schema))
        try:
            canonical = canonical_json(normalized, allow_nan=False)
        except ValueError as exc:  # an integer too long to print, given as an object
            raise _Reject(f"input schema is not JSON-serialisable: {exc}") from None
        size = len(canonical.encode())
        if size > MAX_SCHEMA_BYTES:
            raise _Reject(f"input schema is {size:,} bytes, the limit is {MAX_SCHEMA_BYTES:,}")
        problem = _schema_problem(canonical)
    except RecursionError:
        # Every schema walk recurses; thousands of levels are an attack, not a tool.
        raise _Reject("input schema is nested too deeply to check") from None
    if problem:
        raise _Reject(problem)
    return normalized


def _typed_root(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the root ``"type": "object"`` it may leave implicit, written out:
    OpenAI refuses a whole request whose ``parameters`` lack it, and Anthropic's API requires it.
    """
    if "type" in schema:
        return dict(schema)
    return {"type": "object", **schema}


def _string_list(block: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = block.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Reject(f"x-toolgate {where}{key} must be a list of strings")
    return tuple(value)


def _meta_fields(meta: Any) -> dict[str, Any]:
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise _Reject(f"x-toolgate block must be an object, got {type(meta).__name__}")
    unknown = set(meta) - _META_KEYS
    if unknown:
        raise _Reject(f"x-toolgate has unknown keys {sorted(unknown)}; known: {sorted(_META_KEYS)}")
    requires = meta.get("requires", {})
    if not isinstance(requires, Mapping) or set(requires) - _REQUIRES_KEYS:
        raise _Reject(f"x-toolgate requires must be an object with keys {sorted(_REQUIRES_KEYS)}")
    out: dict[str, Any] = {}
    for key, target in (
        ("scopes", "requires_scopes"),
        ("tools", "requires_tools"),
        ("milestones", "requires_milestones"),
    ):
        if key in requires:
            out[target] = _string_list(requires, key, "requires.")
    for key in ("scopes", "tags"):
        if key in meta:
            out[key] = _string_list(meta, key, "")
    if "pinned" in meta:
        if not isinstance(meta["pinned"], bool):
            raise _Reject("x-toolgate pinned must be true or false")
        out["pinned"] = meta["pinned"]
    if "summary" in meta:
        out["summary"] = _checked_summary(meta["summary"])
    return out


def block_problem(block: Any) -> str | None:
    """Why ``block`` is no valid ``x-toolgate`` block (an override, say), or ``None``: what
    would make each tool it applies to a bad tool, found before any tool is read."""
    if not isinstance(block, Mapping):  # None too: no block is no override
        return f"x-toolgate block must be an object, got {type(block).__name__}"
    problem = json_problem(block)
    if problem:
        return f"x-toolgate block holds {problem}"
    try:
        _meta_fields(block)
    except _Reject as exc:
        return str(exc)
    return None


def _checked_summary(summary: Any) -> str:
    if not isinstance(summary, str) or not summary.strip():
        raise _Reject("x-toolgate summary must be a non-empty string")
    tokens = count_text(summary)
    if tokens > SUMMARY_MAX_TOKENS:
        raise _Reject(f"summary is {tokens} tokens, the limit is {SUMMARY_MAX_TOKENS}")
    return " ".join(summary.split())


def _checked_text(value: Any, what: str, limit: int, *, required: bool) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        kind = "missing" if value is None else f"a {type(value).__name__}, not a string"
        raise _Reject(f"{what} is {kind}")
    if required and not value.strip():
        raise _Reject(f"{what} is empty")
    bad = lone_surrogate_at(value)
    if bad is not None:
        raise _Reject(f"{what} is not valid Unicode (a lone surrogate at character {bad})")
    if len(value) > limit:
        raise _Reject(f"{what} is {len(value):,} characters, the limit is {limit:,}")
    return value


def _self_pin(server: str, name: str, self_pins: str) -> None:
    """Refuse the pin a tool's own block gives it (a bad tool), or with ``self_pins``
    ``"ignore"`` warn that it is ignored: an upstream's listing, which the host cannot fix."""
    hint = (
        f"pin it with the host's overrides={{{f'{server}/{name}'!r}: {{'pinned': True}}}}"
        ' (toolgate mcp-proxy: the server\'s "overrides" in its config file)'
    )
    if self_pins == "refuse":
        raise _Reject(
            "pins itself (x-toolgate pinned: true): a tool's own listing cannot put it in "
            f"every route; {hint}"
        )
    warnings.warn(
        f"server {server!r}: tool {name!r} pins itself (x-toolgate pinned: true), which only "
        f"the host may do: the pin is ignored and the tool routed like any other; {hint}, "
        "or keep it unpinned without this warning with {'pinned': False}",
        CatalogWarning,
        stacklevel=2,
    )


def check_self_pins(self_pins: str) -> str:
    """``self_pins`` if it is ``"refuse"`` or ``"ignore"``, else an :class:`InvalidInputError`."""
    if self_pins not in SELF_PINS:
        raise InvalidInputError(f"self_pins must be 'refuse' or 'ignore', got {self_pins!r}")
    return self_pins


def _build_one(raw: Any, overrides: Mapping[str, Mapping[str, Any]], self_pins: str) -> Tool:
    if raw.problem:
        raise _Reject(raw.problem)
    name = _checked_text(raw.name, "name", MAX_NAME_CHARS, required=True)
    server = _checked_text(raw.server, "server", MAX_NAME_CHARS, required=True)
    description = _checked_text(
        raw.description, "description", MAX_DESCRIPTION_CHARS, required=False
    )
    if raw.annotations is not None and not isinstance(raw.annotations, dict):
        raise _Reject("annotations must be a JSON object")
    for part, value in (
        ("annotations hold", raw.annotations),
        ("x-toolgate block holds", raw.meta),
    ):
        problem = json_problem(value)
        if problem:
            raise _Reject(f"{part} {problem}")
    title = None
    if raw.title is not None:
        title = _checked_text(raw.title, "title", MAX_DESCRIPTION_CHARS, required=False)
    fields = _meta_fields(raw.meta)
    # The blocks by name and by id both apply, the id's keys winning: a host's file of gates
    # by name plus one block by id (a pin, a tag) must not drop that tool's gate.
    host = {**_meta_fields(overrides.get(name)), **_meta_fields(overrides.get(f"{server}/{name}"))}
    if fields.get("pinned") and "pinned" not in host:
        # The block came with the tool, from whoever listed it: it may narrow the tool's
        # reach (preconditions), never widen it into every route.
        _self_pin(server, name, self_pins)
        del fields["pinned"]
    fields.update(host)
    if raw.strict not in (None, True, False):
        raise _Reject(f"strict must be true or false, got a {type(raw.strict).__name__}")
    return Tool(
        server=server,
        name=name,
        description=description,
        input_schema=_check_schema(raw.input_schema),
        annotations=dict(raw.annotations or {}),
        title=title,
        strict=raw.strict is True,
        **fields,
    )


def _label(raw: Any) -> str:
    name = raw.name if isinstance(raw.name, str) and raw.name else "<unnamed>"
    return f"{raw.server}/{name}" if isinstance(raw.server, str) else repr(name)


class RequirementIndex:
    """What ``requires.tools`` entries can name in one catalog, built once for many checks.

    :class:`toolgate.routing.state.State` meets an entry with a tool id in ``tools_run`` or with
    the part of one after its last ``/``, so an entry is satisfiable when it is a tool's id
    (``github/get_me``) or the last part of one (``get_me``; ``apod`` for ``gh/nasa/apod``).

    >>> index = RequirementIndex([Tool("gh", "list_issues")])
    >>> index.unmet(Tool("gh", "close_issue", requires_tools=("gh/list_isues", "list_issues")))
    ['gh/list_isues']
    """

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._known = {key for t in tools for key in satisfied_by_run(t.id)}

    def unmet(self, tool: Tool) -> list[str]:
        """The entries of ``tool.requires_tools`` that no tool of the catalog satisfies."""
        return [entry for entry in tool.requires_tools if entry not in self._known]


def build_tools(
    raws: Iterable[Any],
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    rename_duplicates: bool = False,
    self_pins: str = "refuse",
) -> tuple[list[Tool], list[Offender]]:
    """Validate raw tools (:class:`toolgate.formats.raw.RawTool`, or ready :class:`Tool`).

    Returns the good tools in order and an :class:`Offender` for every bad one: a problem
    reading it, no name, a non-string description, an invalid or non-object input schema, a
    bad ``x-toolgate`` block, a duplicate id (the first one is kept), or sizes past
    :data:`MAX_NAME_CHARS`, :data:`MAX_DESCRIPTION_CHARS`, :data:`MAX_SCHEMA_BYTES`.
    With ``rename_duplicates`` a repeated id is not an offender: the later tool's server gets
    a ``~2``, ``~3``, ... suffix, so data sets that reuse names within one group (BFCL) keep
    every tool, under its own name. A tool whose own block pins it (no override says whether
    it is pinned) is an offender, or with ``self_pins="ignore"`` kept unpinned, with a
    :class:`CatalogWarning` naming it.
    """
    check_self_pins(self_pins)
    overrides = overrides or {}
    tools: list[Tool] = []
    offenders: list[Offender] = []
    first_at: dict[str, str] = {}
    for index, raw in enumerate(raws):
        position = getattr(raw, "where", f"[{index}]")
        try:
            tool = raw if isinstance(raw, Tool) else _build_one(raw, overrides, self_pins)
        except _Reject as exc:
            offenders.append(Offender(position, _label(raw), str(exc)))
            continue
        if tool.id in first_at and rename_duplicates:
            copy = 2
            while f"{tool.server}~{copy}/{tool.name}" in first_at:
                copy += 1
            tool = replace(tool, server=f"{tool.server}~{copy}", exposed_name="")
        if tool.id in first_at:
            reason = f"duplicate id (first defined at {first_at[tool.id]})"
            offenders.append(Offender(position, tool.id, reason))
            continue
        first_at[tool.id] = position
        tools.append(tool)
    return tools, offenders


def validated_schema(schema: Any, tool_id: str) -> dict[str, Any]:
    """``schema`` normalised and checked as an input schema, or a CatalogError naming the tool."""
    try:
        return _check_schema(schema)
    except _Reject as exc:
        raise CatalogError(f"schema of {tool_id!r}: {exc}") from None

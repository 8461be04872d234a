"""The :class:`Tool` type: one tool of a catalog, with everything routing needs to know.

Preconditions and pins come from an optional ``x-toolgate`` block on the tool (or
``_meta.toolgate``, the MCP way of attaching vendor data), or from the loader's ``overrides``
keyword. Its shape, every key optional::

    {
      "requires": {"scopes": ["github:write"],        # scopes the caller must hold
                   "tools": ["github/get_me"],         # tool ids that must have run before
                   "milestones": ["plan_confirmed"]},  # workflow points that must be reached
      "scopes": ["github:write"],                      # scopes this tool exercises (allow/deny)
      "tags": ["vcs", "write"],
      "pinned": true,                                  # always promoted, never dropped
      "summary": "Open a pull request."                # replaces the derived summary
    }
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Any

from toolgate.names import sanitize_name
from toolgate.schema_check import reference_and_regex_problem, resolve_pointer
from toolgate.unicode import lone_surrogate_at

__all__ = [
    "EMPTY_SCHEMA",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "MAX_SCHEMA_BYTES",
    "SUMMARY_MAX_TOKENS",
    "Offender",
    "RequirementIndex",
    "Tool",
    "build_tools",
    "derive_summary",
    "first_sentence",
    "id_tails",
    "split_name",
    "tool_from_dict",
    "validated_schema",
]

#: The longest summary, in cl100k tokens (the Tool Attention paper's budget per summary).
SUMMARY_MAX_TOKENS = 60

# A sentence ends at . ! ? followed by whitespace, unless the dot ends a common abbreviation.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "approx.", "incl.", "no.", "eg.", "ie.")
_WORD_SPLIT = re.compile(r"[_\-\s./:]+|(?<=[a-z0-9])(?=[A-Z])")


def _json_copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars); several times faster than deepcopy."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    return value


def first_sentence(text: str) -> str:
    """The first sentence (or first line) of ``text``, whitespace collapsed.

    >>> first_sentence("Get a file. Use it for reading.")
    'Get a file.'
    >>> first_sentence("Search, e.g. by name. Then more.")
    'Search, e.g. by name.'
    """
    stripped = text.strip()
    paragraph = re.split(r"\n\s*\n|\n(?=\s*[-*#])", stripped, maxsplit=1)[0]
    line = " ".join(paragraph.split())
    for match in _SENTENCE_END.finditer(line):
        candidate = line[: match.start()]
        if not candidate.lower().endswith(_ABBREVIATIONS):
            return candidate
    return line


def split_name(name: str) -> str:
    """``name`` as lower-case words, split on ``_ - . / :`` and camelCase.

    >>> split_name("getRepo_file.contents")
    'get repo file contents'
    """
    return " ".join(w.lower() for w in _WORD_SPLIT.split(name) if w)


def _truncate_to_tokens(text: str, limit: int, encoding: str) -> str:
    from toolgate.tokens import count_text

    if count_text(text, encoding) <= limit:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    # Binary search for the most words whose text, plus an ellipsis, fits the limit.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_text(" ".join(words[:mid]) + "…", encoding) <= limit:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        chars = len(text)
        while chars > 0 and count_text(text[:chars] + "…", encoding) > limit:
            chars //= 2
        return text[:chars] + "…"
    return " ".join(words[:lo]) + "…"


def derive_summary(name: str, description: str, *, encoding: str = "cl100k_base") -> str:
    """The description's first sentence, cut to :data:`SUMMARY_MAX_TOKENS` tokens.

    A tool without a description is summarised by its name in words (``get_track_info`` ->
    ``get track info``).
    """
    sentence = first_sentence(description) or split_name(name)
    return _truncate_to_tokens(sentence, SUMMARY_MAX_TOKENS, encoding)


def _canonical(obj: Any, *, allow_nan: bool = True) -> str:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan
    )


def _non_finite_at(node: Any, where: str = "") -> str | None:
    """The path of the first NaN or infinity in a JSON-like value, if any."""
    if isinstance(node, float) and not math.isfinite(node):
        return where or "(root)"
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in items:
        found = _non_finite_at(child, f"{where}/{key}".lstrip("/"))
        if found is not None:
            return found
    return None


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


@dataclass(frozen=True, eq=True)
class Tool:
    """One tool: identity, text, schema, preconditions.

    ``id`` is ``server/name``. ``exposed_name`` is what the model sees and calls; a catalog
    makes it unique (see :mod:`toolgate.names`). ``input_schema`` and ``annotations`` must be
    treated as read-only: ``fingerprint`` is computed once.

    >>> t = Tool("github", "get_me", "Get my user profile. Includes the login.")
    >>> t.id, t.summary, t.exposed_name
    ('github/get_me', 'Get my user profile.', 'get_me')
    """

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    summary: str = ""
    annotations: dict[str, Any] = field(default_factory=dict)
    requires_scopes: tuple[str, ...] = ()
    requires_tools: tuple[str, ...] = ()
    requires_milestones: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    pinned: bool = False
    exposed_name: str = ""
    title: str | None = None

    def __post_init__(self) -> None:
        # Frozen: normalise through object.__setattr__ once, at construction.
        for name in ("requires_scopes", "requires_tools", "requires_milestones", "scopes", "tags"):
            object.__setattr__(self, name, _strings(getattr(self, name)))
        if not self.summary:
            object.__setattr__(self, "summary", derive_summary(self.name, self.description))
        if not self.exposed_name:
            object.__setattr__(self, "exposed_name", sanitize_name(self.name))

    def __hash__(self) -> int:
        return hash((self.id, self.fingerprint, self.exposed_name))

    @property
    def id(self) -> str:
        """``server/name``: unique within a catalog."""
        return f"{self.server}/{self.name}"

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of the tool's content (not its exposed name).

        Two loads of the same tool give the same fingerprint; any change to its text, schema,
        annotations or preconditions changes it.
        """
        content = {
            "server": self.server,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "summary": self.summary,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
            "requires": [self.requires_scopes, self.requires_tools, self.requires_milestones],
            "scopes": self.scopes,
            "tags": self.tags,
            "pinned": self.pinned,
        }
        return hashlib.sha256(_canonical(content).encode()).hexdigest()

    @cached_property
    def param_text(self) -> str:
        """Parameter names (split into words), descriptions, allowed values and string
        defaults, flattened to text for BM25.

        Values are what a request names ("in fahrenheit", "for the 'horror' genre"): with
        enum values here and in the embedded text, and string defaults here, ``toolgate
        eval`` on BFCL gave nDCG@10 0.8356 -> 0.8427 (MetaTool's tools have no schemas, so
        it cannot move: 0.7220 / 0.7071 before and after).
        """
        parts: list[str] = []
        _collect_params(self.input_schema, parts, 0, self.input_schema, embedded=False)
        return " ".join(parts)

    @cached_property
    def embedded_param_text(self) -> str:
        """Parameter names, descriptions and allowed values ("One of: a, b.") as the
        embedding reads them; defaults are left out, where they only blurred the row."""
        parts: list[str] = []
        _collect_params(self.input_schema, parts, 0, self.input_schema, embedded=True)
        return " ".join(parts)

    def to_provider(self, provider: str = "openai") -> dict[str, Any]:
        """The tool as ``provider`` expects it, named by ``exposed_name``.

        ``provider`` is ``"openai"`` (Chat function wrapper), ``"openai-responses"``,
        ``"anthropic"``, ``"gemini"`` (a function declaration whose ``parameters`` are in
        Gemini's OpenAPI subset; see :mod:`toolgate.adapters.gemini` for what the conversion
        drops), ``"gemini-json-schema"`` (the same declaration carrying the schema unchanged
        as ``parametersJsonSchema``) or ``"mcp"``.

        The result is the caller's own copy: a client that edits the definitions it sends
        (OpenAI strict mode closes every object) leaves the catalog's schema alone.
        """
        copied: dict[str, Any] = _json_copy(self._definition(provider))
        return copied

    def _definition(self, provider: str) -> dict[str, Any]:
        """:meth:`to_provider` sharing this tool's schema: only for reading (token counts)."""
        from toolgate.adapters import anthropic, gemini, mcp, openai
        from toolgate.errors import InvalidInputError

        writers = {
            "openai": openai.export_chat,
            "openai-responses": openai.export_responses,
            "anthropic": anthropic.export,
            "gemini": gemini.export,
            "gemini-json-schema": gemini.export_json_schema,
            "mcp": mcp.export,
        }
        writer = writers.get(provider)
        if writer is None:
            raise InvalidInputError(
                f"unknown provider {provider!r}; expected one of {', '.join(writers)}"
            )
        return writer(self)

    def definition_json(self, provider: str = "openai") -> str:
        """:meth:`to_provider` as compact JSON, in the schema's own key order (computed once)."""
        cache: dict[str, str] = self.__dict__.setdefault("_definition_json", {})
        if provider not in cache:
            cache[provider] = json.dumps(
                self._definition(provider), ensure_ascii=False, separators=(",", ":"), default=str
            )
        return cache[provider]

    def token_count(self, provider: str = "openai", *, encoding: str = "cl100k_base") -> int:
        """Tokens this tool's full definition costs in ``provider``'s serialisation."""
        from toolgate.adapters import base_provider
        from toolgate.tokens import count_tool

        key = (provider, encoding)
        cache: dict[tuple[str, str], int] = self.__dict__.setdefault("_token_counts", {})
        if key not in cache:
            definition = self._definition(provider)
            cache[key] = count_tool(definition, base_provider(provider), encoding=encoding)
        return cache[key]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (id, names, text, schema, preconditions)."""
        return {
            "id": self.id,
            "server": self.server,
            "name": self.name,
            "exposed_name": self.exposed_name,
            "description": self.description,
            "summary": self.summary,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
            "requires": {
                "scopes": list(self.requires_scopes),
                "tools": list(self.requires_tools),
                "milestones": list(self.requires_milestones),
            },
            "scopes": list(self.scopes),
            "tags": list(self.tags),
            "pinned": self.pinned,
            "title": self.title,
            "fingerprint": self.fingerprint,
        }


def tool_from_dict(data: Mapping[str, Any]) -> Tool:
    """Rebuild a :class:`Tool` from :meth:`Tool.to_dict` output, without re-validating it.

    For reopening a catalog this process (or an index file) wrote itself: no schema check and
    no token counting, so thousands of tools load in milliseconds. Untrusted input should go
    through :class:`toolgate.catalog.Catalog` instead.
    """
    requires = data.get("requires", {})
    if not isinstance(requires, Mapping):
        raise TypeError(f"'requires' must be an object, got {type(requires).__name__}")
    return Tool(
        server=data["server"],
        name=data["name"],
        description=data.get("description", ""),
        input_schema=data.get("input_schema", dict(EMPTY_SCHEMA)),
        summary=data.get("summary", ""),
        annotations=data.get("annotations", {}),
        requires_scopes=requires.get("scopes", ()),
        requires_tools=requires.get("tools", ()),
        requires_milestones=requires.get("milestones", ()),
        scopes=data.get("scopes", ()),
        tags=data.get("tags", ()),
        pinned=bool(data.get("pinned", False)),
        exposed_name=data.get("exposed_name", ""),
        title=data.get("title"),
    )


def _collect_params(
    schema: Any, parts: list[str], depth: int, root: Any, *, embedded: bool
) -> None:
    # Nested objects are walked a few levels deep: deeper names are rarely what users type.
    if not isinstance(schema, Mapping) or depth > 3:
        return
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, sub in properties.items():
            parts.append(split_name(str(name)))
            if isinstance(sub, Mapping):
                if isinstance(sub.get("description"), str):
                    parts.append(" ".join(sub["description"].split()))
                _collect_values(sub, parts, root, embedded=embedded)
                _collect_params(sub, parts, depth + 1, root, embedded=embedded)
                _collect_params(sub.get("items"), parts, depth + 1, root, embedded=embedded)


def _collect_values(
    schema: Mapping[str, Any], parts: list[str], root: Any, *, embedded: bool
) -> None:
    """The values a parameter allows (see :func:`_allowed_values`; its items' too), and for
    BM25 a short string default: words a request may name. At most
    :data:`_MAX_LISTED_VALUES` values (the embedding reads 256 tokens), strings and numbers
    only (an object is no word)."""
    for node in (schema, schema.get("items")):
        words = [
            v
            for v in _allowed_values(node, root, depth=0)
            if isinstance(v, (str, int, float)) and not isinstance(v, bool)
        ]
        listed = [" ".join(str(v).split()) for v in dict.fromkeys(words)][:_MAX_LISTED_VALUES]
        if listed:
            parts.append(f"One of: {', '.join(listed)}." if embedded else " ".join(listed))
    default = schema.get("default")
    if not embedded and isinstance(default, str) and len(default) <= _MAX_DEFAULT_CHARS:
        parts.append(" ".join(default.split()))


def _allowed_values(node: Any, root: Any, depth: int) -> list[Any]:
    """The values ``node`` allows: its ``enum``, its ``const``, and those of what it stands
    for, as schema generators write them: a local ``$ref`` (a pydantic enum in ``$defs``)
    and ``anyOf`` / ``oneOf`` branches (``Optional[Literal[...]]``), a few levels deep."""
    if not isinstance(node, Mapping) or depth > 3:
        return []
    found = list(node["enum"]) if isinstance(node.get("enum"), list) else []
    if "const" in node:
        found.append(node["const"])
    if isinstance(node.get("$ref"), str):
        found += _allowed_values(resolve_pointer(root, node["$ref"]), root, depth + 1)
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            for branch in node[key]:
                found += _allowed_values(branch, root, depth + 1)
    return found


# Most allowed values of one parameter put into the text a tool is known by, and the longest
# default (longer ones are templates or prose, not a value a request names).
_MAX_LISTED_VALUES = 30
_MAX_DEFAULT_CHARS = 80

#: Longest tool or server name accepted.
MAX_NAME_CHARS = 256
#: Longest description accepted (longer is almost always a pasted README, not a description).
MAX_DESCRIPTION_CHARS = 10_000
#: Largest input schema accepted, as compact JSON.
MAX_SCHEMA_BYTES = 100_000

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
"""The input schema of a tool that takes no arguments (copy it before changing it)."""
_META_KEYS = {"requires", "scopes", "tags", "pinned", "summary"}
_REQUIRES_KEYS = {"scopes", "tools", "milestones"}


@dataclass(frozen=True)
class Offender:
    """A tool that could not be loaded: where it was, what it is called, and why."""

    position: str
    tool: str
    reason: str

    def __str__(self) -> str:
        return f"{self.position} {self.tool}: {self.reason}"


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

    Most tool schemas are flat objects of typed, described properties; checking those by hand is
    fifty times faster than the metaschema. Anything outside the subset returns False and goes
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


@lru_cache(maxsize=4096)
def _schema_problem(canonical: str) -> str | None:
    # Registries repeat the same small schemas many times; each distinct one is checked once.
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
    from toolgate.adapters import normalize_type_aliases

    if schema is None:
        return dict(EMPTY_SCHEMA)
    if not isinstance(schema, dict):
        raise _Reject(f"input schema must be a JSON object, got {type(schema).__name__}")
    try:
        normalized: dict[str, Any] = dict(normalize_type_aliases(schema))
        try:
            # NaN and Infinity are not JSON: every provider would reject the export.
            canonical = _canonical(normalized, allow_nan=False)
        except (TypeError, ValueError) as exc:
            where = _non_finite_at(normalized)
            if where is not None:
                raise _Reject(f"input schema holds NaN or Infinity at {where}") from None
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


def _checked_summary(summary: Any) -> str:
    from toolgate.tokens import count_text

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


def _build_one(raw: Any, overrides: Mapping[str, Mapping[str, Any]]) -> Tool:
    if raw.problem:
        raise _Reject(raw.problem)
    name = _checked_text(raw.name, "name", MAX_NAME_CHARS, required=True)
    server = _checked_text(raw.server, "server", MAX_NAME_CHARS, required=True)
    description = _checked_text(
        raw.description, "description", MAX_DESCRIPTION_CHARS, required=False
    )
    if raw.annotations is not None and not isinstance(raw.annotations, dict):
        raise _Reject("annotations must be a JSON object")
    if raw.title is not None and not isinstance(raw.title, str):
        raise _Reject("title must be a string")
    fields = _meta_fields(raw.meta)
    override = overrides.get(f"{server}/{name}", overrides.get(name))
    fields.update(_meta_fields(override))
    return Tool(
        server=server,
        name=name,
        description=description,
        input_schema=_check_schema(raw.input_schema),
        annotations=dict(raw.annotations or {}),
        title=raw.title,
        **fields,
    )


def _label(raw: Any) -> str:
    name = raw.name if isinstance(raw.name, str) and raw.name else "<unnamed>"
    return f"{raw.server}/{name}" if isinstance(raw.server, str) else repr(name)


class RequirementIndex:
    """What ``requires.tools`` entries can name in one catalog, built once for many checks.

    :class:`toolgate.state.State` meets an entry with a tool id in ``tools_run`` or with any
    part of one after a ``/``, so an entry is satisfiable when it is a tool's id
    (``github/get_me``), its original name (``get_me``) or a tail of either (``apod`` for
    ``nasa/apod``).

    >>> index = RequirementIndex([Tool("gh", "list_issues")])
    >>> index.unmet(Tool("gh", "close_issue", requires_tools=("gh/list_isues", "list_issues")))
    ['gh/list_isues']
    """

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._known = {tail for t in tools for tail in id_tails(t.id)}

    def unmet(self, tool: Tool) -> list[str]:
        """The entries of ``tool.requires_tools`` that no tool of the catalog satisfies."""
        return [entry for entry in tool.requires_tools if entry not in self._known]


def id_tails(tool_id: str) -> list[str]:
    """``a/b/c``, ``b/c`` and ``c``: what a run of ``tool_id`` satisfies in ``requires.tools``.

    A precondition may name the tool by id or bare, and names as well as servers may hold a
    '/', so every tail after one counts.
    """
    parts = tool_id.split("/")
    return ["/".join(parts[i:]) for i in range(len(parts))]


def build_tools(
    raws: Iterable[Any],
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    rename_duplicates: bool = False,
) -> tuple[list[Tool], list[Offender]]:
    """Validate raw tools (:class:`toolgate.adapters.RawTool`, or ready :class:`Tool`).

    Returns the good tools in order and an :class:`Offender` for every bad one: a problem
    reading it, no name, a non-string description, an invalid or non-object input schema, a
    bad ``x-toolgate`` block, a duplicate id (the first one is kept), or sizes past
    :data:`MAX_NAME_CHARS`, :data:`MAX_DESCRIPTION_CHARS`, :data:`MAX_SCHEMA_BYTES`.
    With ``rename_duplicates`` a repeated id is not an offender: the later tool's server gets
    a ``~2``, ``~3``, ... suffix, so data sets that reuse names within one group (BFCL) keep
    every tool, under its own name.
    """
    overrides = overrides or {}
    tools: list[Tool] = []
    offenders: list[Offender] = []
    first_at: dict[str, str] = {}
    for index, raw in enumerate(raws):
        position = getattr(raw, "where", f"[{index}]")
        try:
            tool = raw if isinstance(raw, Tool) else _build_one(raw, overrides)
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
    from toolgate.errors import CatalogError

    try:
        return _check_schema(schema)
    except _Reject as exc:
        raise CatalogError(f"schema of {tool_id!r}: {exc}") from None

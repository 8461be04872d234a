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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from toolgate.catalog.names import sanitize_name, split_name
from toolgate.catalog.summary import derive_summary
from toolgate.errors import InvalidInputError
from toolgate.formats import anthropic, gemini, mcp, openai
from toolgate.formats.pointer import resolve_pointer
from toolgate.formats.raw import EMPTY_SCHEMA, base_provider
from toolgate.formats.tokens import count_tool

__all__ = ["EMPTY_SCHEMA", "Tool", "satisfied_by_run", "tool_from_dict"]


def _json_copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars), without deepcopy's memo bookkeeping."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    return value


def canonical_json(obj: Any, *, allow_nan: bool = True) -> str:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan
    )


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


@dataclass(frozen=True, eq=True)
class Tool:
    """One tool: identity, text, schema, preconditions.

    ``id`` is ``server/name``. ``exposed_name`` is what the model sees and calls; a catalog
    makes it unique (see :mod:`toolgate.catalog.names`). ``input_schema`` and ``annotations`` must
    be
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
    #: Sent in OpenAI's strict mode, as the tool was given (``"strict": true``).
    strict: bool = False

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
        if self.strict:  # only then: every other tool keeps the fingerprint it had
            content["strict"] = True
        return hashlib.sha256(canonical_json(content).encode()).hexdigest()

    @cached_property
    def param_text(self) -> str:
        """Parameter names (split into words), descriptions, allowed values and string
        defaults, flattened to text for BM25.

        Values are what a request names ("in fahrenheit", "for the 'horror' genre"), so
        enum values go here and in the embedded text, and string defaults here.
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

    def to_provider(self, provider: str = "openai", *, compact: bool = False) -> dict[str, Any]:
        """The tool as ``provider`` expects it, named by ``exposed_name``.

        ``provider`` is ``"openai"`` (Chat function wrapper), ``"openai-responses"``,
        ``"anthropic"``, ``"gemini"`` (a function declaration whose ``parameters`` are in
        Gemini's OpenAPI subset; see :mod:`toolgate.formats.gemini_schema` for what the
        conversion drops), ``"gemini-json-schema"`` (the same declaration carrying the schema
        unchanged as ``parametersJsonSchema``) or ``"mcp"``. ``compact`` leaves out of the
        schema and descriptions what a model does not need (:mod:`toolgate.formats.compact`);
        calls are still checked against the full schema.

        The result is the caller's own copy: a client that edits the definitions it sends
        (OpenAI strict mode closes every object) leaves the catalog's schema alone.
        """
        copied: dict[str, Any] = _json_copy(self._definition(provider, compact=compact))
        return copied

    def _definition(
        self, provider: str, *, compact: bool = False, keep: bool = True
    ) -> dict[str, Any]:
        """:meth:`to_provider` sharing this tool's schema: only for reading (token counts).

        A compact definition is made once per provider and kept (compaction walks the whole
        schema, and a tool is promoted turn after turn), unless ``keep`` is false.
        """
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
        if not compact:
            return writer(self)
        kept: dict[str, dict[str, Any]] = self.__dict__.get("_compact_definitions", {})
        found = kept.get(provider)
        if found is None:
            found = writer(self, compact=True)
            if keep:
                self.__dict__.setdefault("_compact_definitions", {})[provider] = found
        return found

    def definition_json(
        self, provider: str = "openai", *, compact: bool = False, keep: bool = True
    ) -> str:
        """:meth:`to_provider` as compact JSON, in the schema's own key order: computed once
        and kept, unless ``keep`` is false (a count over a whole catalog, which keeping would
        double in memory for the few tools a turn sends)."""
        key = (provider, compact)
        kept: dict[tuple[str, bool], str] = self.__dict__.get("_definition_json", {})
        found = kept.get(key)
        if found is None:
            found = json.dumps(
                self._definition(provider, compact=compact, keep=keep),
                ensure_ascii=False,
                separators=(",", ":"),
                default=str,
            )
            if keep:
                self.__dict__.setdefault("_definition_json", {})[key] = found
        return found

    def token_count(
        self, provider: str = "openai", *, encoding: str = "cl100k_base", compact: bool = False
    ) -> int:
        """Tokens this tool's full (or ``compact``) definition costs in ``provider``'s
        serialisation."""
        key = (provider, encoding, compact)
        cache: dict[tuple[str, str, bool], int] = self.__dict__.setdefault("_token_counts", {})
        if key not in cache:
            definition = self._definition(provider, compact=compact)
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
            **({"strict": True} if self.strict else {}),
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
        strict=data.get("strict", False) is True,
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
        listed = [" ".join(str(v).split()) for v in _allowed_values(node, root)]
        if listed:
            parts.append(f"One of: {', '.join(listed)}." if embedded else " ".join(listed))
    default = schema.get("default")
    if not embedded and isinstance(default, str) and len(default) <= _MAX_DEFAULT_CHARS:
        parts.append(" ".join(default.split()))


def _allowed_values(node: Any, root: Any) -> list[str | int | float]:
    """The distinct values ``node`` allows that a request may name (strings and numbers), at
    most :data:`_MAX_LISTED_VALUES`: its ``enum``, its ``const``, and those of what it stands
    for, as schema generators write them: a local ``$ref`` (a pydantic enum in ``$defs``)
    and ``anyOf`` / ``oneOf`` branches (``Optional[Literal[...]]``), a few levels deep."""
    found: dict[str | int | float, None] = {}
    _gather_values(node, root, 0, found, set())
    return list(found)


def _gather_values(
    node: Any, root: Any, depth: int, found: dict[str | int | float, None], followed: set[str]
) -> None:
    """Add ``node``'s values to ``found`` until it is full. Each ``$ref`` is followed once:
    branches that all name one large definition would otherwise read it once a branch."""
    if not isinstance(node, Mapping) or depth > 3 or len(found) >= _MAX_LISTED_VALUES:
        return
    values = list(_schema_list(node, "enum"))
    if "const" in node:
        values.append(node["const"])
    for value in values:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            found.setdefault(value)
            if len(found) >= _MAX_LISTED_VALUES:
                return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in followed:
        followed.add(ref)
        _gather_values(resolve_pointer(root, ref), root, depth + 1, found, followed)
    for branch in [*_schema_list(node, "anyOf"), *_schema_list(node, "oneOf")]:
        _gather_values(branch, root, depth + 1, found, followed)


def _schema_list(node: Mapping[str, Any], key: str) -> list[Any]:
    value = node.get(key)
    return value if isinstance(value, list) else []


# Most allowed values of one parameter put into the text a tool is known by, and the longest
# default (longer ones are templates or prose, not a value a request names).
_MAX_LISTED_VALUES = 30


_MAX_DEFAULT_CHARS = 80


def satisfied_by_run(tool_id: str) -> list[str]:
    """``a/b/c`` and ``c``: the ``requires.tools`` entries a run of ``tool_id`` meets.

    An entry holding a '/' is an id, as in ``select:``, so only the id itself meets it: a
    tail would let ``evil/gh/get_me`` (evil's tool named ``gh/get_me``) meet ``gh/get_me``.
    An entry without one is a bare name, which any server's tool may meet; the part after
    the last '/' is the name whether or not the server holds a '/' (``@acme/ops/wipe``).
    """
    name = tool_id.rpartition("/")[2]
    return [tool_id] if name == tool_id else [tool_id, name]

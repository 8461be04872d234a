"""The tool catalog: an immutable, ordered set of :class:`~toolgate.catalog.tool.Tool`.

>>> from toolgate.catalog import Catalog
>>> cat = Catalog.load({"tools": [{"name": "get_me", "description": "My profile."}]},
...                    server="github")
>>> cat["github/get_me"].exposed_name
'get_me'

Bad tools (no name, an invalid JSON Schema, a duplicate id, absurd sizes) raise one
:class:`InvalidToolsError` listing every offender with its position and reason; with
``lenient=True`` they are skipped and one :class:`CatalogWarning` names each of them.
"""

from __future__ import annotations

import copy
import hashlib
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from toolgate.arguments import tool_list
from toolgate.catalog.build import Offender, RequirementIndex, build_tools, check_self_pins
from toolgate.catalog.changes import CatalogDiff, catalog_diff, server_tools, with_server_replaced
from toolgate.catalog.names import assign_exposed_names
from toolgate.catalog.sources import (
    ToolSource,
    checked_overrides,
    is_saved_tool,
    read_source,
    saved_tool,
    saved_tool_checked,
)
from toolgate.catalog.tool import Tool
from toolgate.errors import (
    SHOWN_ID_CHARS,
    CatalogError,
    CatalogWarning,
    InvalidToolsError,
    UnknownToolError,
    listed_offenders,
)
from toolgate.formats.documents import detect_format, parse_document
from toolgate.formats.raw import DEFAULT_SERVER, RawTool
from toolgate.formats.tool_dict import parse_tool_dict
from toolgate.unicode import printable

__all__ = [
    "Catalog",
    "CatalogDiff",
    "Offender",
]


class Catalog:
    """An immutable, ordered set of tools, indexed by id and by exposed name."""

    __slots__ = (
        "_by_exposed",
        "_by_folded_exposed",
        "_by_id",
        "_by_name",
        "_overrides",
        "_pinned",
        "_position",
        "_qualify",
        "_tools",
        "_version",
    )

    def __init__(self, tools: Iterable[Tool] = (), *, qualify: str = "auto") -> None:
        """Build from :class:`Tool` objects; exposed names are (re)assigned to be unique."""
        items, offenders = build_tools(tools)
        if offenders:
            raise InvalidToolsError(offenders, "the tool list")
        self._qualify = qualify
        self._overrides: Mapping[str, Mapping[str, Any]] = {}
        names = assign_exposed_names([(t.server, t.name) for t in items], qualify=qualify)
        self._tools: tuple[Tool, ...] = tuple(
            t if t.exposed_name == n else replace(t, exposed_name=n)
            for t, n in zip(items, names, strict=True)
        )
        self._by_id = {t.id: t for t in self._tools}
        self._by_exposed = {t.exposed_name: t for t in self._tools}
        # Exposed names are unique ignoring case too (names.py), for clients that fold it.
        self._by_folded_exposed = {t.exposed_name.casefold(): t for t in self._tools}
        self._position = {t.id: i for i, t in enumerate(self._tools)}
        self._pinned = tuple(t.id for t in self._tools if t.pinned)
        self._by_name: dict[str, list[Tool]] = {}
        for tool in self._tools:
            self._by_name.setdefault(tool.name, []).append(tool)
        digest = hashlib.sha256()
        for t in self._tools:
            digest.update(f"{t.id}\0{t.exposed_name}\0{t.fingerprint}\n".encode())
        self._version = digest.hexdigest()

    @classmethod
    def load(
        cls,
        source: ToolSource,
        *,
        server: str | None = None,
        lenient: bool = False,
        format: str | None = None,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        qualify: str = "auto",
        rename_duplicates: bool = False,
        self_pins: str = "refuse",
    ) -> Catalog:
        """Load tools from a file path or a parsed object, detecting the format.

        ``source`` is a path (``.json``, ``.jsonl``, text with ``<toolname>`` tags), the text
        itself, or a parsed document: an MCP ``tools/list`` result (or ``{server: result}``),
        OpenAI Chat or Responses tools, Anthropic tools, Gemini declarations, or a list mixing
        them. ``server`` names the server of tools that do not say (default: the file name up
        to its first dot, else ``"default"``). ``overrides`` maps a tool id or name to an
        ``x-toolgate`` block (see :mod:`toolgate.catalog.tool`) that wins over the tool's own
        (a tool's blocks by name and by id both apply, the id's winning on a key both set).
        ``format`` forces one of :data:`toolgate.formats.raw.FORMATS`. ``rename_duplicates``
        keeps tools whose id repeats, moving each repeat to server ``<server>~2``, ``~3``, ...
        (for evaluation sets that reuse names); otherwise a repeated id is a bad tool.
        A tool whose own block pins it is a bad tool (only ``overrides`` pin), or with
        ``self_pins="ignore"`` (for listings the host cannot fix, such as an MCP server's)
        kept unpinned, with a :class:`CatalogWarning` naming it.
        """
        check_self_pins(self_pins)
        as_text = format in ("jsonl", "text_tags")
        document, label, file_server = read_source(source, as_text=as_text)
        try:
            fmt = format or detect_format(document)
            raws = parse_document(document, fmt, server or file_server or DEFAULT_SERVER)
        except ValueError as exc:
            raise CatalogError(f"{label}: {exc}") from None
        return cls._from_raw(
            raws,
            label,
            lenient=lenient,
            overrides=overrides,
            qualify=qualify,
            rename_duplicates=rename_duplicates,
            self_pins=self_pins,
        )

    @classmethod
    def from_mcp(
        cls,
        result: Any,
        *,
        server: str | None = None,
        lenient: bool = False,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        self_pins: str = "refuse",
    ) -> Catalog:
        """From an MCP ``tools/list`` result, its JSON-RPC envelope, or ``{server: result}``.

        ``self_pins`` is as in :meth:`load`.
        """
        return cls.load(
            result,
            server=server,
            lenient=lenient,
            format="mcp",
            overrides=overrides,
            self_pins=self_pins,
        )

    @classmethod
    def from_openai(
        cls,
        tools: Any,
        *,
        server: str | None = None,
        lenient: bool = False,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Catalog:
        """From OpenAI Chat (function wrapper) or Responses function tools."""
        return cls.load(tools, server=server, lenient=lenient, format="tools", overrides=overrides)

    @classmethod
    def from_anthropic(
        cls,
        tools: Any,
        *,
        server: str | None = None,
        lenient: bool = False,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Catalog:
        """From Anthropic ``tools`` (``name``, ``description``, ``input_schema``)."""
        return cls.load(tools, server=server, lenient=lenient, format="tools", overrides=overrides)

    @classmethod
    def from_gemini(
        cls,
        declarations: Any,
        *,
        server: str | None = None,
        lenient: bool = False,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Catalog:
        """From Gemini ``function_declarations`` / ``tools[].functionDeclarations``."""
        return cls.load(
            declarations, server=server, lenient=lenient, format="gemini", overrides=overrides
        )

    @classmethod
    def from_jsonl(
        cls,
        source: str | os.PathLike[str],
        *,
        server: str | None = None,
        lenient: bool = False,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Catalog:
        """From JSONL (a path or the text), one tool per line."""
        return cls.load(source, server=server, lenient=lenient, format="jsonl", overrides=overrides)

    @classmethod
    def from_text_tags(
        cls, text: str, *, server: str | None = None, lenient: bool = False
    ) -> Catalog:
        """From ``<toolname>…</toolname><tooldescription>…</tooldescription>`` text (or a path).

        Unclosed or mismatched tags are bad tools, reported with their line.
        """
        return cls.load(text, server=server, lenient=lenient, format="text_tags")

    @classmethod
    def from_tools(
        cls,
        tools: Iterable[Tool | Mapping[str, Any]],
        *,
        server: str | None = None,
        lenient: bool = False,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        rename_duplicates: bool = False,
    ) -> Catalog:
        """From :class:`Tool` objects and/or tool dicts in any supported shape, mixed.

        Dicts written by :meth:`Tool.to_dict` are rebuilt, their ``fingerprint`` must match
        their content, and they pass every check other tools do (their ``pinned`` is their own
        block's: see :meth:`from_saved` for a router's own files). ``rename_duplicates`` is as in
        :meth:`load`. A path, text or whole document (a mapping such as ``{"tools": [...]}``)
        is read by :meth:`load` instead of being iterated.
        """
        if isinstance(tools, (str, bytes, os.PathLike, Mapping)):
            return cls.load(
                tools,
                server=server,
                lenient=lenient,
                overrides=overrides,
                rename_duplicates=rename_duplicates,
            )
        if not isinstance(tools, Iterable):
            raise CatalogError(
                "tools must be a list of tools, a document such as {'tools': [...]} or a file "
                f"path, not {type(tools).__name__}"
            )
        items = list(tools)
        raws: list[RawTool | Tool] = []
        for i, item in enumerate(items):
            if isinstance(item, Tool):
                raws.append(item)
            elif is_saved_tool(item):
                raws.append(saved_tool_checked(item, f"tools[{i}]"))
            else:
                raws.extend(parse_tool_dict(item, f"tools[{i}]", server or DEFAULT_SERVER))
        return cls._from_raw(
            raws,
            "the tool list",
            lenient=lenient,
            overrides=overrides,
            rename_duplicates=rename_duplicates,
        )

    @classmethod
    def from_saved(
        cls,
        tools: Iterable[Tool | Mapping[str, Any]],
        *,
        qualify: str = "auto",
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Catalog:
        """Rebuild a catalog a router saved: its tools, naming mode and load-time overrides.

        ``tools`` are dicts written by :meth:`Tool.to_dict`, taken as written (pins included):
        only for a router's own file, whose checksum its manifest holds. They already carry the
        overrides, so these are not applied again here; they are kept so
        that :meth:`replace_server` applies them to the server's fresh tools exactly as it
        would on the catalog that was saved.
        """
        if isinstance(tools, (str, bytes, os.PathLike, Mapping)) or not isinstance(tools, Iterable):
            raise CatalogError(f"saved tools must be a list, not {type(tools).__name__}")
        raws: list[RawTool | Tool] = [
            item
            if isinstance(item, Tool)
            else saved_tool(item, f"tools[{i}]")
            if isinstance(item, Mapping)
            else RawTool(
                f"tools[{i}]", problem=f"a saved tool is an object, not a {type(item).__name__}"
            )
            for i, item in enumerate(tools)
        ]
        # Trusted as written: the manifest's checksum of the file vouches for these tools, and
        # saved_tool still checks each field's type and size. Not re-validated, so fast.
        catalog = cls._from_raw(raws, "the saved catalog", lenient=False, overrides=None)
        if qualify != catalog.qualify:
            catalog = cls(catalog.tools, qualify=qualify)
        catalog._overrides = checked_overrides(overrides or {}, lenient=False)
        return catalog

    @classmethod
    def _from_raw(
        cls,
        raws: Sequence[RawTool | Tool],
        label: str,
        *,
        lenient: bool,
        overrides: Mapping[str, Mapping[str, Any]] | None,
        qualify: str = "auto",
        rename_duplicates: bool = False,
        self_pins: str = "refuse",
    ) -> Catalog:
        if overrides is not None:
            overrides = checked_overrides(overrides, lenient=lenient)
        tools, offenders = build_tools(
            raws, overrides=overrides, rename_duplicates=rename_duplicates, self_pins=self_pins
        )
        if offenders and not lenient:
            raise InvalidToolsError(offenders, label)
        if offenders:
            listed = "; ".join(str(o) for o in offenders)
            warnings.warn(
                f"skipped {len(offenders)} bad tool(s) in {label}: {listed}",
                CatalogWarning,
                stacklevel=3,
            )
        catalog = cls(tools, qualify=qualify)
        catalog._overrides = dict(overrides or {})
        catalog._warn_unmet_requirements(label)
        return catalog

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._by_id

    def __getitem__(self, tool_id: str) -> Tool:
        try:
            return self._by_id[tool_id]
        except (KeyError, TypeError):
            raise UnknownToolError(self._unknown(tool_id, "id")) from None

    def __repr__(self) -> str:
        return (
            f"Catalog({len(self)} tools, {len(self.servers)} servers, version={self.version[:12]})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Catalog) and other.version == self.version

    def __hash__(self) -> int:
        return hash(self._version)

    def _unknown(self, key: object, kind: str) -> str:
        return f"no tool with {kind} {key!r} in this catalog of {len(self)} tools"

    def get_exposed(self, name: str, *, ignore_case: bool = False) -> Tool | None:
        """The tool the model calls ``name`` (compared ignoring case if asked), or ``None``.

        Exposed names are ASCII, so ignoring case folds ASCII letters only: Unicode folding
        would pass a look-alike no tool has (``send_email`` with a long s, U+017F) as the tool.
        """
        if ignore_case:
            if not (isinstance(name, str) and name.isascii()):
                return None
            return self._by_folded_exposed.get(name.casefold())
        return self._by_exposed.get(name)

    def position(self, tool_id: str) -> int:
        """Where the tool ``tool_id`` is in catalog order; :class:`UnknownToolError` if absent."""
        try:
            return self._position[tool_id]
        except (KeyError, TypeError):
            raise UnknownToolError(self._unknown(tool_id, "id")) from None

    def with_name(self, name: str) -> list[Tool]:
        """Every tool whose original (unexposed) name is ``name``, in catalog order."""
        return list(self._by_name.get(name, ()))

    @property
    def qualify(self) -> str:
        """How exposed names were assigned: ``"auto"`` or ``"always"`` (see ``names.py``)."""
        return self._qualify

    @property
    def overrides(self) -> Mapping[str, Mapping[str, Any]]:
        """The ``overrides`` given at load time, which :meth:`replace_server` applies again.

        A copy (editing it changes nothing); a router saves it with the catalog so a reopened
        router refreshes a server the same way.
        """
        return MappingProxyType(copy.deepcopy(dict(self._overrides)))

    @property
    def pinned_ids(self) -> tuple[str, ...]:
        """Ids of the tools that are always promoted, in catalog order."""
        return self._pinned

    def in_catalog_order(self, tool_ids: Iterable[str]) -> list[str]:
        """``tool_ids`` (all in this catalog) sorted by catalog position, duplicates removed."""
        return sorted(set(tool_ids), key=self._position.__getitem__)

    def get(self, tool_id: str, default: Tool | None = None) -> Tool | None:
        """The tool with ``tool_id``, or ``default``."""
        return self._by_id.get(tool_id, default)

    def by_exposed_name(self, name: str) -> Tool:
        """The tool the model calls ``name``; raises :class:`UnknownToolError` if none."""
        try:
            return self._by_exposed[name]
        except (KeyError, TypeError):
            raise UnknownToolError(self._unknown(name, "exposed name")) from None

    @property
    def tools(self) -> tuple[Tool, ...]:
        """Every tool, in catalog order."""
        return self._tools

    @property
    def ids(self) -> list[str]:
        """Every tool id, in catalog order."""
        return [t.id for t in self._tools]

    @property
    def servers(self) -> list[str]:
        """Server names in order of first appearance."""
        return list(dict.fromkeys(t.server for t in self._tools))

    @property
    def version(self) -> str:
        """sha256 over every tool's id, exposed name and fingerprint, in order."""
        return self._version

    def to_provider(self, provider: str = "openai") -> list[dict[str, Any]]:
        """Every tool in ``provider``'s format (see :meth:`Tool.to_provider`)."""
        return [t.to_provider(provider) for t in self._tools]

    def diff(self, other: Catalog) -> CatalogDiff:
        """What changed from this catalog to ``other`` (the newer one), by fingerprint.

        Re-indexing only ``added + changed`` and dropping ``removed`` brings an index built on
        this catalog up to date with ``other``.
        """
        return catalog_diff(self, other)

    def replace_server(
        self,
        server: str,
        new_tools: Any,
        *,
        lenient: bool = False,
        self_pins: str = "refuse",
        order: Sequence[str] = (),
    ) -> Catalog:
        """A new catalog with ``server``'s tools replaced (on ``notifications/tools/list_changed``).

        ``new_tools`` is the server's fresh ``tools/list`` result (or a list of tools in any
        accepted shape); every one is assigned to ``server``. The new tools take the place of
        the old ones, so the order of other servers' tools is untouched. A server with no tools
        yet goes before the servers that ``order`` (server names) lists after it, else last.
        Overrides given at load time apply again. An empty list removes the server.
        ``self_pins`` is as in :meth:`load`.
        """
        fresh, offenders = server_tools(new_tools, server, self._overrides, self_pins)
        if offenders and not lenient:
            raise InvalidToolsError(offenders, f"the refresh of server {server!r}")
        if offenders:
            # The server's tools, refreshed whenever it says they changed: a bounded list.
            listed = listed_offenders(offenders)
            warnings.warn(
                f"skipped {len(offenders)} bad tool(s) in the refresh of {server!r}: {listed}",
                CatalogWarning,
                stacklevel=2,
            )
        servers = tool_list(order, "order", "server names")
        merged = with_server_replaced(self._tools, server, fresh, servers)
        catalog = Catalog(merged, qualify=self._qualify)
        catalog._overrides = self._overrides
        catalog._warn_unmet_requirements(f"the refresh of server {server!r}")
        return catalog

    def _warn_unmet_requirements(self, label: str) -> None:
        """Warn about tools whose ``requires.tools`` name no tool of this catalog.

        Not an error: ``tools_run`` is the caller's record, which may hold tools served
        elsewhere, and a multi-server catalog may be refreshed server by server. But such a
        requirement is most often a typo, which would keep the tool gated for good.
        """
        index = RequirementIndex(self._tools)
        unmet = [
            f"{printable(tool.id, SHOWN_ID_CHARS)} requires {missing}"
            for tool in self._tools
            if tool.requires_tools and (missing := index.unmet(tool))
        ]
        if unmet:
            warnings.warn(
                f"{label}: requires.tools names no tool of the catalog, so these stay gated "
                f"until the caller reports such a tool in tools_run: {'; '.join(unmet)}",
                CatalogWarning,
                stacklevel=4,
            )

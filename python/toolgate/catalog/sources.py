"""Where a catalog's tools come from: files, documents, saved tools and overrides."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgate.catalog.build import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS
from toolgate.catalog.overrides import saved_overrides
from toolgate.catalog.tool import Tool, tool_from_dict
from toolgate.errors import CatalogError, CatalogWarning
from toolgate.formats.raw import RawTool
from toolgate.json_limits import json_problem, loads, one_json_document, read_text
from toolgate.unicode import well_formed

#: Largest catalog file read: far past any real registry, a bound on what a wrong path (or
#: ``/dev/zero``) makes the loader allocate.
MAX_CATALOG_BYTES = 1 << 30

ToolSource = Any


def read_source(source: ToolSource, *, as_text: bool) -> tuple[Any, str, str | None]:
    """Return (document, label for messages, server derived from a file name).

    ``as_text`` keeps text as text (for JSONL and tags) instead of trying to parse it as JSON.
    """
    if isinstance(source, bytes):
        try:
            # utf-8-sig: files saved by Windows editors start with a byte order mark.
            source = source.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CatalogError(f"catalog bytes are not UTF-8: {exc}") from None
    if isinstance(source, str):
        source = source.removeprefix("\ufeff")
        if not source.strip():
            raise CatalogError(
                "the catalog source is an empty string: expected a file path or the catalog text"
            )
    if isinstance(source, str) and _looks_like_content(source):
        if as_text:
            return source, "<text>", None
        try:
            # A whole JSON document given as text; JSONL and tag text fall through as text.
            return loads(source), "<text>", None
        except json.JSONDecodeError:
            return source, "<text>", None
        except ValueError as exc:  # JSON, but nested too deeply or a number too long
            raise CatalogError(f"<text>: {exc}") from None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            text = read_text(path, MAX_CATALOG_BYTES)
        except FileNotFoundError:
            raise CatalogError(f"catalog file not found: {path}") from None
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise CatalogError(f"cannot read catalog file {path}: {exc}") from None
        if not text.strip():  # a file cut short or never written, not a catalog of no tools
            raise CatalogError(f"catalog file {path} is empty")
        # A name the file system holds as bytes that are not UTF-8 (a Latin-1 "caf\xe9")
        # reaches Python with lone surrogates, which no server name may hold: each becomes
        # U+FFFD, as file managers show it, so the file loads under a name stable from run
        # to run (--server names it otherwise) rather than every tool in it being refused.
        server = well_formed(path.name.split(".", 1)[0]) or None
        if as_text:
            return text, str(path), server
        if path.suffix == ".jsonl":
            # A .jsonl holding one JSON document (no line of which is a tool) is read as that
            # document, as a .json holding JSON lines is read as lines.
            document = one_json_document(text)
            return (text if document is None else document), str(path), server
        try:
            return loads(text), str(path), server
        except json.JSONDecodeError as exc:
            if "<toolname>" in text or "\n{" in text.strip():
                return text, str(path), server
            raise CatalogError(
                f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        except ValueError as exc:
            raise CatalogError(f"{path}: {exc}") from None
    return source, f"<{type(source).__name__}>", None


def _looks_like_content(text: str) -> bool:
    head = text.lstrip()[:1]
    return head in ("{", "[") or "<toolname>" in text or "\n" in text.strip()


def is_saved_tool(item: Any) -> bool:
    return isinstance(item, Mapping) and {"fingerprint", "input_schema", "server"} <= set(item)


def saved_tool(item: Mapping[str, Any], where: str) -> RawTool | Tool:
    """A tool a router saved (:meth:`Tool.to_dict`), rebuilt without the full catalog checks:
    only for files a checksum says this process's own kind wrote. Every field is still checked
    for its type and size, so a damaged one is a bad tool, never an error later."""
    name = item.get("name")
    problem = _saved_problem(item)
    if problem:
        return RawTool(where=where, name=name, problem=f"bad saved tool: {problem}")
    try:
        tool = tool_from_dict(item)
        # Encoding the content for its fingerprint also refuses a lone surrogate anywhere.
        matches = tool.fingerprint == item["fingerprint"]
    except (KeyError, TypeError, ValueError) as exc:
        return RawTool(where=where, name=name, problem=f"bad saved tool: {exc!r:.300}")
    if not matches:
        problem = "saved fingerprint does not match the tool's content (edited after saving?)"
        return RawTool(where=where, name=tool.name, server=tool.server, problem=problem)
    return tool


def saved_tool_checked(item: Mapping[str, Any], where: str) -> RawTool:
    """A dict shaped like a saved tool, from a caller: read as the tool it describes and put
    through every catalog check (a fingerprint is no proof of anything, anyone can compute
    one). Its ``pinned`` and preconditions count as the tool's own block."""
    saved = saved_tool(item, where)
    if isinstance(saved, RawTool):
        return saved
    requires = item.get("requires", {})
    meta = {
        "requires": {
            key: requires[key] for key in ("scopes", "tools", "milestones") if requires.get(key)
        },
        **{key: item[key] for key in ("scopes", "tags") if item.get(key)},
        **({"pinned": True} if item.get("pinned") else {}),
        **({"summary": item["summary"]} if item.get("summary") else {}),
    }
    return RawTool(
        where=where,
        name=saved.name,
        description=saved.description,
        input_schema=saved.input_schema,
        server=saved.server,
        annotations=saved.annotations,
        meta=meta,
        title=saved.title,
        strict=saved.strict,
    )


_SAVED_STRINGS = ("server", "name", "description", "summary", "exposed_name")


def _saved_problem(item: Mapping[str, Any]) -> str | None:
    """What makes ``item`` no :meth:`Tool.to_dict` output this package could have written.

    The walk checks nesting only (a lone surrogate fails the fingerprint's encoding): this
    runs on every tool of a saved catalog when it loads.
    """
    problem = json_problem(dict(item), strict=False)
    if problem:
        return f"it holds {problem}"
    for key in _SAVED_STRINGS:
        if key in item and not isinstance(item[key], str):
            return f"{key!r} must be a string, got {type(item[key]).__name__}"
    for key in ("server", "name"):
        value = item.get(key)
        if not (isinstance(value, str) and value.strip()) or len(value) > MAX_NAME_CHARS:
            return f"{key!r} must be a name of 1 to {MAX_NAME_CHARS} characters"
    if len(item.get("description", "")) > MAX_DESCRIPTION_CHARS:
        return f"the description is longer than {MAX_DESCRIPTION_CHARS:,} characters"
    for key in ("input_schema", "annotations"):
        if key in item and not isinstance(item[key], dict):
            return f"{key!r} must be an object, got {type(item[key]).__name__}"
    if not isinstance(item.get("pinned", False), bool):
        return "'pinned' must be true or false"
    if item.get("title") is not None and not isinstance(item["title"], str):
        return "'title' must be a string or null"
    requires = item.get("requires", {})
    if not isinstance(requires, Mapping):
        return f"'requires' must be an object, got {type(requires).__name__}"
    lists = [("requires." + k, requires.get(k, [])) for k in ("scopes", "tools", "milestones")]
    for key, value in [*lists, ("scopes", item.get("scopes", [])), ("tags", item.get("tags", []))]:
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{key!r} must be a list of strings"
    return None


def checked_overrides(overrides: object, *, lenient: bool) -> dict[str, dict[str, Any]]:
    """``overrides`` in the JSON form a router saves (see :mod:`toolgate.catalog.overrides`).

    Checked here, so the load names a bad entry rather than the first router built later;
    lenient, a bad entry is dropped with a warning naming it, as bad tools are.
    """
    try:
        return saved_overrides(overrides)[0]
    except ValueError as exc:
        if not (lenient and isinstance(overrides, Mapping)):
            raise CatalogError(f"bad overrides: {exc}") from None
    kept: dict[str, dict[str, Any]] = {}
    for key, block in overrides.items():
        try:
            kept.update(saved_overrides({key: block})[0])
        except ValueError as exc:
            warnings.warn(f"skipped a bad override: {exc}", CatalogWarning, stacklevel=4)
    return kept

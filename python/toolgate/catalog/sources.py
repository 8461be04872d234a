"""Where a catalog's tools come from: files, documents, saved tools and overrides."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgate.catalog.overrides import saved_overrides
from toolgate.catalog.tool import Tool, tool_from_dict
from toolgate.errors import CatalogError, CatalogWarning
from toolgate.formats.raw import RawTool

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
            return json.loads(source), "<text>", None
        except json.JSONDecodeError:
            return source, "<text>", None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            raise CatalogError(f"catalog file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CatalogError(f"cannot read catalog file {path}: {exc}") from exc
        server = path.name.split(".", 1)[0] or None
        if as_text or path.suffix == ".jsonl":
            return text, str(path), server
        try:
            return json.loads(text), str(path), server
        except json.JSONDecodeError as exc:
            if "<toolname>" in text or "\n{" in text.strip():
                return text, str(path), server
            raise CatalogError(
                f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
    return source, f"<{type(source).__name__}>", None


def _looks_like_content(text: str) -> bool:
    head = text.lstrip()[:1]
    return head in ("{", "[") or "<toolname>" in text or "\n" in text.strip()


def is_saved_tool(item: Any) -> bool:
    return isinstance(item, Mapping) and {"fingerprint", "input_schema", "server"} <= set(item)


def saved_tool(item: Mapping[str, Any], where: str) -> RawTool | Tool:
    try:
        tool = tool_from_dict(item)
    except (KeyError, TypeError, ValueError) as exc:
        return RawTool(where=where, name=item.get("name"), problem=f"bad saved tool: {exc!r}")
    if tool.fingerprint != item["fingerprint"]:
        problem = "saved fingerprint does not match the tool's content (edited after saving?)"
        return RawTool(where=where, name=tool.name, server=tool.server, problem=problem)
    return tool


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

"""Allow and deny lists: patterns over tool ids and names resolved to index rows.

A pattern is an exact id (``github/create_issue``), a whole server (``github/*``), a bare tool
name (``create_issue``, any server), a glob over tool names (``delete_*``, any server) or an
``fnmatch`` glob over ids (``github/*_issue``). A pattern matches a tool when it matches the
tool's name or, if it holds a ``/``, its id: ``deny=["delete_*"]`` shuts out every server's
``delete_`` tools, and a name that itself holds a ``/`` (``repos/delete``) is matched as
written, not read as a server.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from toolgate.errors import InvalidInputError

__all__ = ["ScopeMatcher"]

# fnmatch's special characters: a pattern without them matches only itself.
_GLOB = re.compile(r"[*?\[]")


class ScopeMatcher:
    """Resolves pattern lists to sorted uint32 row arrays, caching each distinct list."""

    def __init__(self, ids: Sequence[str], names: Sequence[str]) -> None:
        """``ids`` and ``names`` of the tools, in row order."""
        self._ids = tuple(ids)
        self._names = tuple(names)
        if len(self._names) != len(self._ids):
            raise InvalidInputError(f"{len(self._names)} names for {len(self._ids)} tool ids")
        self._rows_by_key: dict[str, list[int]] = {}
        for row, (tool_id, name) in enumerate(zip(self._ids, self._names, strict=True)):
            for key in {tool_id, name}:
                self._rows_by_key.setdefault(key, []).append(row)
        self._resolve = lru_cache(maxsize=256)(self._resolve_uncached)

    def rows(self, patterns: Iterable[str] | None) -> np.ndarray | None:
        """Rows matching any pattern, or ``None`` when ``patterns`` is ``None``."""
        if patterns is None:
            return None
        if isinstance(patterns, str):
            raise InvalidInputError(
                f"allow/deny must be a list of patterns, not the string {patterns!r}"
            )
        return self._resolve(tuple(sorted(set(patterns))))

    def _resolve_uncached(self, patterns: tuple[str, ...]) -> np.ndarray:
        rows: set[int] = set()
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern:
                raise InvalidInputError(
                    f"allow/deny pattern must be a non-empty string: {pattern!r}"
                )
            if not _GLOB.search(pattern):  # a literal: an id or a name, looked up
                rows.update(self._rows_by_key.get(pattern, ()))
                continue
            by_id = "/" in pattern
            rows.update(
                row
                for row, (tool_id, name) in enumerate(zip(self._ids, self._names, strict=True))
                if fnmatch.fnmatchcase(name, pattern)
                or (by_id and fnmatch.fnmatchcase(tool_id, pattern))
            )
        result = np.fromiter(sorted(rows), dtype=np.uint32, count=len(rows))
        result.setflags(write=False)
        return result

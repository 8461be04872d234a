"""Allow and deny lists: patterns over tool ids resolved to index rows.

A pattern is an exact id (``github/create_issue``), a whole server (``github/*``), a bare tool
name (``create_issue``, any server), a glob over tool names (``delete_*``, any server) or an
``fnmatch`` glob over ids (``github/*_issue``): a pattern with a ``/`` is read against ids, one
without against names, so ``deny=["delete_*"]`` shuts out every server's ``delete_`` tools.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from toolgate.errors import InvalidInputError

__all__ = ["ScopeMatcher"]


class ScopeMatcher:
    """Resolves pattern lists to sorted uint32 row arrays, caching each distinct list."""

    def __init__(self, ids: Sequence[str]) -> None:
        self._ids = tuple(ids)
        self._rows_by_id = {tool_id: row for row, tool_id in enumerate(self._ids)}
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
            exact = self._rows_by_id.get(pattern)
            if exact is not None:
                rows.add(exact)
            elif "/" in pattern:
                rows.update(r for r, i in enumerate(self._ids) if fnmatch.fnmatchcase(i, pattern))
            else:
                # The name is the id's last segment here; a name holding a '/' is matched
                # by its id.
                rows.update(
                    r
                    for r, i in enumerate(self._ids)
                    if fnmatch.fnmatchcase(i.rsplit("/", 1)[-1], pattern)
                )
        result = np.fromiter(sorted(rows), dtype=np.uint32, count=len(rows))
        result.setflags(write=False)
        return result

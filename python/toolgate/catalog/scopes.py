"""Allow and deny lists: patterns over tool ids and names resolved to index rows.

A pattern is an exact id (``github/create_issue``), a whole server (``github/*``), a bare tool
name (``create_issue``, any server), a glob over tool names (``delete_*``, any server) or an
``fnmatch`` glob over ids (``github/*_issue``). A pattern without a ``/`` is read against tool
names, so ``deny=["delete_*"]`` shuts out every server's ``delete_`` tools. One with a ``/``
is read against ids, and in a deny list against names too, since names may hold a ``/``
(``repos/delete``). A deny list also reads each pattern against exposed names (the names
the model sees and calls, ``github__delete_file``) and ignores case, so a list written from
what the model was shown still denies.

The two lists err on the safe side in opposite directions. An MCP server picks its own tool
names, so one could name a tool ``github/create_issue``: read against names, an allow list
meant for the ``github`` server would let it in; read against ids only, a deny list written
with the name would miss ``repos/delete``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from toolgate.errors import InvalidInputError

__all__ = ["ScopeMatcher", "pattern_list"]

# fnmatch's special characters: a pattern without them matches only itself.
_GLOB = re.compile(r"[*?\[]")


def pattern_list(patterns: Iterable[str] | None) -> tuple[str, ...] | None:
    """An allow / deny list as a tuple, read once (a generator would be spent by its first
    reader); ``None`` stays ``None``. A string or a non-iterable is an
    :class:`InvalidInputError`; the entries are checked where they are resolved."""
    if patterns is None:
        return None
    if isinstance(patterns, str) or not isinstance(patterns, Iterable):
        raise InvalidInputError(f"allow/deny must be a list of patterns, got {patterns!r}")
    return tuple(patterns)


class ScopeMatcher:
    """Resolves pattern lists to sorted uint32 row arrays, caching each distinct list."""

    def __init__(
        self, ids: Sequence[str], names: Sequence[str], exposed: Sequence[str] | None = None
    ) -> None:
        """``ids``, ``names`` and ``exposed`` names (the names themselves when not given) of
        the tools, in row order."""
        self._ids = tuple(ids)
        self._names = tuple(names)
        self._exposed = self._names if exposed is None else tuple(exposed)
        if not len(self._names) == len(self._exposed) == len(self._ids):
            raise InvalidInputError(f"{len(self._names)} names for {len(self._ids)} tool ids")
        self._rows_by_id = {tool_id: row for row, tool_id in enumerate(self._ids)}
        self._rows_by_name: dict[str, list[int]] = {}
        for row, name in enumerate(self._names):
            self._rows_by_name.setdefault(name, []).append(row)
        self._folded: list[tuple[str, str, str]] | None = None
        self._resolve = lru_cache(maxsize=256)(self._resolve_uncached)

    def __len__(self) -> int:
        return len(self._ids)

    def rows(self, patterns: Iterable[str] | None, *, deny: bool = False) -> np.ndarray | None:
        """Rows matching any pattern, or ``None`` when ``patterns`` is ``None``.

        ``deny`` reads patterns holding a ``/`` against names as well as ids (see above).
        """
        if patterns is None:
            return None
        if isinstance(patterns, str):
            raise InvalidInputError(
                f"allow/deny must be a list of patterns, not the string {patterns!r}"
            )
        listed = list(patterns)
        for pattern in listed:  # before sorting, which would fail on a mix of types
            if not isinstance(pattern, str) or not pattern:
                raise InvalidInputError(
                    f"allow/deny pattern must be a non-empty string: {pattern!r}"
                )
        return self._resolve(tuple(sorted(set(listed))), deny)

    def _resolve_uncached(self, patterns: tuple[str, ...], deny: bool) -> np.ndarray:
        rows: set[int] = set()
        for pattern in patterns:
            if deny:
                rows.update(self._denied(pattern))
                continue
            by_id = "/" in pattern
            by_name = deny or not by_id
            if not _GLOB.search(pattern):  # a literal: looked up
                if by_id and pattern in self._rows_by_id:
                    rows.add(self._rows_by_id[pattern])
                if by_name:
                    rows.update(self._rows_by_name.get(pattern, ()))
                continue
            rows.update(
                row
                for row, (tool_id, name) in enumerate(zip(self._ids, self._names, strict=True))
                if (by_name and fnmatch.fnmatchcase(name, pattern))
                or (by_id and fnmatch.fnmatchcase(tool_id, pattern))
            )
        result = np.fromiter(sorted(rows), dtype=np.uint32, count=len(rows))
        result.setflags(write=False)
        return result

    def _denied(self, pattern: str) -> Iterable[int]:
        """Rows a deny ``pattern`` shuts out: read against names and exposed names, and with
        a ``/`` against ids too, ignoring case (denying errs on the side of more)."""
        folded = pattern.casefold()
        match = fnmatch.fnmatchcase if _GLOB.search(pattern) else str.__eq__
        for row, (tool_id, name, shown) in enumerate(self._deny_texts()):
            texts = (name, shown, tool_id) if "/" in pattern else (name, shown)
            if any(match(text, folded) for text in texts):
                yield row

    def _deny_texts(self) -> list[tuple[str, str, str]]:
        """Each row's id, name and exposed name, case-folded (made on the first deny list)."""
        if self._folded is None:
            self._folded = [
                (tool_id.casefold(), name.casefold(), shown.casefold())
                for tool_id, name, shown in zip(self._ids, self._names, self._exposed, strict=True)
            ]
        return self._folded

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
from collections.abc import Callable, Iterable, Sequence
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
        self._folded_rows: tuple[dict[str, list[int]], dict[str, list[int]]] | None = None
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
        # Literals are looked up and the globs read as one expression: each tool is read once
        # however long the list (a pattern at a time over every tool took 25 s for 1,000
        # patterns over 16,000 tools).
        literals = [pattern for pattern in patterns if not _GLOB.search(pattern)]
        globs = [pattern for pattern in patterns if _GLOB.search(pattern)]
        rows = self._denied(literals, globs) if deny else self._allowed(literals, globs)
        result = np.fromiter(sorted(rows), dtype=np.uint32, count=len(rows))
        result.setflags(write=False)
        return result

    def _allowed(self, literals: list[str], globs: list[str]) -> set[int]:
        """Rows an allow list admits: a pattern with a ``/`` read against ids, one without
        against names, exactly."""
        rows: set[int] = set()
        for pattern in literals:
            if "/" in pattern:
                if pattern in self._rows_by_id:
                    rows.add(self._rows_by_id[pattern])
            else:
                rows.update(self._rows_by_name.get(pattern, ()))
        by_name = _matcher([pattern for pattern in globs if "/" not in pattern])
        by_id = _matcher([pattern for pattern in globs if "/" in pattern])
        if by_name is not None or by_id is not None:
            rows.update(
                row
                for row, (tool_id, name) in enumerate(zip(self._ids, self._names, strict=True))
                if (by_name is not None and by_name(name)) or (by_id is not None and by_id(tool_id))
            )
        return rows

    def _denied(self, literals: list[str], globs: list[str]) -> set[int]:
        """Rows a deny list shuts out: each pattern read against names and exposed names, and
        with a ``/`` against ids too, ignoring case (denying errs on the side of more)."""
        names, ids = self._deny_lookups()
        rows: set[int] = set()
        for pattern in literals:
            folded = pattern.casefold()
            rows.update(names.get(folded, ()))
            if "/" in pattern:
                rows.update(ids.get(folded, ()))
        folded_globs = [pattern.casefold() for pattern in globs]
        any_name = _matcher(folded_globs)
        by_id = _matcher([pattern for pattern in folded_globs if "/" in pattern])
        if any_name is not None:
            rows.update(
                row
                for row, (tool_id, name, shown) in enumerate(self._deny_texts())
                if any_name(name) or any_name(shown) or (by_id is not None and by_id(tool_id))
            )
        return rows

    def _deny_texts(self) -> list[tuple[str, str, str]]:
        """Each row's id, name and exposed name, case-folded (made on the first deny list)."""
        if self._folded is None:
            self._folded = [
                (tool_id.casefold(), name.casefold(), shown.casefold())
                for tool_id, name, shown in zip(self._ids, self._names, self._exposed, strict=True)
            ]
        return self._folded

    def _deny_lookups(self) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """The rows of each case-folded name or exposed name, and of each case-folded id."""
        if self._folded_rows is None:
            names: dict[str, list[int]] = {}
            ids: dict[str, list[int]] = {}
            for row, (tool_id, name, shown) in enumerate(self._deny_texts()):
                for text in {name, shown}:
                    names.setdefault(text, []).append(row)
                ids.setdefault(tool_id, []).append(row)
            self._folded_rows = (names, ids)
        return self._folded_rows


def _matcher(globs: Sequence[str]) -> Callable[[str], object] | None:
    """Whether a text matches any of ``globs`` (``fnmatch``, case as given), as one
    expression; ``None`` for no glob."""
    if not globs:
        return None
    return re.compile("|".join(fnmatch.translate(glob) for glob in globs)).match

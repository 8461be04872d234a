"""Look-alikes: a tool named as a new version of another server's tool.

A server that wants another server's routes can copy its tool names and descriptions:
``list_issues_v2`` beside GitHub's ``list_issues``. The copy scores as well as the tool it
copies on every request for it, and nothing in its text tells which one is genuine. Its name
does: a tool whose name is another server's tool name plus a version or copy suffix (``_v2``,
``-2``, ``_new``), on a server that has no tool of that name itself, and whose row is close
to that tool's (cosine at least ``RouterConfig.lookalike_cosine``), presents itself as that
tool. Such a copy is left out of the ranking, so the tool it copies keeps the slot, unless
the request names the copy's server: then the copy is ranked and the tool it copies is not.
A copy named by the request, included or pinned is routed as any tool is. The other tools of
a server made mostly of such copies (:data:`COPIER_SHARE`) are weighed down as flagged tools
are (``RouterConfig.addressing_weight``), unless the request names the server.

Tools of the same name on two servers (``search``) are not look-alikes: nothing says which
is the copy, and most are different tools (``RouterConfig.near_copy_cosine`` moves the lower
of two near-identical ones down). docs/design.md, "Keyword stuffing".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from toolgate.embedding.normalise import normalised

__all__ = ["COPIER_SHARE", "Lookalikes", "find_lookalikes", "name_stem"]

#: Words that mark a name as a version or copy of another (besides ``v2`` and ``2``).
_COPY_WORDS = ("new", "copy", "latest", "alt", "old", "legacy", "beta", "next", "plus", "pro")
_SEPARATORS = "_-. "
_WORD_SEPARATORS = re.compile(r"[\s_\-./:@]+")


def name_stem(name: str) -> str:
    """``name`` folded to lower case, without version or copy suffixes (never empty).

    >>> name_stem("list_issues_v2"), name_stem("search-2"), name_stem("ride2")
    ('list_issues', 'search', 'ride2')
    """
    folded = stem = name.casefold()
    # String operations, not a regular expression: names come from servers, and a
    # backtracking engine on a suffix like (\d+)+ is exponential in the digits.
    while True:
        cut = stem.rstrip("0123456789")
        if cut != stem and cut.endswith(tuple(f"{sep}v" for sep in _SEPARATORS)):
            cut = cut[:-1]
        if not cut.endswith(tuple(_SEPARATORS)):
            cut = stem  # a number inside the name: ``ec2``, ``sha256``, ``badge1``
        if cut == stem:
            marks = [f"{sep}{word}" for word in _COPY_WORDS for sep in _SEPARATORS]
            cut = next((stem[: 1 - len(m)] for m in marks if stem.endswith(m)), stem)
        if cut == stem:
            break
        stem = cut[:-1] if cut.endswith(tuple(_SEPARATORS)) else cut
    return stem or folded


def _server_words(server: str) -> str:
    return " ".join(_WORD_SEPARATORS.split(server.casefold())).strip()


#: Share of a server's tools that are look-alikes from which its other tools are weighed
#: down too: a server made mostly of copies is not trusted for the rest.
COPIER_SHARE = 0.5

_NO_ROWS = np.zeros(0, dtype=np.uint32)


class Lookalikes:
    """The look-alike rows of one index: each copy row with the rows it copies, and each
    row's server as words (what a request that names it says)."""

    def __init__(
        self, copies: Mapping[int, tuple[int, ...]], servers: Sequence[str], n_rows: int
    ) -> None:
        self.copies = dict(copies)
        self.servers = tuple(servers)
        self.n_rows = n_rows
        self._copy_servers = {self.servers[row] for row in self.copies} - {""}
        counts = Counter(self.servers)
        copied = Counter(self.servers[row] for row in self.copies)
        copiers = {s for s in copied if copied[s] >= COPIER_SHARE * counts[s]}
        self._copier_rows = {
            row
            for row, server in enumerate(self.servers)
            if server in copiers and row not in self.copies
        }
        self._plain = self._rows(frozenset())

    def for_query(self, query: str) -> tuple[np.ndarray | None, np.ndarray]:
        """The rows ``query`` may rank (sorted uint32; ``None``: every row), and the rows it
        weighs down as flagged ones: the other tools of a server made mostly of copies."""
        if not self.copies:
            return None, _NO_ROWS
        words = f" {_server_words(query)} "
        named = frozenset(s for s in self._copy_servers if f" {s} " in words)
        return self._rows(named) if named else self._plain

    def _rows(self, named: frozenset[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every row but the copies of servers not ``named``, and the tools that copies of
        a named server copy (unless theirs is named too); the copiers' rows not ``named``."""
        left_out: set[int] = set()
        for copy, originals in self.copies.items():
            if self.servers[copy] in named:
                left_out.update(r for r in originals if self.servers[r] not in named)
            else:
                left_out.add(copy)
        keep = np.ones(self.n_rows, dtype=bool)
        keep[list(left_out)] = False
        demoted = sorted(r for r in self._copier_rows if self.servers[r] not in named)
        return np.flatnonzero(keep).astype(np.uint32), np.asarray(demoted, dtype=np.uint32)


def find_lookalikes(
    ids: Sequence[str],
    names: Sequence[str],
    vectors: Callable[[list[int]], np.ndarray],
    cosine: float,
) -> Lookalikes:
    """The look-alikes among the tools ``ids`` (``server/name``, names as ``names``), whose
    stored rows ``vectors`` returns for a list of rows.

    >>> rows = np.array([[1, 0], [0.9, 0.43], [0, 1]], dtype=np.float32)
    >>> found = find_lookalikes(
    ...     ["gh/list_issues", "evil/list_issues_v2", "evil/get_weather"],
    ...     ["list_issues", "list_issues_v2", "get_weather"],
    ...     lambda rows_: rows[rows_], 0.4)
    >>> found.copies
    {1: (0,)}
    """
    servers = [
        tool_id[: len(tool_id) - len(name) - 1] for tool_id, name in zip(ids, names, strict=True)
    ]
    by_name: dict[str, list[int]] = {}
    for row, name in enumerate(names):
        by_name.setdefault(name.casefold(), []).append(row)
    pairs: list[tuple[int, int]] = []
    for row, name in enumerate(names):
        stem = name_stem(name)
        if stem == name.casefold():
            continue
        own = {servers[r] for r in by_name.get(stem, ())}
        if servers[row] in own:
            continue  # a server's own new version of its tool
        pairs.extend((row, original) for original in by_name.get(stem, ()))
    copies: dict[int, list[int]] = {}
    if pairs:
        rows = sorted({r for pair in pairs for r in pair})
        unit = normalised(vectors(rows))
        at = {row: i for i, row in enumerate(rows)}
        for copy, original in pairs:
            if float(unit[at[copy]] @ unit[at[original]]) >= cosine:
                copies.setdefault(copy, []).append(original)
    return Lookalikes(
        {copy: tuple(originals) for copy, originals in copies.items()},
        tuple(_server_words(server) for server in servers),
        len(ids),
    )

"""What a route's words name, as rows of the router's index.

A route speaks of tools in many ways: ids and names in ``select:`` and ``include``, names
mentioned in the query text (the core's name index, which knows exposed names too), ``+term``
words, allow and deny patterns (:mod:`toolgate.catalog.scopes`). :class:`CatalogRows` turns
each into rows, and says which selected rows the caller's lists shut out.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from toolgate import _toolgate
from toolgate.arguments import tool_list
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.scopes import ScopeMatcher
from toolgate.lazy import Lazy
from toolgate.routing.query import outside_code_blocks
from toolgate.routing.store import CatalogOutline

__all__ = ["CatalogRows", "Scope"]

#: The caller's allow and deny rows (sorted uint32; ``None``: no list).
Scope = tuple[np.ndarray | None, np.ndarray | None]


class CatalogRows:
    """Resolves names, ids, mentions, ``+term`` words and patterns to rows of one index."""

    def __init__(
        self,
        ids: Sequence[str],
        pinned: Iterable[int],
        bm25: _toolgate.Bm25,
        tool_names: Callable[[], Sequence[str]],
        renamed: Iterable[tuple[int, str]] | None = (),
    ) -> None:
        """``ids`` in row order, the ``pinned`` rows, the router's ``bm25`` (its name index),
        a loader of each row's tool name (called on the first allow or deny list) and the
        rows whose exposed name differs from it, with that name (a deny list reads both)."""
        self._ids = tuple(ids)
        self._bm25 = bm25
        self._pinned = sorted(set(pinned))
        self._names = names = Lazy(None, lambda: tuple(tool_names()))
        self._renamed = dict(renamed or ())
        # Loaders over the data they read, not bound methods: those would make a cycle, and a
        # dropped router would wait for the cyclic GC to let go of its BM25 index.
        ids, renamed_rows = self._ids, self._renamed
        self._servers = Lazy(None, lambda: _split_servers(ids, names.get()))
        self._scopes = Lazy(None, lambda: _scope_matcher(ids, names.get(), renamed_rows))
        self._by_id = Lazy(None, lambda: _rows_by_id(ids))

    @classmethod
    def of(
        cls, outline: CatalogOutline, bm25: _toolgate.Bm25, catalog: Callable[[], Catalog]
    ) -> CatalogRows:
        """The rows of the catalog ``outline`` outlines; ``catalog`` loads the catalog itself,
        asked only when a manifest written before servers holding a ``/`` were recorded
        leaves ids that split two ways, for their tool names."""

        def tool_names() -> Sequence[str]:
            ambiguous = any(tool_id.count("/") > 1 for tool_id in outline.ids)
            if outline.slashed_servers is None and ambiguous:
                return tuple(tool.name for tool in catalog())
            return outline.names()

        return cls(outline.ids, outline.pinned, bm25, tool_names, outline.exposed)

    def names(self) -> tuple[str, ...]:
        """Each row's tool name, in row order."""
        return self._names.get()

    def servers(self) -> tuple[str, ...]:
        """Each row's server, in row order."""
        return self._servers.get()

    def named(self, name: str) -> list[int]:
        """Rows of the tools ``name`` names: an id (any case), an exposed name or a name.

        An exposed name (what the model sees and calls; in any case, as the catalog keeps them
        unique so) comes before a tool name spelled like it: beside ``x`` on ``a`` and ``b``,
        ``a__x`` is a's tool, not c's tool named ``a__x`` (exposed as ``c__a__x``).

        An entry holding a ``/`` is an id and names its own tool only: a tool of another
        server whose name reads like it (``evil`` naming a tool ``github/search``) is never
        let in, not even when the id itself is gone after a refresh. (Exposed names, what the
        model sees, hold no ``/``; a tool whose name does is named by its id.)
        """
        if "/" in name:
            exact, folded = self._by_id.get()
            row = exact.get(name)
            if row is None:
                row = folded.get(_folded_id(name))
            return [] if row is None else [row]
        return list(self._bm25.rows_named(name))

    def mentioned(self, query: str) -> list[int]:
        """Rows whose name, id or exposed name ``query`` mentions verbatim (see
        ``_toolgate.Bm25.mentioned_names``) outside its fenced code blocks, ascending.

        A name called in a pasted script is no request for that tool: "what time is it in
        Sydney?" above a script calling ``requests.get`` forced every tool of that name
        first (a pooled catalog may hold dozens; docs/design.md, "Noisy requests").
        """
        return list(self._bm25.mentioned_names(outside_code_blocks(query)))

    def selected(self, names: Iterable[str]) -> tuple[list[int], list[str]]:
        """The rows ``names`` name, each once in the order named, and the names that name
        no tool."""
        rows: dict[int, None] = {}  # ordered, and a lookup per row (a list was quadratic)
        unknown: list[str] = []
        for name in names:
            found = self.named(name)
            if not found:
                unknown.append(name)
            rows.update(dict.fromkeys(found))
        return list(rows), unknown

    def included(self, include: Iterable[str] | None) -> tuple[list[int], list[str]]:
        """The rows ``include`` names, ascending, and its entries that name no tool.

        Those are reported in the result's ``unknown``, as unknown ``select:`` names are: ids
        a search found last turn may be gone after a refresh, and that must not fail a turn.
        """
        if include is None:
            return [], []
        rows, unknown = self.selected(tool_list(include, "include", "tool ids or names"))
        return sorted(rows), unknown

    def with_pinned(self, rows: Sequence[int]) -> np.ndarray:
        """``rows`` (in their order) followed by the pinned rows not among them, ascending."""
        listed = set(rows)
        pinned = [row for row in self._pinned if row not in listed]
        return np.asarray([*rows, *pinned], dtype=np.uint32)

    def having_terms(self, terms: Sequence[str]) -> np.ndarray:
        """Rows whose id holds every one of the ``+term`` words ``terms`` (not empty).

        Each distinct term is looked up once, and none once no row is left: a lookup and its
        intersection cost as many rows as a server has tools, and a query may repeat a term
        thousands of times."""
        first, *others = dict.fromkeys(terms)
        rows = np.asarray(self._bm25.name_has_term(first), dtype=np.uint32)
        for term in others:
            if not len(rows):
                break
            rows = np.intersect1d(rows, np.asarray(self._bm25.name_has_term(term), np.uint32))
        return rows.astype(np.uint32)

    def scope(self, allow: Iterable[str] | None, deny: Iterable[str] | None) -> Scope:
        """The rows the ``allow`` and ``deny`` patterns match (``None`` where not given)."""
        if allow is None and deny is None:
            return None, None  # the matcher indexes every id and name: built when needed
        scopes = self._scopes.get()
        return scopes.rows(allow), scopes.rows(deny, deny=True)

    def shut_out(self, rows: Iterable[int], scope: Scope) -> list[tuple[int, str]]:
        """Those of ``rows`` that ``scope`` shuts out, each with the reason."""
        allow_rows, deny_rows = scope
        out = []
        for row in rows:
            if allow_rows is not None and not _contains(allow_rows, row):
                out.append((row, "not in the allow list"))
            elif deny_rows is not None and _contains(deny_rows, row):
                out.append((row, "in the deny list"))
        return out


def _contains(sorted_rows: np.ndarray, row: int) -> bool:
    at = int(np.searchsorted(sorted_rows, row))
    return at < len(sorted_rows) and int(sorted_rows[at]) == row


def _scope_matcher(
    ids: Sequence[str], names: Sequence[str], renamed: Mapping[int, str]
) -> ScopeMatcher:
    exposed = [renamed.get(row, name) for row, name in enumerate(names)]
    return ScopeMatcher(ids, names, exposed)


def _folded_id(tool_id: str) -> str:
    """``tool_id`` as typed, folded to meet ids ignoring case as tool names are (the Rust
    ``NameLookup``): NFKC, so a decomposed accent (as macOS types it) or full-width letters
    meet the plain ones, then lower-cased.

    Lower-cased, not case-folded: ``casefold`` also maps letters onto ASCII ones (``\xdf`` to
    ``ss``), so a look-alike would name a tool whose id it does not spell, which verify
    refuses too.
    """
    return unicodedata.normalize("NFKC", tool_id).lower()


def _catalog_id_key(tool_id: str) -> str:
    """A catalog's ``tool_id`` as :func:`_folded_id` of what is typed may meet it: composed
    (NFC) and lower-cased, never NFKC. An id names its own tool only, and NFKC would make
    the id of a server spelled in look-alike letters (full-width, mathematical bold ``github``)
    the plain ``github/...``, reached by it when that server is gone.
    """
    return unicodedata.normalize("NFC", tool_id).lower()


def _rows_by_id(ids: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Each id to its row, and each id folded (``_catalog_id_key``) to its row where no other
    id folds the same."""
    folded: dict[str, list[int]] = {}
    for row, tool_id in enumerate(ids):
        folded.setdefault(_catalog_id_key(tool_id), []).append(row)
    exact = {tool_id: row for row, tool_id in enumerate(ids)}
    return exact, {key: rows[0] for key, rows in folded.items() if len(rows) == 1}


def _split_servers(ids: Sequence[str], names: Sequence[str]) -> tuple[str, ...]:
    # An id is ``server/name``, and the name is known: what is left is the server.
    return tuple(
        tool_id[: len(tool_id) - len(name) - 1] for tool_id, name in zip(ids, names, strict=True)
    )

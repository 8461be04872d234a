"""CatalogRows: what a route's names and lists resolve to."""

from __future__ import annotations

from typing import Any

from toolgate.routing.rows import CatalogRows


class _Names:
    """The BM25 index's name lookup, for a catalog whose names no test asks for."""

    def rows_named(self, name: str) -> list[int]:
        return []


def test_a_route_without_lists_builds_no_pattern_matcher() -> None:
    # The matcher indexes every id and name (31 MB at N = 100,000): only allow / deny lists
    # need it.
    loads: list[int] = []

    def names() -> tuple[str, ...]:
        loads.append(1)
        return ("x", "y")

    bm25: Any = _Names()
    rows = CatalogRows(["a/x", "b/y"], (), bm25, names)
    assert rows.scope(None, None) == (None, None)
    assert loads == []
    allow, deny = rows.scope(["a/*"], None)
    assert allow is not None
    assert allow.tolist() == [0]
    assert deny is None
    assert loads == [1]


class _Terms:
    """The BM25 index's ``+term`` lookup over fixed rows, counting what it is asked."""

    def __init__(self, having: dict[str, list[int]]) -> None:
        self.having = having
        self.asked: list[str] = []

    def name_has_term(self, term: str) -> list[int]:
        self.asked.append(term)
        return self.having.get(term, [])


def test_required_terms_are_looked_up_once_each_until_no_row_is_left() -> None:
    # Each lookup intersects a row list as long as a server's tools: a query repeating
    # "+github" cost that once per repeat (a 128 KB query over 5,000 rows took 31 s).
    bm25: Any = _Terms({"git": [0, 1, 2], "hub": [1, 2]})
    rows = CatalogRows(["s/a", "s/b", "s/c"], (), bm25, lambda: ())
    assert rows.having_terms(["git"] * 1000 + ["hub"] * 1000).tolist() == [1, 2]
    assert bm25.asked == ["git", "hub"]
    bm25.asked.clear()
    assert rows.having_terms(["none", "git", "hub"]).tolist() == []
    assert bm25.asked == ["none"]

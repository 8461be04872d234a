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

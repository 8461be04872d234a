"""Tools used together: which tools a learned memory recorded for the same requests.

Feedback stores one row per (request, tool), the request's text hashed to a key; the tools of
one key served one request together. :class:`CoUse` keeps, for each tool, how many requests
it served and how many of those each other tool served too, counted as rows are stored and
evicted, so a route reads the counts without recounting the memory.

Two servers' tools of one name recorded for one request are alternatives (either served it),
not tools used together, and make no pair; nor does a request recorded with more than
:data:`CO_USE_MAX_TOOLS` tools, which says little about any two of them (and a hostile one
naming hundreds would cost pairs by the square).

>>> co_use = CoUse(["search", "fetch", "search"].__getitem__)
>>> for key in (b"a", b"b"):
...     co_use.add(key, 0)
...     co_use.add(key, 1)
>>> co_use.add(b"a", 2)  # another server's "search": no pair with row 0
>>> co_use.lifts([0], weight=0.5, least=2)
{1: 0.5}
>>> co_use.remove(b"b", 1)
>>> co_use.lifts([0], weight=0.5, least=1)
{1: 0.25}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

__all__ = ["CO_USE_DEPTH", "CO_USE_MAX_TOOLS", "CoUse"]

#: How far past the top ``k`` a route with co-use looks for the tools to lift: a tool used
#: together with the best one is near the request too, and ranks within a few dozen.
CO_USE_DEPTH = 20
#: A request recorded with more tools than this counts for no pair.
CO_USE_MAX_TOOLS = 8


class CoUse:
    """Requests per tool and requests per pair of tools, kept as rows come and go.

    ``name`` gives a row's tool name (called only for requests of several tools).
    """

    def __init__(self, name: Callable[[int], str]) -> None:
        self._name = name
        self._requests: dict[bytes, list[int]] = {}
        self._uses: Counter[int] = Counter()
        self._partners: dict[int, Counter[int]] = {}

    def __bool__(self) -> bool:
        """Whether any two tools were recorded for one request."""
        return bool(self._partners)

    def add(self, key: bytes, row: int) -> None:
        """Count that the request of ``key`` was served by the tool of ``row``."""
        rows = self._requests.setdefault(key, [])
        if len(rows) < CO_USE_MAX_TOOLS:
            self._link(row, rows, 1)
        elif len(rows) == CO_USE_MAX_TOOLS:  # one tool too many: its pairs stop counting
            self._pairs(rows, -1)
        rows.append(row)
        self._uses[row] += 1

    def remove(self, key: bytes, row: int) -> None:
        """Undo :meth:`add` for ``key`` and ``row`` (evicted or forgotten)."""
        rows = self._requests.get(key)
        if rows is None or row not in rows:
            return
        rows.remove(row)
        if len(rows) < CO_USE_MAX_TOOLS:
            self._link(row, rows, -1)
        elif len(rows) == CO_USE_MAX_TOOLS:  # back under the bound: its pairs count again
            self._pairs(rows, 1)
        if not rows:
            del self._requests[key]
        self._uses[row] -= 1
        if not self._uses[row]:
            del self._uses[row]

    def lifts(self, anchors: Iterable[int], *, weight: float, least: int) -> dict[int, float]:
        """Each tool's lift from being used with one of ``anchors`` for at least ``least``
        requests: ``weight`` times the largest share of an anchor's requests it served too."""
        out: dict[int, float] = {}
        for anchor in anchors:
            for row, both in self._partners.get(anchor, {}).items():
                if both >= least:
                    out[row] = max(out.get(row, 0.0), weight * both / self._uses[anchor])
        return out

    def _pairs(self, rows: list[int], step: int) -> None:
        for at, row in enumerate(rows):
            self._link(row, rows[:at], step)

    def _link(self, row: int, others: Iterable[int], step: int) -> None:
        """Add ``step`` to the pairs of ``row`` with each of ``others`` of another name."""
        for other in others:
            if self._name(other) == self._name(row):
                continue
            for a, b in ((row, other), (other, row)):
                partners = self._partners.setdefault(a, Counter())
                partners[b] += step
                if not partners[b]:
                    del partners[b]
                    if not partners:
                        del self._partners[a]

"""Learning from use: a bounded memory of the requests each tool served, and its lift.

An agent's traffic says which tools served which requests: the calls that passed ``verify``,
the tools a ``tool_search`` found that the route missed, what a caller reports through
``Router.feedback``. Intents repeat, so a router that remembers lifts a tool for requests like
those it served before. The memory is one :class:`LearnedMemory` per catalog version (and
model), stored in a :mod:`~toolgate.routing.learned_store`.

What it keeps and how far it trusts it (:class:`LearnConfig`):

- query vectors and a hash of the text (keyed with the store's salt, if it has one), never
  the text; a repeat of one query for one tool adds to that row's weight, up to
  ``max_weight``;
- at most ``rows_per_tool`` rows per tool, the oldest evicted first, and ``max_rows`` in all,
  evicted from the tools holding the most first (oldest of those first), so that a flood
  spread over many tools evicts its own rows before the lessons of a tool with few;
- the rows of at most ``max_versions`` catalog versions in the store (every app and model
  sharing it counted together): when a memory opens, the least recently used versions past
  that are deleted, never one in use (held by a memory of this process, or used by another
  process within ``version_lease_s``; see :mod:`~toolgate.routing.learned_store`);
- every ``reload_s`` a memory that routes reads its rows from the store again, in a thread:
  what other processes sharing the store learned lifts in this one too, what they forgot
  stops lifting, and their rows count against the bounds above;
- at most ``rate_per_tool`` feedback events per tool per minute (a token bucket): a caller
  flooding one tool fills its rows with the same few neighbourhoods, and no more;
- at route time the ``neighbours`` stored queries nearest the new one (cosine at least
  ``floor``) vote for their tools; a tool's lift grows with its vote and with how close its
  nearest stored query is, and never passes ``weight``. A flood for one tool lifts it only for
  queries near those flooded, by at most ``weight``: it cannot move unrelated routes;
- tools recorded for one request (its text hashed to one key) were used together: when one of
  the route's best ``co_use_anchors`` tools was used with another for at least ``co_use_min``
  distinct requests, that other tool gains ``co_use_weight`` times the share of the anchor's
  requests it served too. Co-use carries across phrasings, which the nearest stored queries
  do not ("find the cheapest flight" and "look up fares" both need the booking tool after
  the search); it lifts only tools the ranking already holds among its best
  ``k + CO_USE_DEPTH`` (:mod:`toolgate.routing.co_use`), by at most ``co_use_weight``.

The lift is added to the fused score of the tool's row (min-max fusion puts the best tool at
about 1), so a tool the ranking placed outside the top ``k`` may enter it.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from toolgate import _toolgate
from toolgate.arguments import check_count, check_instance, finite_number, shown, tool_list
from toolgate.embedding.normalise import normalised
from toolgate.errors import InvalidInputError, ToolgateError
from toolgate.forks import BoundToProcess, fork_safe_lock
from toolgate.routing.co_use import CoUse
from toolgate.routing.learned_bounds import rows_kept
from toolgate.routing.learned_store import LearnedStore, StoreWarning, open_store
from toolgate.routing.periodic import Periodic
from toolgate.unicode import lone_surrogate_at

__all__ = [
    "LearnConfig",
    "LearnedMemory",
    "Learning",
    "LiftedRow",
    "co_used",
    "lifted",
    "relabel_copies",
]


@dataclass(frozen=True)
class LearnConfig:
    """Bounds of a learned memory and the shape of its lift (see the module)."""

    rows_per_tool: int = 32
    max_rows: int = 20_000
    max_weight: float = 3.0
    rate_per_tool: float = 60.0
    neighbours: int = 8
    floor: float = 0.55
    weight: float = 0.6
    saturation: float = 1.0
    co_use_weight: float = 0.5
    co_use_anchors: int = 2
    co_use_min: int = 2
    max_versions: int = 32
    version_lease_s: float = 86_400.0
    reload_s: float = 60.0

    def __post_init__(self) -> None:
        for name in (
            "rows_per_tool", "max_rows", "neighbours", "co_use_anchors", "co_use_min",
            "max_versions",
        ):  # fmt: skip
            check_count(name, getattr(self, name), minimum=1)
        for name in (
            "max_weight", "rate_per_tool", "weight", "saturation", "version_lease_s", "reload_s",
        ):  # fmt: skip
            value = getattr(self, name)
            if not (finite_number(value) and value > 0):
                raise InvalidInputError(f"{name} must be a positive number, got {shown(value)}")
        value = self.co_use_weight
        if not (finite_number(value) and value >= 0):
            raise InvalidInputError(f"co_use_weight must be a number >= 0, got {shown(value)}")
        if not (finite_number(self.floor) and -1.0 <= self.floor < 1.0):
            raise InvalidInputError(f"floor must be in [-1, 1), got {shown(self.floor)}")


class LearnedMemory(BoundToProcess):
    """The learned rows of one catalog version: what feedback stored, and the lift it gives.

    ``ids`` are the catalog's tool ids in row order, ``servers`` and ``names`` load each
    one's server and tool name; ``scope`` names the model and catalog version in the
    ``store``. One memory may be shared by threads: routes read it while feedback writes.

    Writers (:meth:`learn`, :meth:`forget`, :meth:`reload`) take turns, and do their store
    I/O, which may wait on another process's lock up to the busy timeout, holding only the
    writers' lock: routes take the memory's own lock, held just while a writer changes
    the memory after its store write went through (so a failed write changes neither).
    """

    _elsewhere = "call router.learn(store) on the router of the other process"

    def __init__(
        self,
        store: LearnedStore,
        scope: str,
        ids: Sequence[str],
        servers: Callable[[], Sequence[str]],
        names: Callable[[], Sequence[str]],
        dim: int,
        config: LearnConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.scope = scope
        check_instance("config", config, LearnConfig, optional=True)
        self.config = LearnConfig() if config is None else config
        self._ids = tuple(ids)
        self._row_of = {tool_id: row for row, tool_id in enumerate(self._ids)}
        self._servers = servers
        # Not a method: the CoUse holding a bound method of this memory would be a cycle.
        self._name = _row_names(names)
        self._clock = clock
        # Writers take turns under _writing; _lock guards what routes read (the co-use
        # counts, the rows as one swap), held only for changes in memory, never store I/O.
        self._writing = fork_safe_lock()
        self._lock = fork_safe_lock()
        self._rows = _toolgate.LearnedRows(dim)
        self._seqs: list[int] = []
        self._keys: list[tuple[bytes, int]] = []
        self._co_use = CoUse(self._name)
        self._buckets: dict[int, tuple[float, float]] = {}
        #: Feedback events refused by the rate cap since this memory was made.
        self.refused = 0
        # Routes read the store again every reload_s, in a thread.
        self._freshening = Periodic(
            self._freshen,
            "toolgate-learned-reload",
            clock() + self.config.reload_s,
            retry_s=self.config.reload_s,
        )
        # Each catalog version opened is a new scope: the store keeps the most recent.
        store.use(
            scope, self, keep=self.config.max_versions, lease_s=self.config.version_lease_s,
            now=time.time(),
        )  # fmt: skip
        self.reload()

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"LearnedMemory({len(self)} rows, {self.store!r})"

    def reload(self) -> None:
        """Read this scope's rows from the store again (what other replicas learned too)."""
        with self._writing:
            self._reload()

    def _reload(self) -> None:
        loaded = self.store.load(self.scope, dim=self._rows.dim)
        stored = [row for row in loaded if row.tool in self._row_of]
        rows = _toolgate.LearnedRows(self._rows.dim)
        if stored:
            rows.push(
                normalised(np.stack([row.vector for row in stored])),
                np.asarray([self._row_of[row.tool] for row in stored], dtype=np.uint32),
                np.asarray([row.weight for row in stored], dtype=np.float32),
            )
        keys = [(row.key, self._row_of[row.tool]) for row in stored]
        co_use = CoUse(self._name)  # counted before the lock: 20-35 ms at 20,000 rows
        for key, row in keys:
            co_use.add(key, row)
        with self._lock:
            self._rows = rows
            self._seqs = [row.seq for row in stored]
            self._keys = keys
            self._co_use = co_use

    def keep_fresh(self, now: float) -> threading.Thread | None:
        """Reads the store again once ``reload_s`` passed (``now``: this memory's clock), so
        that what other processes learned lifts here too and what they forgot stops lifting;
        their rows count against this memory's bounds. Called on every route, it compares two
        times; the read runs in a thread of its own, returned (``None``: none due), best
        effort: a store that fails is tried again ``reload_s`` later."""
        return self._freshening.start_if_due(now)

    def _freshen(self, now: float) -> float:
        try:
            with self._writing:
                self._reload()
                self._evict()
        except ToolgateError:
            pass  # the memory stays as it was; routes go on with it
        return now + self.config.reload_s

    def knows(self, tool: str) -> bool:
        """Whether ``tool`` (an id) is a tool of this catalog version."""
        return tool in self._row_of

    def row(self, tool: str) -> int:
        """The index row of the tool ``tool`` (an id), or an error naming it."""
        row = self._row_of.get(tool)
        if row is None:
            raise InvalidInputError(f"no tool {tool!r} in this router's catalog")
        return row

    def learn(self, vector: np.ndarray, rows: Iterable[int], key: bytes) -> int:
        """Record that the query of ``vector`` (its text hashed to ``key``) was served by the
        tools of ``rows``; returns how many of them were recorded (the rest hit the rate cap)."""
        vector = normalised(np.asarray(vector).reshape(1, -1))
        recorded = 0
        with self._writing:
            for row in dict.fromkeys(rows):
                if not self._take_token(row):
                    self.refused += 1
                    continue
                self._add(vector, row, key)
                recorded += 1
            self._evict()
        return recorded

    def _take_token(self, row: int) -> bool:
        """One token from ``row``'s bucket (``rate_per_tool`` a minute, as many at once)."""
        rate = self.config.rate_per_tool
        now = self._clock()
        tokens, then = self._buckets.get(row, (rate, now))
        tokens = min(rate, tokens + (now - then) * rate / 60.0)
        if tokens < 1.0:
            self._buckets[row] = (tokens, now)
            return False
        self._buckets[row] = (tokens - 1.0, now)
        return True

    def _add(self, vector: np.ndarray, row: int, key: bytes) -> None:
        """Store the query of ``vector`` for ``row``: more weight on its row if it has one."""
        try:
            at = self._keys.index((key, row))
        except ValueError:
            self._insert(vector, row, key)
            return
        weight = min(self.config.max_weight, float(self._rows.weights[at]) + 1.0)
        if self.store.set_weight(self._seqs[at], weight):
            with self._lock:
                self._rows.set_weight(at, weight)
            return
        # Another replica's forget deleted the row: drop the stale copy, store it anew.
        keep = np.ones(len(self._seqs), dtype=bool)
        keep[at] = False
        self._drop(keep)
        self._insert(vector, row, key)

    def _insert(self, vector: np.ndarray, row: int, key: bytes) -> None:
        """Store the query of ``vector`` for ``row`` as a new row of weight 1."""
        tool = self._ids[row]
        seq = self.store.insert(self.scope, tool, self._servers()[row], key, vector[0], time.time())
        with self._lock:
            self._rows.push(vector, np.asarray([row], np.uint32), np.ones(1, np.float32))
            self._seqs.append(seq)
            self._keys.append((key, row))
            self._co_use.add(key, row)

    def _evict(self) -> None:
        """Drop the oldest rows past ``rows_per_tool`` for a tool; past ``max_rows`` in all,
        those of the tools holding the most first (:mod:`~toolgate.routing.learned_bounds`)."""
        keep = rows_kept(self._rows.tools, self.config.rows_per_tool, self.config.max_rows)
        if not keep.all():
            self._drop(keep)

    def _drop(self, keep: np.ndarray) -> None:
        """Delete the rows not to ``keep`` from the store, then from the memory."""
        self.store.delete(seq for seq, kept in zip(self._seqs, keep, strict=True) if not kept)
        with self._lock:
            self._rows.retain(keep)
            self._seqs = [seq for seq, kept in zip(self._seqs, keep, strict=True) if kept]
            for (key, row), kept in zip(self._keys, keep, strict=True):
                if not kept:
                    self._co_use.remove(key, row)
            self._keys = [key for key, kept in zip(self._keys, keep, strict=True) if kept]

    def forget(self, *, tool: str | None = None, server: str | None = None) -> int:
        """Remove what was learned for the tool ``tool`` (an id) or every tool of ``server``,
        from the store in every catalog version; returns the rows this memory dropped."""
        _check_forget_target(tool, server)
        servers = self._servers()
        with self._writing:
            tools = self._rows.tools
            if tool is not None:
                keep = np.asarray([self._ids[t] != tool for t in tools], dtype=bool)
            else:
                keep = np.asarray([servers[t] != server for t in tools], dtype=bool)
            self.store.forget(tool=tool, server=server)
            dropped = int((~keep).sum())
            if dropped:
                self._drop(keep)
        return dropped

    def lift(self, vector: np.ndarray) -> dict[int, float]:
        """The lift of each tool (by row) for the query of ``vector``: nothing when no stored
        query is near it."""
        # A memory that routes and learns nothing keeps its version: its marks are renewed.
        self.store.keep_alive(time.time())
        self.keep_fresh(self._clock())
        rows = self._rows
        if not len(rows):
            return {}
        config = self.config
        tools, votes, best = rows.votes(
            np.ascontiguousarray(vector, dtype=np.float32), config.neighbours, config.floor
        )
        closeness = np.clip((best - config.floor) / (1.0 - config.floor), 0.0, 1.0)
        amount = np.minimum(votes / config.saturation, 1.0)
        lifts = config.weight * closeness * amount
        return {int(t): float(v) for t, v in zip(tools, lifts, strict=True) if v > 0}

    def has_co_use(self) -> bool:
        """Whether any two tools were recorded for one request."""
        with self._lock:
            return bool(self._co_use)

    def co_use_lifts(self, anchors: Iterable[int]) -> dict[int, float]:
        """The lift of each tool used together with one of ``anchors`` (rows; see the
        module and :meth:`CoUse.lifts`)."""
        config = self.config
        with self._lock:
            return self._co_use.lifts(anchors, weight=config.co_use_weight, least=config.co_use_min)


def _row_names(names: Callable[[], Sequence[str]]) -> Callable[[int], str]:
    """A row's tool name, every row's read from ``names`` on first need."""
    read: list[Sequence[str]] = []

    def name(row: int) -> str:
        if not read:
            read.append(tuple(names()))
        return read[0][row]

    return name


class Learning:
    """A router's learning from use: its memory (``None`` until :meth:`start`), and whether a
    call that passes ``verify`` counts as used for its route's query.

    ``scope`` names the model and catalog version, ``ids`` the rows' tools, ``servers`` and
    ``names`` (loaders: the catalog may not be read yet) each row's server and tool name,
    ``dim`` the vectors' width.
    """

    def __init__(
        self,
        scope: str,
        ids: Sequence[str],
        servers: Callable[[], Sequence[str]],
        names: Callable[[], Sequence[str]],
        dim: int,
    ) -> None:
        self._scope = scope
        self._ids = ids
        self._servers = servers
        self._names = names
        self._dim = dim
        self.memory: LearnedMemory | None = None
        self.from_verify = False
        # Starts take turns: threads racing the first feedback must share one memory.
        self._starting = fork_safe_lock()
        # The store, bounds and from_verify to start with, followed while the store failed:
        # the next start is tried there, not in the default store.
        self._followed: _Followed | None = None

    def start(
        self,
        store: LearnedStore | str | os.PathLike[str] | None,
        *,
        config: LearnConfig | None,
        from_verify: bool,
    ) -> LearnedMemory:
        """Learn into ``store`` (see ``Router.learn``) from now on; returns the memory."""
        with self._starting:
            return self._start(store, config=config, from_verify=from_verify)

    def _start(
        self,
        store: LearnedStore | str | os.PathLike[str] | None,
        *,
        config: LearnConfig | None,
        from_verify: bool,
    ) -> LearnedMemory:
        memory = LearnedMemory(
            open_store(store), self._scope, self._ids, self._servers, self._names, self._dim,
            config,
        )  # fmt: skip
        self.memory = memory
        self.from_verify = from_verify
        self._followed = None
        return memory

    def _started(self) -> LearnedMemory:
        """The memory, started in the default store by the first caller that needs one: the
        threads that race it share that one (each starting its own, all but the last were
        dropped with what they learned)."""
        with self._starting:
            memory = self.memory
            if memory is None:
                store, config, from_verify = self._followed or _Followed(None, None, False)
                memory = self._start(store, config=config, from_verify=from_verify)
            return memory

    def follow(self, old: Learning) -> None:
        """Learn as ``old`` does (its store, bounds and ``from_verify``), when it learns: the
        same store, read for this catalog version's rows. Best effort: a store that fails
        (its database down) fails no refresh; the router routes without its memory, with a
        :class:`StoreWarning`, and its next feedback tries that store again."""
        memory = old.memory
        followed = old._followed
        if memory is not None:
            followed = _Followed(memory.store, memory.config, old.from_verify)
        if followed is None:
            return
        try:
            self.start(followed.store, config=followed.config, from_verify=followed.from_verify)
        except ToolgateError as exc:  # not only StoreError: rows the index refuses, too
            self._followed = followed
            warnings.warn(
                f"the new catalog version routes without what was learned: {exc}; "
                f"its next feedback tries the learned store again",
                StoreWarning,
                stacklevel=3,
            )

    def record(
        self,
        query: str,
        used: Iterable[str],
        missed: Iterable[str],
        embed: Callable[[str], np.ndarray],
    ) -> int:
        """Store which tools served ``query`` (see ``Router.feedback``), into the default
        store if learning was not started; returns how many were recorded."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("feedback needs the query's text")
        tools = [*tool_list(used, "used"), *tool_list(missed, "missed")]
        memory = self.memory
        if memory is None:
            memory = self._started()
        rows = [memory.row(tool) for tool in tools]
        if not rows:
            return 0
        return memory.learn(embed(query), rows, memory.store.key(query))

    def verified(self, query: str, tool: str | None, embed: Callable[[str], np.ndarray]) -> None:
        """A call to ``tool`` passed ``verify`` against the route of the text ``query`` ("":
        no text route): it counts as used for that query when learning ``from_verify``. A
        tool of no catalog row (the ``tool_search`` tool a promotion sends) teaches nothing."""
        memory = self.memory
        if self.from_verify and memory is not None and query and tool and memory.knows(tool):
            self.record(query, [tool], (), embed)

    def forget(self, *, tool: str | None, server: str | None) -> int:
        """Forget one tool's or one server's rows (see ``Router.forget``); in the store this
        router follows even when its memory is not read yet (the store failed at refresh)."""
        _check_forget_target(tool, server)
        memory = self.memory
        if memory is None and self._followed is not None:
            # Returning 0 here left every version's rows in that store, lifting the tool in
            # every replica that reads them.
            memory = self._started()
        if memory is None:
            return 0
        return memory.forget(tool=tool, server=server)


class _Followed(NamedTuple):
    """What a router learns into, as :meth:`Learning.start` takes it."""

    store: LearnedStore | str | os.PathLike[str] | None
    config: LearnConfig | None
    from_verify: bool


def _check_forget_target(tool: object, server: object) -> None:
    """An error unless exactly one of ``tool`` (an id) and ``server`` is given, as a
    non-empty string: anything else would match no row and forget nothing, silently."""
    if (tool is None) == (server is None):
        raise InvalidInputError("forget takes one of tool= or server=")
    name, value = ("tool", tool) if tool is not None else ("server", server)
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"forget's {name}= must be a non-empty string, got {shown(value)}")
    # No id or server name holds one (the catalog refuses them), and the store's encoder
    # raises a bare UnicodeEncodeError on it.
    if (bad := lone_surrogate_at(value)) is not None:
        raise InvalidInputError(f"forget's {name}= holds a lone surrogate at character {bad}")


class LiftedRow(NamedTuple):
    """A ranked row whose fused score carries its learned lift (read as a core ``RoutedRow``)."""

    row: int
    fused: float
    dense: float
    bm25: float
    copy_of: int | None = None


def lifted(
    outcome: _toolgate.RouteOutcome,
    forced: set[int],
    lifts: dict[int, float],
    *,
    k: int,
    floor: float | None,
    rankable: np.ndarray | None,
) -> tuple[list[_toolgate.RoutedRow], list[_toolgate.RoutedRow], bool]:
    """The forced rows of ``outcome`` that are truly ``forced``, its ranked rows merged with
    the learned ones (the rest of its forced rows, passed to the core to learn their fused
    scores) by fused score plus lift, best ``k`` first, and whether any learned row is in.
    A learned row the gate or the lists kept out (the core returns none such), under the
    cosine ``floor`` or outside ``rankable`` stays out, as it would from the ranking."""
    allowed = None if rankable is None else set(rankable.tolist())
    kept = [r for r in outcome.forced if r.row in forced]
    learned = [
        r
        for r in outcome.forced
        if r.row not in forced
        and (floor is None or r.dense >= floor)
        and (allowed is None or r.row in allowed)
    ]
    # A LiftedRow reads as a core RoutedRow (the same fields), which is all that follows uses.
    candidates: list[Any] = [
        LiftedRow(r.row, r.fused + lifts[r.row], r.dense, r.bm25) for r in learned
    ]
    candidates += outcome.ranked
    candidates.sort(key=lambda r: -r.fused)
    return kept, candidates[:k], bool(learned)


def co_used(
    ranked: Sequence[_toolgate.RoutedRow], memory: LearnedMemory, *, k: int
) -> tuple[list[_toolgate.RoutedRow], list[int]]:
    """The best ``k`` of ``ranked`` once each tool used together with one of the best
    ``co_use_anchors`` gained its lift (:meth:`CoUse.lifts`), and the rows the lift brought
    into the top ``k``."""
    config = memory.config
    anchors = [r.row for r in ranked[: config.co_use_anchors]]
    lifts = memory.co_use_lifts(anchors)
    if not lifts:
        return list(ranked[:k]), []
    before = {r.row for r in ranked[:k]}
    rows: list[Any] = [
        LiftedRow(r.row, r.fused + lifts[r.row], r.dense, r.bm25, r.copy_of)
        if r.row in lifts
        else r
        for r in ranked
    ]
    rows.sort(key=lambda r: -r.fused)  # stable: ties keep the ranking's order
    rows = relabel_copies(rows)
    return rows[:k], [r.row for r in rows[:k] if r.row not in before]


def relabel_copies(rows: list[Any]) -> list[Any]:
    """``rows`` (best first, re-sorted after a lift) with each near copy that now sits above
    the tool it copies turned around: it is the original now, and that tool its copy."""
    at = {r.row: i for i, r in enumerate(rows)}
    for i, r in enumerate(rows):
        original = r.copy_of
        if original is not None and at.get(original, -1) > i:
            rows[i] = LiftedRow(r.row, r.fused, r.dense, r.bm25)
            below = rows[at[original]]
            if below.copy_of is None:  # core rows are frozen: a new row carries the label
                rows[at[original]] = LiftedRow(
                    below.row, below.fused, below.dense, below.bm25, r.row
                )
    return rows

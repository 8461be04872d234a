"""Structured events for every route, promote and verify, pluggable sinks, and usage statistics.

Events record what a budget audit needs (the Tool Attention paper's list): turn id, a sha256 of
the query (never the raw query unless asked), candidates and scores, what state gated out and
why, the active set, tokens per phase, the budget decision, and latency. A :class:`Telemetry`
hub fans them out to sinks: :class:`JsonLogSink` (one JSON line per event through
:mod:`logging`), :class:`JsonFileSink` (one JSON line per event appended to a file),
:class:`MemorySink` (tests, notebooks), :class:`OpenTelemetrySink` (a span per event, when
``opentelemetry`` is installed) and :class:`UsageStats`, which keeps the evidence for pruning:
tools loaded, routed and called, routing misses, and tools never routed or called.

>>> from toolgate.telemetry import Telemetry
>>> stats = UsageStats(["github/get_me", "github/create_issue"])
>>> hub = Telemetry([stats])
>>> hub.emit(VerifyEvent(turn_id="t1", name="get_me", tool_id="github/get_me", ok=True))
>>> stats.never_called()
['github/create_issue']
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from toolgate.arguments import file_path, finite_number, shown, tool_list
from toolgate.errors import InvalidInputError
from toolgate.forks import CopiedUnderLock, fork_safe_lock
from toolgate.json_limits import JsonLimitError, not_utf8_problem, open_regular
from toolgate.promotion.discovery import TOOL_SEARCH_ID
from toolgate.telemetry.events import (
    EVENT_TYPES,
    Event,
    PromoteEvent,
    RouteEvent,
    VerifyEvent,
    event_from_dict,
)

_log = logging.getLogger("toolgate.telemetry")

__all__ = ["RECENT_TURNS", "UsageStats"]

#: How many of the latest turn ids :class:`UsageStats` remembers to count each turn once. A
#: turn's events (its route, promote and calls) come within moments of each other, so the
#: count is exact unless this many other turns begin in between; remembering every id would
#: grow without bound in a long-lived process or over a large log.
RECENT_TURNS = 1 << 16

#: Distinct made-up tool names ``unknown_tools`` counts one by one; later new ones are
#: counted together under :data:`OTHER_NAMES`. The model (or a prompt injected into it) makes
#: up names without end, and each would be a counter of its own for the process's life.
MAX_UNKNOWN_NAMES = 1024
OTHER_NAMES = "(other names)"


class UsageStats(CopiedUnderLock):
    """Per-tool usage gathered from events: a sink, and the Pruner's evidence.

    ``tool_ids`` is the registry (every tool that could be used), so tools that never appear in
    any event still show up as never routed / never called.

    The ``tool_search`` tool a digest pool sends (id
    :data:`~toolgate.promotion.discovery.TOOL_SEARCH_ID`)
    is toolgate's, not the catalog's: it is never among the tools, never routed, and never a
    prune candidate. Its calls are counted apart instead: ``search_calls`` (accepted) and
    ``search_invalid`` (rejected for their arguments). Each accepted one is the model asking
    for tools the active set lacked, so a high count next to ``turns`` says routing or the
    budget leaves out too much.

    ``turns`` counts distinct turn ids, remembering the latest :data:`RECENT_TURNS` of them
    (memory stays bounded): an id seen again only after that many other turns counts anew.

    >>> stats = UsageStats(["github/get_me"])
    >>> stats.emit(VerifyEvent(name="tool_search", tool_id=TOOL_SEARCH_ID, ok=True))
    >>> stats.search_calls, stats.never_called()
    (1, ['github/get_me'])
    """

    def __init__(self, tool_ids: Iterable[str] = ()) -> None:
        self._lock = fork_safe_lock()
        listed = tool_list(tool_ids, "tool_ids")  # a bare string is no list of ids
        self.registry: list[str] = list(dict.fromkeys(_catalog_ids(listed)))
        self.turns = 0
        # Digests of the latest turn ids, oldest first: fixed-size keys, whatever an id's length.
        self._recent_turns: OrderedDict[bytes, None] = OrderedDict()
        self._turn_window = RECENT_TURNS
        self.routed: Counter[str] = Counter()
        self.loaded: Counter[str] = Counter()
        self.called: Counter[str] = Counter()
        self.misses: Counter[str] = Counter()
        self.invalid: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.search_calls = 0
        self.search_invalid = 0
        self.last_routed: dict[str, float] = {}
        self.last_called: dict[str, float] = {}
        self.last_loaded: dict[str, float] = {}

    @classmethod
    def from_log(cls, path: str | os.PathLike[str], registry: Any = ()) -> UsageStats:
        """Replay a :class:`JsonLogSink` log (one JSON event per line, any prefix before it).

        ``registry`` is a catalog (anything with ``ids``) or an iterable of tool ids. The log
        is read one line at a time, so its size does not matter. Lines that hold no toolgate
        event, such as another program's JSON with a ``kind`` of its own, are ignored; an
        event line that does not parse is an :class:`InvalidInputError` naming the line. A
        last line with no newline that does not parse is a log still being written: it is
        skipped, with a warning on the ``toolgate.telemetry`` logger.
        """
        ids = getattr(registry, "ids", registry)
        stats = cls(ids)
        for event in _read_log(file_path("path", path)):
            stats.emit(event)
        return stats

    def emit(self, event: Event) -> None:
        """Count one event."""
        with self._lock:
            if event.turn_id:
                self._count_turn(event.turn_id)
            if isinstance(event, RouteEvent):
                active = _catalog_ids(event.active)
                self.routed.update(active)
                _keep_latest(self.last_routed, active, event.timestamp)
            elif isinstance(event, PromoteEvent):
                active = _catalog_ids(event.active)
                self.loaded.update(active)
                _keep_latest(self.last_loaded, active, event.timestamp)
            elif isinstance(event, VerifyEvent):
                self._count_call(event)

    def _count_turn(self, turn_id: str) -> None:
        """Count ``turn_id`` unless it is among the latest :data:`RECENT_TURNS` ids seen."""
        # surrogatepass: a log's JSON may hold a lone surrogate, which plain UTF-8 refuses.
        key = hashlib.blake2b(turn_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if key in self._recent_turns:
            self._recent_turns.move_to_end(key)
            return
        self.turns += 1
        self._recent_turns[key] = None
        if len(self._recent_turns) > self._turn_window:
            self._recent_turns.popitem(last=False)

    def _count_call(self, event: VerifyEvent) -> None:
        if event.tool_id == TOOL_SEARCH_ID:
            # Counted in the per-tool counters, the search tool would join the known tools
            # through ``called`` and be offered for pruning as never routed: it never is,
            # since the router only routes catalog tools.
            if event.ok:
                self.search_calls += 1
            elif event.error == "invalid_arguments":
                self.search_invalid += 1
        elif event.ok and event.tool_id:
            self.called[event.tool_id] += 1
            _keep_latest(self.last_called, (event.tool_id,), event.timestamp)
        elif event.error == "tool_not_available" and event.tool_id:
            self.misses[event.tool_id] += 1
        elif event.error == "invalid_arguments" and event.tool_id:
            self.invalid[event.tool_id] += 1
        elif event.error == "unknown_tool":
            known = event.name in self.unknown or len(self.unknown) < MAX_UNKNOWN_NAMES
            self.unknown[event.name if known else OTHER_NAMES] += 1

    def _known(self) -> list[str]:
        # A set: the registry is a list, and testing each tool seen against it cost
        # seconds for a large catalog, with the lock every emit waits for held.
        registered = set(self.registry)
        seen = dict.fromkeys((*self.routed, *self.loaded, *self.called))
        return self.registry + [t for t in seen if t not in registered]

    def never_called(self) -> list[str]:
        """Registry tools with no successful call, in registry order."""
        with self._lock:
            return [t for t in self._known() if not self.called[t]]

    def never_routed(self) -> list[str]:
        """Registry tools never in an active set, in registry order."""
        with self._lock:
            return [t for t in self._known() if not self.routed[t]]

    def pruning_report(
        self, *, window_s: float | None = None, now: float | None = None
    ) -> dict[str, Any]:
        """Prune candidates: tools not routed / not called within the last ``window_s`` seconds.

        ``window_s=None`` looks at everything seen. ``loaded_not_called`` are tools whose schemas
        were sent but never used: pure token cost. ``routing_misses`` counts every miss seen,
        whatever the window: misses are counted, not timed.
        """
        if window_s is not None and not (finite_number(window_s) and window_s > 0):
            # NaN compares false with every time: every tool would pass for idle.
            raise InvalidInputError(
                f"window_s must be a positive number of seconds or None, got {shown(window_s)}"
            )
        if now is not None and not finite_number(now):
            raise InvalidInputError(
                f"now must be a time in seconds since the epoch or None, got {shown(now)}"
            )
        now = time.time() if now is None else now
        since = float("-inf") if window_s is None else now - window_s

        def idle(last: dict[str, float], tool_id: str) -> bool:
            return tool_id not in last or last[tool_id] < since

        with self._lock:
            known = self._known()
            not_routed = [t for t in known if idle(self.last_routed, t)]
            not_called = [t for t in known if idle(self.last_called, t)]
            loaded_idle = [t for t in not_called if not idle(self.last_loaded, t)]
            return {
                "window_s": window_s,
                "tools": len(known),
                "not_routed": not_routed,
                "not_called": not_called,
                "loaded_not_called": loaded_idle,
                "routing_misses": dict(self.misses),
            }

    def to_dict(self) -> dict[str, Any]:
        """Every counter, JSON-ready."""
        with self._lock:
            known = self._known()
            return {
                "turns": self.turns,
                "tools": len(known),
                "routed": dict(self.routed),
                "loaded": dict(self.loaded),
                "called": dict(self.called),
                "routing_misses": dict(self.misses),
                "invalid_arguments": dict(self.invalid),
                "unknown_tools": dict(self.unknown),
                "search_calls": self.search_calls,
                "search_invalid_arguments": self.search_invalid,
                "never_routed": [t for t in known if not self.routed[t]],
                "never_called": [t for t in known if not self.called[t]],
            }

    def summary(self, top: int = 10) -> dict[str, Sequence[tuple[str, int]]]:
        """The most routed, loaded, called and missed tools."""
        with self._lock:
            return {
                "routed": self.routed.most_common(top),
                "loaded": self.loaded.most_common(top),
                "called": self.called.most_common(top),
                "routing_misses": self.misses.most_common(top),
            }


def _catalog_ids(tool_ids: Iterable[str]) -> tuple[str, ...]:
    """``tool_ids`` without the search tool's id.

    A promotion already leaves it out of its active ids, but events built by hand or read from
    another version's log may carry it, and it must not pass for a catalog tool.
    """
    return tuple(t for t in tool_ids if t != TOOL_SEARCH_ID)


def _keep_latest(last: dict[str, float], tool_ids: Iterable[str], timestamp: float) -> None:
    """Record ``timestamp`` for each tool unless a later one is already there.

    Events do not arrive in time order: logs merged from several processes, or sinks fed
    from several threads, so the last event seen is not always the latest.
    """
    for tool_id in tool_ids:
        if timestamp > last.get(tool_id, float("-inf")):
            last[tool_id] = timestamp


def _read_log(path: Path) -> Iterator[Event]:
    """The toolgate events in the log at ``path``, read one line at a time.

    Only a regular file: opening a pipe blocks until something writes to it, and a device
    such as /dev/zero is one line without end. A regular file still being appended to is
    read up to where its writer is.
    """
    try:
        with open_regular(path) as log:
            for number, raw in enumerate(log, start=1):
                where = f"{path}, line {number}"
                not_text = not_utf8_problem(path, raw) if number == 1 else None
                if not_text is not None:  # else a log of no event: a report of nothing
                    raise InvalidInputError(f"cannot read telemetry log: {not_text}")
                try:
                    found = _json_in_line(raw, where)
                except InvalidInputError as exc:
                    # Only the last line can lack its newline, and then the writer may still
                    # be on it: a live log is worth reading up to there.
                    if raw.endswith(b"\n"):
                        raise
                    _log.warning("%s; skipped: the last line, still being written", exc)
                    continue
                data = None if found is None else _toolgate_event(*found)
                if data is not None:
                    yield _event_at(data, where)
    except (OSError, JsonLimitError) as exc:
        raise InvalidInputError(f"cannot read telemetry log {path}: {exc}") from exc


def _json_in_line(raw: bytes, where: str) -> tuple[str, dict[str, Any]] | None:
    """The text before a log line's JSON object and the object (text after it, as a plain
    log formatter writes, is left); None if it has none.

    Raises :class:`InvalidInputError` naming ``where`` for a line that is toolgate's by its
    words and is not UTF-8 or whose object does not parse (such a line of another program's
    is another program's business).
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A log shared with other programs may hold their lines in another encoding: those
        # are theirs to mind, as their JSON that does not parse is.
        if not _names_toolgate(raw.decode("utf-8", "replace")):
            return None
        raise InvalidInputError(f"{where}: not UTF-8 (byte {raw[exc.start]:#04x})") from None
    start = line.find("{")
    if start < 0 or '"kind"' not in line:
        return None
    try:
        data, _end = json.JSONDecoder().raw_decode(line, start)
    except (RecursionError, ValueError) as exc:
        # JSONDecodeError, and plain ValueError for an integer too long to convert.
        if not _names_toolgate(line):
            return None
        why = "JSON nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidInputError(f"{where}: not a toolgate event ({why})") from None
    return line[:start], data


def _names_toolgate(line: str) -> bool:
    """Whether ``line`` reads as toolgate's: it names toolgate, or one of its event kinds."""
    return "toolgate" in line or any(f'"{kind}"' in line for kind in EVENT_TYPES)


def _toolgate_event(prefix: str, data: dict[str, Any]) -> Mapping[str, Any] | None:
    """The event dict a parsed log line holds, or None when the line is another program's.

    Other programs may log JSON with a ``kind`` of their own into the same file, so a line is
    toolgate's when its ``kind`` is a toolgate event kind, or when it carries a toolgate mark:
    the ``toolgate_event`` field that :class:`JsonLogSink` attaches to each record (written by
    JSON log formatters), or this module's logger name before the JSON (plain formatters).
    A marked line with an unknown kind is then reported, not silently dropped.
    """
    attached = data.get("toolgate_event")
    if isinstance(attached, dict):
        return attached
    kind = data.get("kind")
    if (isinstance(kind, str) and kind in EVENT_TYPES) or _log.name in prefix:
        return data
    return None


def _event_at(data: Mapping[str, Any], where: str) -> Event:
    """:func:`event_from_dict`, with errors naming the log line ``where``."""
    try:
        return event_from_dict(data)
    except (TypeError, InvalidInputError) as exc:
        raise InvalidInputError(f"{where}: not a toolgate event ({exc})") from None

"""Structured events for every route, promote and verify, pluggable sinks, and usage statistics.

Events record what a budget audit needs (the Tool Attention paper's list): turn id, a sha256 of
the query (never the raw query unless asked), candidates and scores, what state gated out and
why, the active set, tokens per phase, the budget decision, and latency. A :class:`Telemetry`
hub fans them out to sinks: :class:`JsonLogSink` (one JSON line per event through
:mod:`logging`), :class:`JsonFileSink` (one JSON line per event appended to a file),
:class:`MemorySink` (tests, notebooks), :class:`OpenTelemetrySink` (a span per event, when
``opentelemetry`` is installed) and :class:`UsageStats`, which keeps the evidence for pruning:
tools loaded, routed and called, routing misses, and tools never routed or called.

>>> stats = UsageStats(["github/get_me", "github/create_issue"])
>>> hub = Telemetry([stats])
>>> hub.emit(VerifyEvent(turn_id="t1", name="get_me", tool_id="github/get_me", ok=True))
>>> stats.never_called()
['github/create_issue']
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import json
import logging
import os
import threading
import time
import types
import typing
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from toolgate.errors import InvalidInputError
from toolgate.promote import TOOL_SEARCH_ID

__all__ = [
    "Event",
    "JsonFileSink",
    "JsonLogSink",
    "MemorySink",
    "OpenTelemetrySink",
    "PromoteEvent",
    "RouteEvent",
    "Sink",
    "Telemetry",
    "UsageStats",
    "VerifyEvent",
    "as_telemetry",
    "default_sinks",
    "event_from_dict",
    "hash_query",
]

_log = logging.getLogger("toolgate.telemetry")


def hash_query(text: str, *, salt: str = "") -> str:
    """sha256 hex of ``salt + text``: lets logs join turns on a query without storing it."""
    return hashlib.sha256((salt + text).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Event:
    """Fields every event has. ``kind`` names the event type in logs."""

    kind: ClassVar[str] = "event"
    turn_id: str = ""
    timestamp: float = field(default_factory=time.time)
    latency_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view, with ``kind`` first."""
        return {"kind": self.kind, **asdict(self)}

    def to_json(self) -> str:
        """One compact JSON line."""
        return json.dumps(self.to_dict(), sort_keys=False, separators=(",", ":"))


@dataclass(frozen=True)
class RouteEvent(Event):
    """One routing decision: candidates, scores, gated-out ids with reasons, the active set."""

    kind: ClassVar[str] = "route"
    query_hash: str = ""
    candidates: tuple[str, ...] = ()
    scores: dict[str, float] = field(default_factory=dict)
    gated_out: dict[str, str] = field(default_factory=dict)
    active: tuple[str, ...] = ()
    query: str | None = None
    #: Active near copies moved down, each with the id of the tool it copies.
    copies: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_result(
        cls, result: Any, *, turn_id: str = "", record_query: bool = False, salt: str = ""
    ) -> RouteEvent:
        """Build from a ``RouteResult`` (``query``, ``tools``, ``gated_out``, ``timings_ms``)."""
        query = str(getattr(result, "query", ""))
        tools = list(getattr(result, "tools", ()))
        gated = list(getattr(result, "gated_out", ()))
        timings = getattr(result, "timings_ms", {}) or {}
        latency = float(timings.get("total", sum(timings.values())))
        return cls(
            turn_id=turn_id,
            latency_ms=latency,
            query_hash=hash_query(query, salt=salt),
            candidates=tuple(t.id for t in tools) + tuple(g.id for g in gated),
            scores={t.id: float(t.score) for t in tools},
            gated_out={g.id: str(g.reason) for g in gated},
            active=tuple(t.id for t in tools),
            query=query if record_query else None,
            copies={t.id: t.copy_of for t in tools if getattr(t, "copy_of", None)},
        )


@dataclass(frozen=True)
class PromoteEvent(Event):
    """One promotion: tokens per phase, the budget decision, what was sent or dropped."""

    kind: ClassVar[str] = "promote"
    active: tuple[str, ...] = ()
    format: str = ""
    pool_mode: str = ""
    tokens: dict[str, int] = field(default_factory=dict)
    decision: str = ""
    dropped: dict[str, str] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()

    @classmethod
    def from_promotion(cls, promotion: Any, *, turn_id: str = "") -> PromoteEvent:
        """Build from a :class:`toolgate.promote.Promotion`."""
        decision = promotion.decision
        return cls(
            turn_id=turn_id,
            latency_ms=float(promotion.latency_ms),
            active=tuple(promotion.active_ids),
            format=promotion.format,
            pool_mode=promotion.pool_mode,
            tokens=dict(promotion.tokens),
            decision=decision.status,
            dropped={d.tool_id: d.reason for d in decision.dropped},
            reasons=tuple(decision.reasons),
        )


@dataclass(frozen=True)
class VerifyEvent(Event):
    """One checked tool call; ``error == "tool_not_available"`` is a routing miss."""

    kind: ClassVar[str] = "verify"
    name: str = ""
    tool_id: str | None = None
    ok: bool = False
    error: str | None = None
    path: str | None = None
    closest: str | None = None

    @classmethod
    def from_verdict(
        cls, verdict: Any, *, turn_id: str = "", latency_ms: float = 0.0
    ) -> VerifyEvent:
        """Build from a :class:`toolgate.verify.Verdict`."""
        return cls(
            turn_id=turn_id,
            latency_ms=latency_ms,
            name=verdict.name,
            tool_id=verdict.tool_id,
            ok=verdict.ok,
            error=verdict.error,
            path=verdict.path,
            closest=verdict.closest,
        )


@runtime_checkable
class Sink(Protocol):
    """Receives events. Must be thread-safe; must not raise for a well-formed event."""

    def emit(self, event: Event) -> None:
        """Handle one event."""
        ...


class MemorySink:
    """Keeps every event in a list (for tests and notebooks)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        """Append the event."""
        with self._lock:
            self.events.append(event)

    def of_kind(self, kind: str) -> list[Event]:
        """The events of one kind (``route``, ``promote``, ``verify``)."""
        with self._lock:
            return [e for e in self.events if e.kind == kind]


class JsonLogSink:
    """Logs each event as one JSON line through :mod:`logging` (logger ``toolgate.telemetry``)."""

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self._logger = logger or _log
        self._level = level

    def emit(self, event: Event) -> None:
        """Log the event; the dict is also attached as ``record.toolgate_event``."""
        if self._logger.isEnabledFor(self._level):
            self._logger.log(
                self._level, event.to_json(), extra={"toolgate_event": event.to_dict()}
            )


def _otel_value(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return json.dumps(value, sort_keys=True)


class JsonFileSink:
    """Appends each event as one JSON line to a file, flushed at once, so another process
    (``toolgate stats --events FILE``) can read it while it grows. Several processes may
    append to one file: each line is written whole, in one ``write`` of an ``O_APPEND``
    file. A file that cannot be opened is an :class:`InvalidInputError` naming it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open ``path`` for appending (created if missing)."""
        self.path = Path(path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InvalidInputError(f"cannot write events to {path}: {exc.strerror}") from None
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        """Append the event's line. A failed write (a full disk) is logged, never raised."""
        line = (event.to_json() + "\n").encode()
        with self._lock:
            try:
                os.write(self._fd, line)
            except OSError as exc:
                _log.warning("event not written to %s: %s", self.path, exc.strerror)

    def close(self) -> None:
        """Close the file; events emitted after are an error."""
        with self._lock:
            os.close(self._fd)


class OpenTelemetrySink:
    """Records each event as an OpenTelemetry span ``toolgate.<kind>``, fields as attributes.

    Needs ``opentelemetry-api``; without it the constructor raises :class:`InvalidInputError`.
    """

    def __init__(self, tracer: Any = None) -> None:
        try:
            # Imported by name so type checking does not need opentelemetry installed.
            trace = importlib.import_module("opentelemetry.trace")
        except ImportError:
            raise InvalidInputError(
                "OpenTelemetrySink needs opentelemetry-api: pip install opentelemetry-api"
            ) from None
        self._tracer = tracer or trace.get_tracer("toolgate")

    def emit(self, event: Event) -> None:
        """Start and end one span carrying the event's fields."""
        end_ns = int(event.timestamp * 1e9)
        start_ns = end_ns - int(event.latency_ms * 1e6)
        span = self._tracer.start_span(f"toolgate.{event.kind}", start_time=start_ns)
        for key, value in event.to_dict().items():
            if value is not None:
                span.set_attribute(f"toolgate.{key}", _otel_value(value))
        span.end(end_time=end_ns)


_EVENT_TYPES: dict[str, type[Event]] = {
    "route": RouteEvent,
    "promote": PromoteEvent,
    "verify": VerifyEvent,
}
_TUPLE_FIELDS = ("candidates", "active", "reasons")


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """Rebuild an event from :meth:`Event.to_dict` output (for replaying logs)."""
    kind = data.get("kind")
    event_type = _EVENT_TYPES.get(str(kind))
    if event_type is None:
        raise InvalidInputError(f"unknown event kind {kind!r}; expected route, promote or verify")
    hints = _field_types(event_type.kind)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in hints:
            continue
        # A log is outside input: a wrong type would surface later as a crash in UsageStats
        # (an unhashable turn id, say), far from the line that caused it.
        if not _conforms(value, hints[key]):
            hint = hints[key]
            expected = hint.__name__ if isinstance(hint, type) else str(hint)
            raise InvalidInputError(
                f"field {key!r} is {type(value).__name__} {value!r:.60}, expected {expected}"
            )
        values[key] = tuple(value) if key in _TUPLE_FIELDS else value
    return event_type(**values)


@functools.cache
def _field_types(kind: str) -> dict[str, Any]:
    """The resolved annotation of every init field of the event type named ``kind``."""
    event_type = _EVENT_TYPES[kind]
    hints = typing.get_type_hints(event_type)
    return {f.name: hints[f.name] for f in fields(event_type) if f.init}


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a decoded JSON value fits an event field annotation (JSON arrays fit tuples)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_conforms(value, arm) for arm in args)
    if hint is type(None):
        return value is None
    if hint in (int, float):
        # bool is an int subclass, and JSON numbers without a fraction decode as int.
        allowed = (int, float) if hint is float else (int,)
        return isinstance(value, allowed) and not isinstance(value, bool)
    if origin is tuple:
        return isinstance(value, (list, tuple)) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items()
        )
    return isinstance(value, hint)


def default_sinks() -> list[Sink]:
    """JSON logging, plus OpenTelemetry when ``opentelemetry`` is importable."""
    sinks: list[Sink] = [JsonLogSink()]
    with contextlib.suppress(InvalidInputError):
        sinks.append(OpenTelemetrySink())
    return sinks


class Telemetry:
    """Fans events out to sinks; a failing sink is logged and never breaks the caller."""

    def __init__(
        self, sinks: Iterable[Sink] | None = None, *, record_queries: bool = False, salt: str = ""
    ) -> None:
        self.sinks: list[Sink] = list(default_sinks() if sinks is None else sinks)
        for sink in self.sinks:
            if not isinstance(sink, Sink):
                raise InvalidInputError(f"a sink needs an emit(event) method: {sink!r}")
        self.record_queries = record_queries
        self.salt = salt

    def emit(self, event: Event) -> None:
        """Send ``event`` to every sink."""
        for sink in self.sinks:
            try:
                sink.emit(event)
            except Exception:
                _log.exception("telemetry sink %r failed on a %s event", sink, event.kind)

    def route(self, result: Any, *, turn_id: str = "") -> RouteEvent:
        """Emit and return the event for a ``RouteResult``."""
        event = RouteEvent.from_result(
            result, turn_id=turn_id, record_query=self.record_queries, salt=self.salt
        )
        self.emit(event)
        return event

    def promote(self, promotion: Any, *, turn_id: str = "") -> PromoteEvent:
        """Emit and return the event for a ``Promotion``."""
        event = PromoteEvent.from_promotion(promotion, turn_id=turn_id)
        self.emit(event)
        return event

    def verify(self, verdict: Any, *, turn_id: str = "", latency_ms: float = 0.0) -> VerifyEvent:
        """Emit and return the event for a ``Verdict``."""
        event = VerifyEvent.from_verdict(verdict, turn_id=turn_id, latency_ms=latency_ms)
        self.emit(event)
        return event


def as_telemetry(value: object) -> Telemetry | None:
    """Check a ``telemetry=`` argument: ``None`` or a :class:`Telemetry`, returned unchanged.

    A bare sink or a list of sinks is the likely mistake; accepted as is, it would fail only
    later, on every route, far from the call that passed it.

    >>> hub = Telemetry([MemorySink()])
    >>> as_telemetry(hub) is hub
    True
    """
    if value is None or isinstance(value, Telemetry):
        return value
    raise InvalidInputError(
        "telemetry must be a toolgate.Telemetry, e.g. Telemetry([sink]), "
        f"got {type(value).__name__}"
    )


class UsageStats:
    """Per-tool usage gathered from events: a sink, and the Pruner's evidence.

    ``tool_ids`` is the registry (every tool that could be used), so tools that never appear in
    any event still show up as never routed / never called.

    The ``tool_search`` tool a digest pool sends (id :data:`~toolgate.promote.TOOL_SEARCH_ID`)
    is toolgate's, not the catalog's: it is never among the tools, never routed, and never a
    prune candidate. Its calls are counted apart instead: ``search_calls`` (accepted) and
    ``search_invalid`` (rejected for their arguments). Each accepted one is the model asking
    for tools the active set lacked, so a high count next to ``turns`` says routing or the
    budget leaves out too much.

    >>> stats = UsageStats(["github/get_me"])
    >>> stats.emit(VerifyEvent(name="tool_search", tool_id=TOOL_SEARCH_ID, ok=True))
    >>> stats.search_calls, stats.never_called()
    (1, ['github/get_me'])
    """

    def __init__(self, tool_ids: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self.registry: list[str] = list(dict.fromkeys(_catalog_ids(tool_ids)))
        self.turns: set[str] = set()
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
        for event in _read_log(Path(path)):
            stats.emit(event)
        return stats

    def emit(self, event: Event) -> None:
        """Count one event."""
        with self._lock:
            if event.turn_id:
                self.turns.add(event.turn_id)
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
            self.unknown[event.name] += 1

    def _known(self) -> list[str]:
        extra = [t for t in (*self.routed, *self.loaded, *self.called) if t not in self.registry]
        return self.registry + list(dict.fromkeys(extra))

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
        were sent but never used: pure token cost.
        """
        if window_s is not None and window_s <= 0:
            raise InvalidInputError(f"window_s must be positive, got {window_s}")
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
                "turns": len(self.turns),
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
    """The toolgate events in the log at ``path``, read one line at a time."""
    try:
        with path.open("rb") as log:
            for number, raw in enumerate(log, start=1):
                where = f"{path}, line {number}"
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
    except OSError as exc:
        raise InvalidInputError(f"cannot read telemetry log {path}: {exc}") from exc


def _json_in_line(raw: bytes, where: str) -> tuple[str, dict[str, Any]] | None:
    """The text before a log line's JSON object and the object; None if it has none.

    Raises :class:`InvalidInputError` naming ``where`` for a line that is not UTF-8 or whose
    object does not parse.
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{where}: not UTF-8 (byte {raw[exc.start]:#04x})") from None
    start = line.find("{")
    if start < 0 or '"kind"' not in line:
        return None
    try:
        data = json.loads(line[start:])
    except RecursionError:
        raise InvalidInputError(f"{where}: not a toolgate event (JSON nested too deeply)") from None
    except ValueError as exc:
        # JSONDecodeError, and plain ValueError for an integer too long to convert.
        raise InvalidInputError(f"{where}: not a toolgate event ({exc})") from None
    return line[:start], data


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
    if (isinstance(kind, str) and kind in _EVENT_TYPES) or _log.name in prefix:
        return data
    return None


def _event_at(data: Mapping[str, Any], where: str) -> Event:
    """:func:`event_from_dict`, with errors naming the log line ``where``."""
    try:
        return event_from_dict(data)
    except (TypeError, InvalidInputError) as exc:
        raise InvalidInputError(f"{where}: not a toolgate event ({exc})") from None

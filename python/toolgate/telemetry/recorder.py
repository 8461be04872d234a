"""The Telemetry object a router reports to."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from toolgate.errors import InvalidInputError
from toolgate.telemetry.events import Event, PromoteEvent, RouteEvent, VerifyEvent
from toolgate.telemetry.sinks import Sink, default_sinks
from toolgate.unicode import lone_surrogate_at

_log = logging.getLogger("toolgate.telemetry")

__all__ = ["Telemetry", "VerdictReport", "as_telemetry"]


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
        self.salt = _checked_salt(salt)

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
        event = VerifyEvent.from_verdict(
            verdict, turn_id=turn_id, latency_ms=latency_ms, salt=self.salt
        )
        self.emit(event)
        return event


@dataclass(frozen=True)
class VerdictReport:
    """Reports a call's verdict to ``telemetry`` (if any) with its check's latency, once the
    caller knows the verdict its call ends with: an MCP proxy's call refused after its check
    passed (its tool gone since, arguments no JSON holds), or checked again against a changed
    tool. Reported at its check, such a call counted as a successful call, or twice."""

    telemetry: Telemetry | None
    turn_id: str
    checked_ms: float

    def __call__(self, verdict: Any) -> None:
        """Report ``verdict``."""
        if self.telemetry is not None:
            self.telemetry.verify(verdict, turn_id=self.turn_id, latency_ms=self.checked_ms)


def _checked_salt(salt: object) -> str:
    """``salt``, refused here if hashing it with a query would fail on every route (None from
    an unset environment variable, a lone surrogate that UTF-8 cannot encode)."""
    if not isinstance(salt, str):
        raise InvalidInputError(f"salt must be a str, got {type(salt).__name__}")
    bad = lone_surrogate_at(salt)
    if bad is not None:
        raise InvalidInputError(f"salt holds a lone surrogate at character {bad}")
    return salt


def as_telemetry(value: object) -> Telemetry | None:
    """Check a ``telemetry=`` argument: ``None`` or a :class:`Telemetry`, returned unchanged.

    A bare sink or a list of sinks is the likely mistake; accepted as is, it would fail only
    later, on every route, far from the call that passed it.

    >>> from toolgate.telemetry import MemorySink
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

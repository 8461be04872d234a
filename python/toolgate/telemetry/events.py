"""The events toolgate emits: one per route, promote and verify, as plain JSON."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
import types
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from toolgate.arguments import finite_number, shown
from toolgate.catalog.names import EXPOSED_NAME_RE
from toolgate.errors import InvalidInputError

__all__ = [
    "Event",
    "PromoteEvent",
    "RouteEvent",
    "VerifyEvent",
    "event_from_dict",
    "hash_query",
    "logged_name",
]


def hash_query(text: str, *, salt: str = "") -> str:
    """sha256 hex of ``salt + text``: lets logs join turns on a query without storing it."""
    # surrogatepass: a model's name may hold a lone surrogate, which plain UTF-8 refuses.
    return hashlib.sha256((salt + text).encode("utf-8", "surrogatepass")).hexdigest()


# How many hex digits of its keyed hash stand for a name unlike a tool's: enough that two
# such names in one log practically never share a count.
_NAME_HASH_LEN = 12


def logged_name(name: str, *, salt: str = "") -> str:
    """``name`` if it looks like a tool's (:data:`~toolgate.catalog.names.EXPOSED_NAME_RE`),
    else ``<name HASH>``, HASH the start of :func:`hash_query`: a model's junk or the user's
    text echoed as a name then neither bloats a log nor lands in it, yet still counts apart.

    >>> logged_name("get_mee")
    'get_mee'
    >>> logged_name("email bob my password")
    '<name 0d67a57b2573>'
    """
    if EXPOSED_NAME_RE.fullmatch(name):
        return name
    return f"<name {hash_query(name, salt=salt)[:_NAME_HASH_LEN]}>"


@dataclass(frozen=True)
class Event:
    """Fields every event has. ``kind`` names the event type in logs."""

    kind: ClassVar[str] = "event"
    turn_id: str = ""
    timestamp: float = field(default_factory=time.time)
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        # Only an event built by hand sets the time: a NaN one would pass every window of
        # UsageStats.pruning_report, so no log reader takes it back. Said here, at the call.
        if not finite_number(self.timestamp):
            raise InvalidInputError(
                f"timestamp must be a finite number of seconds, got {shown(self.timestamp)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view, with ``kind`` first. A latency or score that is no finite number
        (NaN: not measured) is ``None``: JSON has no NaN, which most readers refuse."""
        data = {"kind": self.kind, **asdict(self)}
        for key in _MEASURES:
            if key in data:
                data[key] = _measured(data[key])
        return data

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
        """Build from a :class:`toolgate.promotion.promote.Promotion`."""
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
    #: Where the arguments break the schema, keys the schema does not name as ``*``.
    path: str | None = None
    closest: str | None = None

    @classmethod
    def from_verdict(
        cls, verdict: Any, *, turn_id: str = "", latency_ms: float = 0.0, salt: str = ""
    ) -> VerifyEvent:
        """Build from a :class:`toolgate.verify.Verdict`; a name no tool has is stored as
        :func:`logged_name` (keyed with ``salt``): the model made it up."""
        name = verdict.name
        return cls(
            turn_id=turn_id,
            latency_ms=latency_ms,
            name=logged_name(name, salt=salt) if verdict.error == "unknown_tool" else name,
            tool_id=verdict.tool_id,
            ok=verdict.ok,
            error=verdict.error,
            path=verdict.log_path,
            closest=verdict.closest,
        )


EVENT_TYPES: dict[str, type[Event]] = {
    "route": RouteEvent,
    "promote": PromoteEvent,
    "verify": VerifyEvent,
}


_TUPLE_FIELDS = ("candidates", "active", "reasons")
#: Fields holding measurements, where NaN (or null, as :meth:`Event.to_dict` writes it, or
#: the NaN and Infinity tokens of older logs) means "not measured" and is read back as NaN.
_MEASURES = ("latency_ms", "scores")


def _measured(value: Any) -> Any:
    """``value`` with every non-finite float in it (a measure or a dict of them) as None."""
    if isinstance(value, dict):
        return {key: _measured(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _unmeasured_as_nan(value: Any) -> Any:
    """``value`` with each None in it (a measure or a dict of them) as NaN."""
    if isinstance(value, dict):
        return {key: _unmeasured_as_nan(item) for key, item in value.items()}
    return math.nan if value is None else value


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """Rebuild an event from :meth:`Event.to_dict` output (for replaying logs)."""
    kind = data.get("kind")
    event_type = EVENT_TYPES.get(str(kind))
    if event_type is None:
        raise InvalidInputError(f"unknown event kind {kind!r}; expected route, promote or verify")
    hints = _field_types(event_type.kind)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in hints:
            continue
        # A log is outside input: a wrong type would surface later as a crash in UsageStats
        # (an unhashable turn id, say), far from the line that caused it.
        measure = key in _MEASURES
        if not _conforms(value, hints[key], measure=measure):
            hint = hints[key]
            expected = hint.__name__ if isinstance(hint, type) else str(hint)
            raise InvalidInputError(
                f"field {key!r} is {type(value).__name__} {value!r:.60}, expected {expected}"
            )
        if measure:
            value = _unmeasured_as_nan(value)
        values[key] = tuple(value) if key in _TUPLE_FIELDS else value
    return event_type(**values)


@functools.cache
def _field_types(kind: str) -> dict[str, Any]:
    """The resolved annotation of every init field of the event type named ``kind``."""
    event_type = EVENT_TYPES[kind]
    hints = typing.get_type_hints(event_type)
    return {f.name: hints[f.name] for f in fields(event_type) if f.init}


def _conforms(value: Any, hint: Any, *, measure: bool = False) -> bool:
    """Whether a decoded JSON value fits an event field annotation (JSON arrays fit tuples);
    with ``measure``, a float may also be null or not finite (not measured)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_conforms(value, arm, measure=measure) for arm in args)
    if hint is type(None):
        return value is None
    if hint in (int, float):
        if hint is float and measure and (value is None or isinstance(value, float)):
            return True
        # bool is an int subclass, and JSON numbers without a fraction decode as int.
        allowed = (int, float) if hint is float else (int,)
        if isinstance(value, float) and not math.isfinite(value):
            return False  # NaN compares false with every time: a tool would count as unseen
        return isinstance(value, allowed) and not isinstance(value, bool)
    if origin is tuple:
        return isinstance(value, (list, tuple)) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _conforms(k, args[0]) and _conforms(v, args[1], measure=measure)
            for k, v in value.items()
        )
    return isinstance(value, hint)

"""Telemetry: an event for every route, promote and verify, pluggable sinks, usage statistics.

>>> from toolgate.telemetry import MemorySink, Telemetry
>>> router = Router.from_tools(tools, telemetry=Telemetry([MemorySink()]))  # doctest: +SKIP
"""

from toolgate.telemetry.events import (
    Event,
    PromoteEvent,
    RouteEvent,
    VerifyEvent,
    event_from_dict,
    hash_query,
)
from toolgate.telemetry.recorder import Telemetry, as_telemetry
from toolgate.telemetry.sinks import (
    JsonFileSink,
    JsonLogSink,
    MemorySink,
    OpenTelemetrySink,
    Sink,
    default_sinks,
)
from toolgate.telemetry.usage import UsageStats

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

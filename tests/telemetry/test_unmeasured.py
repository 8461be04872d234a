"""A latency or score that is not a number (NaN: not measured) is written as JSON's null and
read back, so the log that toolgate writes is one that it and other readers take."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from toolgate.errors import InvalidInputError
from toolgate.telemetry.events import RouteEvent, VerifyEvent, event_from_dict
from toolgate.telemetry.recorder import Telemetry
from toolgate.telemetry.sinks import JsonFileSink, OpenTelemetrySink
from toolgate.telemetry.usage import UsageStats


def _strict(line: str) -> object:
    """``line`` parsed as standard JSON: no NaN or Infinity token."""

    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")

    return json.loads(line, parse_constant=refuse)


def test_a_nan_latency_and_score_written_to_a_file_read_back(tmp_path: Path) -> None:
    """The sink wrote NaN, which UsageStats.from_log then refused: the whole log unread."""
    log = tmp_path / "events.jsonl"
    sink = JsonFileSink(log)
    hub = Telemetry([sink])
    hub.emit(RouteEvent(turn_id="t1", active=("s/a",), scores={"s/a": math.nan, "s/b": 0.5}))
    hub.emit(VerifyEvent(turn_id="t1", name="a", tool_id="s/a", ok=True, latency_ms=math.nan))
    sink.close()
    lines = log.read_text(encoding="utf-8").splitlines()
    route, verify = (_strict(line) for line in lines)
    assert route["scores"] == {"s/a": None, "s/b": 0.5}  # type: ignore[index]
    assert verify["latency_ms"] is None  # type: ignore[index]
    stats = UsageStats.from_log(log)
    assert (stats.routed, stats.called, stats.turns) == ({"s/a": 1}, {"s/a": 1}, 1)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "null"])
def test_an_unmeasured_latency_or_score_reads_as_nan(token: str) -> None:
    """Older logs hold the NaN and Infinity tokens Python writes; newer ones null."""
    verify = json.loads(
        f'{{"kind": "verify", "name": "a", "tool_id": "s/a", "ok": true, "latency_ms": {token}}}'
    )
    route = json.loads(f'{{"kind": "route", "active": ["s/a"], "scores": {{"s/a": {token}}}}}')
    latency = event_from_dict(verify).latency_ms
    score = event_from_dict(route).scores["s/a"]  # type: ignore[attr-defined]
    assert math.isnan(latency) if token in ("NaN", "null") else math.isinf(latency)
    assert math.isnan(score) if token in ("NaN", "null") else math.isinf(score)


def test_a_latency_of_the_wrong_type_is_still_refused() -> None:
    with pytest.raises(InvalidInputError, match="field 'latency_ms' is str"):
        event_from_dict({"kind": "verify", "latency_ms": "3 ms"})


@pytest.mark.parametrize("timestamp", [math.nan, math.inf, "1700000000"])
def test_an_event_refuses_a_time_no_reader_takes(timestamp: object) -> None:
    """A NaN time was written, then refused on read: it would pass every pruning window."""
    with pytest.raises(InvalidInputError, match="timestamp must be a finite number"):
        VerifyEvent(name="a", timestamp=timestamp)  # type: ignore[arg-type]


def test_an_open_telemetry_span_of_an_unmeasured_latency() -> None:
    """int(NaN) raised in the sink: the event's span was lost."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = OpenTelemetrySink(tracer=provider.get_tracer("test"))
    sink.emit(VerifyEvent(name="a", tool_id="s/a", ok=True, latency_ms=math.nan))
    (span,) = exporter.get_finished_spans()
    assert span.start_time == span.end_time

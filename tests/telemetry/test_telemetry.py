"""Telemetry events, sinks and usage statistics."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import threading
import tracemalloc
import types
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import file_mode
from toolgate.catalog.catalog import Catalog
from toolgate.errors import InvalidInputError
from toolgate.promotion.budget import Budget
from toolgate.promotion.discovery import TOOL_SEARCH_ID
from toolgate.promotion.promote import promote_tools
from toolgate.telemetry.events import (
    Event,
    PromoteEvent,
    RouteEvent,
    VerifyEvent,
    event_from_dict,
    hash_query,
)
from toolgate.telemetry.recorder import Telemetry, as_telemetry
from toolgate.telemetry.sinks import JsonFileSink, JsonLogSink, MemorySink, OpenTelemetrySink
from toolgate.telemetry.usage import UsageStats
from toolgate.verify import verify_call


@dataclass(frozen=True)
class FakeRouted:
    id: str
    score: float


@dataclass(frozen=True)
class FakeGated:
    id: str
    reason: str


@dataclass(frozen=True)
class FakeRouteResult:
    """The attributes of the router's RouteResult that telemetry reads."""

    query: str
    tools: tuple[FakeRouted, ...]
    gated_out: tuple[FakeGated, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.from_tools(
        [{"name": n, "description": f"{n} things."} for n in ("a", "b", "c", "d")], server="s"
    )


def _route(query: str, ids: list[str], gated: dict[str, str] | None = None) -> FakeRouteResult:
    return FakeRouteResult(
        query=query,
        tools=tuple(FakeRouted(i, 1.0 / (n + 1)) for n, i in enumerate(ids)),
        gated_out=tuple(FakeGated(i, r) for i, r in (gated or {}).items()),
        timings_ms={"embed": 1.5, "score": 0.5},
    )


def test_route_event_hashes_the_query_by_default() -> None:
    result = _route("open a secret issue", ["s/a", "s/b"], {"s/c": "missing scope repo"})
    event = RouteEvent.from_result(result, turn_id="t1")
    assert event.query is None
    assert event.query_hash == hashlib.sha256(b"open a secret issue").hexdigest()
    assert event.candidates == ("s/a", "s/b", "s/c")
    assert event.active == ("s/a", "s/b")
    assert event.scores == {"s/a": 1.0, "s/b": 0.5}
    assert event.gated_out == {"s/c": "missing scope repo"}
    assert event.latency_ms == pytest.approx(2.0)
    text = event.to_json()
    assert "secret" not in text
    assert json.loads(text)["kind"] == "route"
    salted = RouteEvent.from_result(result, salt="pepper", record_query=True)
    assert salted.query_hash == hash_query("open a secret issue", salt="pepper")
    assert salted.query == "open a secret issue"


def test_promote_and_verify_events(catalog: Catalog) -> None:
    promotion = promote_tools(catalog, ["s/b", "s/a", "s/c"], budget=Budget(max_tools=2))
    event = PromoteEvent.from_promotion(promotion, turn_id="t1")
    assert event.active == ("s/a", "s/b")
    assert event.decision == "warn"
    assert set(event.dropped) == {"s/c"}
    assert event.tokens == promotion.tokens
    assert json.loads(event.to_json())["tokens"]["pool"] == promotion.tokens["pool"]
    verdict = verify_call(catalog, promotion, {"name": "c", "arguments": {}})
    vevent = VerifyEvent.from_verdict(verdict, turn_id="t1", latency_ms=0.2)
    assert vevent.error == "tool_not_available"
    assert vevent.tool_id == "s/c"


def test_hub_fans_out_and_survives_a_failing_sink(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def emit(self, event: Any) -> None:
            raise RuntimeError("disk full")

    memory = MemorySink()
    hub = Telemetry([Broken(), memory])
    with caplog.at_level(logging.ERROR, logger="toolgate.telemetry"):
        hub.route(_route("q", ["s/a"]), turn_id="t1")
    assert [e.kind for e in memory.events] == ["route"]
    assert "telemetry sink" in caplog.text
    assert "disk full" in caplog.text
    with pytest.raises(InvalidInputError, match="emit"):
        Telemetry([object()])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("salt", "said"),
    [(None, "salt must be a str, got NoneType"), (5, "salt must be a str, got int"),
     ("pepper\ud800", "salt holds a lone surrogate at character 6")],
)  # fmt: skip
def test_a_salt_that_cannot_be_hashed_is_refused_at_once(salt: Any, said: str) -> None:
    """Taken as given, such a salt (an unset environment variable) failed every route()."""
    with pytest.raises(InvalidInputError, match=said):
        Telemetry([MemorySink()], salt=salt)


def test_a_memory_sink_pickles_with_its_events() -> None:
    sink = MemorySink()
    sink.emit(VerifyEvent(turn_id="t1", name="a", tool_id="s/a", ok=True))
    back = pickle.loads(pickle.dumps(sink))
    assert back.events == sink.events
    back.emit(VerifyEvent(turn_id="t2", name="a", tool_id="s/a", ok=True))
    assert (len(back.of_kind("verify")), len(sink.of_kind("verify"))) == (2, 1)


def test_json_log_sink_writes_one_line_per_event(caplog: pytest.LogCaptureFixture) -> None:
    hub = Telemetry([JsonLogSink()])
    with caplog.at_level(logging.INFO, logger="toolgate.telemetry"):
        hub.emit(VerifyEvent(turn_id="t9", name="x", ok=False, error="unknown_tool"))
    (record,) = caplog.records
    data = json.loads(record.getMessage())
    assert data["kind"] == "verify"
    assert data["turn_id"] == "t9"
    assert record.toolgate_event["error"] == "unknown_tool"  # type: ignore[attr-defined]


def test_opentelemetry_sink_needs_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(InvalidInputError, match="pip install opentelemetry-api"):
        OpenTelemetrySink()
    assert [type(s).__name__ for s in Telemetry().sinks] == ["JsonLogSink"]


def test_opentelemetry_sink_records_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    spans: list[dict[str, Any]] = []

    class Span:
        def __init__(self, name: str, start: int) -> None:
            self.data: dict[str, Any] = {"name": name, "start": start, "attrs": {}}

        def set_attribute(self, key: str, value: Any) -> None:
            self.data["attrs"][key] = value

        def end(self, end_time: int) -> None:
            self.data["end"] = end_time
            spans.append(self.data)

    class Tracer:
        def start_span(self, name: str, start_time: int) -> Span:
            return Span(name, start_time)

    trace = types.ModuleType("opentelemetry.trace")
    trace.get_tracer = lambda name: Tracer()  # type: ignore[attr-defined]
    package = types.ModuleType("opentelemetry")
    package.trace = trace  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "opentelemetry", package)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", trace)
    hub = Telemetry([OpenTelemetrySink()])
    hub.route(_route("q", ["s/a"], {"s/b": "needs milestone"}), turn_id="t1")
    (span,) = spans
    assert span["name"] == "toolgate.route"
    assert span["end"] - span["start"] == pytest.approx(2_000_000, abs=2)
    assert span["attrs"]["toolgate.active"] == ["s/a"]
    assert json.loads(span["attrs"]["toolgate.gated_out"]) == {"s/b": "needs milestone"}


def test_opentelemetry_sdk_records_every_event_with_valid_attributes() -> None:
    """The real SDK: it warns (an error under pytest here) on attribute values OTel rejects."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hub = Telemetry([OpenTelemetrySink(tracer=provider.get_tracer("test"))])
    catalog = Catalog.from_tools(
        [{"name": "a", "description": "Do a."}, {"name": "b", "description": "Do b."}], server="s"
    )
    hub.route(_route("q", ["s/a"], {"s/b": "needs milestone"}), turn_id="t1")
    promotion = promote_tools(catalog, ["s/a"], budget=Budget(max_tools=5))
    hub.promote(promotion, turn_id="t1")
    hub.verify(verify_call(catalog, promotion, {"name": "b", "arguments": {}}), turn_id="t1")
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == [
        "toolgate.route",
        "toolgate.promote",
        "toolgate.verify",
    ]
    route, promote, verify = (dict(span.attributes or {}) for span in spans)
    assert route["toolgate.turn_id"] == "t1"
    assert tuple(route["toolgate.active"]) == ("s/a",)
    assert json.loads(str(route["toolgate.gated_out"])) == {"s/b": "needs milestone"}
    assert tuple(promote["toolgate.active"]) == ("s/a",)
    assert verify["toolgate.error"] == "tool_not_available"
    assert verify["toolgate.ok"] is False
    for span in spans:
        assert span.start_time is not None
        assert span.end_time is not None
        assert span.end_time >= span.start_time


def _session(catalog: Catalog, stats: UsageStats) -> None:
    hub = Telemetry([stats])
    turns = [(["s/a", "s/b"], "a"), (["s/a"], "a"), (["s/b"], "c"), (["s/b"], "b")]
    for n, (routed, called) in enumerate(turns):
        turn = f"t{n}"
        hub.route(_route(f"query {n}", routed), turn_id=turn)
        promotion = promote_tools(catalog, routed)
        hub.promote(promotion, turn_id=turn)
        hub.verify(verify_call(catalog, promotion, {"name": called, "arguments": {}}), turn_id=turn)
    hub.verify(verify_call(catalog, ["s/a"], {"name": "nope", "arguments": {}}), turn_id="t9")


def test_usage_stats_count_loaded_called_missed(catalog: Catalog) -> None:
    stats = UsageStats(catalog.ids)
    _session(catalog, stats)
    assert stats.routed == {"s/a": 2, "s/b": 3}
    assert stats.loaded == {"s/a": 2, "s/b": 3}
    assert stats.called == {"s/a": 2, "s/b": 1}
    assert stats.misses == {"s/c": 1}
    assert stats.unknown == {"nope": 1}
    assert stats.never_called() == ["s/c", "s/d"]
    assert stats.never_routed() == ["s/c", "s/d"]
    data = json.loads(json.dumps(stats.to_dict()))
    assert data["turns"] == 5
    assert data["routing_misses"] == {"s/c": 1}
    assert stats.summary(1)["routed"] == [("s/b", 3)]


def test_pruning_report_over_a_window(catalog: Catalog) -> None:
    stats = UsageStats(catalog.ids)
    stats.emit(RouteEvent(turn_id="old", timestamp=1000.0, active=("s/a", "s/b")))
    stats.emit(PromoteEvent(turn_id="old", timestamp=1000.0, active=("s/a", "s/b")))
    stats.emit(VerifyEvent(turn_id="old", timestamp=1000.0, name="a", tool_id="s/a", ok=True))
    stats.emit(RouteEvent(turn_id="new", timestamp=5000.0, active=("s/b",)))
    stats.emit(PromoteEvent(turn_id="new", timestamp=5000.0, active=("s/b",)))
    report = stats.pruning_report(window_s=3600, now=5000.0)
    assert report["not_routed"] == ["s/a", "s/c", "s/d"]
    assert report["not_called"] == ["s/a", "s/b", "s/c", "s/d"]
    # Loaded inside the window and never called there: pure token cost.
    assert report["loaded_not_called"] == ["s/b"]
    everything = stats.pruning_report(now=5000.0)
    assert everything["not_called"] == ["s/b", "s/c", "s/d"]
    assert everything["loaded_not_called"] == ["s/b"]
    with pytest.raises(InvalidInputError, match="window_s"):
        stats.pruning_report(window_s=0)


@pytest.mark.parametrize("window_s", [float("nan"), float("inf"), "3600", True])
def test_a_window_that_is_no_finite_number_is_refused(window_s: Any) -> None:
    """A NaN window compared false with every time, so every tool passed for idle."""
    with pytest.raises(InvalidInputError, match="window_s must be a positive number"):
        UsageStats(["s/a"]).pruning_report(window_s=window_s)


@pytest.mark.parametrize("now", [float("nan"), "1700000000", datetime.now(timezone.utc)])
def test_a_now_that_is_no_finite_number_is_refused(now: Any) -> None:
    """A datetime (the likely mistake) failed with a TypeError; a NaN compared false with
    every time, so no tool seen ever passed for idle."""
    stats = UsageStats(["s/a"])
    stats.emit(RouteEvent(turn_id="t", timestamp=1000.0, active=("s/a",)))
    with pytest.raises(InvalidInputError, match="now must be a time in seconds"):
        stats.pruning_report(window_s=60, now=now)


@pytest.mark.parametrize(
    ("tool_ids", "said"),
    [
        ("github/get_issue", "tool_ids must be a list of tool ids, not 'github/get_issue'"),
        (b"github/get_issue", "tool_ids must be a list of tool ids, got bytes"),
        (["s/a", None], "tool_ids entries must be tool ids, got None"),
    ],
)
def test_a_registry_that_is_no_list_of_ids_is_refused(tool_ids: Any, said: str) -> None:
    """A bare string was read letter by letter: a registry of one-letter tools."""
    with pytest.raises(InvalidInputError, match=re.escape(said)):
        UsageStats(tool_ids)


def test_usage_stats_are_thread_safe() -> None:
    stats = UsageStats(["s/a"])

    def work() -> None:
        for _ in range(2000):
            stats.emit(VerifyEvent(turn_id="t", name="a", tool_id="s/a", ok=True))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stats.called["s/a"] == 8000


def test_memory_sink_filters_by_kind() -> None:
    sink = MemorySink()
    sink.emit(RouteEvent(turn_id="t"))
    sink.emit(VerifyEvent(turn_id="t"))
    assert [e.kind for e in sink.of_kind("verify")] == ["verify"]


def test_usage_stats_replay_a_json_log(catalog: Catalog, tmp_path: Path) -> None:
    memory = MemorySink()
    hub = Telemetry([memory])
    hub.route(_route("q", ["s/a"]), turn_id="x1")
    hub.verify(verify_call(catalog, ["s/a"], {"name": "b", "arguments": {}}), turn_id="x1")
    log = tmp_path / "events.log"
    lines = [
        "2026-01-01 INFO something unrelated",
        *(f"INFO toolgate: {e.to_json()}" for e in memory.events),
    ]
    log.write_text("\n".join(lines) + "\n")
    replayed = UsageStats.from_log(log, catalog)
    assert replayed.routed == {"s/a": 1}
    assert replayed.misses == {"s/b": 1}
    assert all(event_from_dict(e.to_dict()) == e for e in memory.events)
    log.write_text('INFO {"kind": "route", "active": [\n')
    with pytest.raises(InvalidInputError, match=r"events.log, line 1: not a toolgate event"):
        UsageStats.from_log(log, catalog)
    log.write_text('INFO toolgate.telemetry: {"kind": "teleport"}\n')
    with pytest.raises(InvalidInputError, match=r"line 1: .*unknown event kind 'teleport'"):
        UsageStats.from_log(log, catalog)
    with pytest.raises(InvalidInputError, match="cannot read telemetry log"):
        UsageStats.from_log(tmp_path / "absent.log")


def test_the_search_tool_is_not_a_catalog_tool(catalog: Catalog, tmp_path: Path) -> None:
    """A digest pool's tool_search is toolgate's: its calls are counted apart, and it is
    never counted among the tools nor offered for pruning, live or replayed from a log."""
    memory = MemorySink()
    live = UsageStats(catalog.ids)
    hub = Telemetry([live, memory])
    hub.route(_route("q", ["s/a"]), turn_id="t1")
    promotion = promote_tools(catalog, ["s/a"], pool="digest")
    assert promotion.search_tool_name == "tool_search"
    hub.promote(promotion, turn_id="t1")
    for arguments in ({"query": "b things"}, {"query": "c"}, {}):
        call = {"name": "tool_search", "arguments": arguments}
        hub.verify(verify_call(catalog, promotion, call), turn_id="t1")
    hub.verify(verify_call(catalog, promotion, {"name": "a", "arguments": {}}), turn_id="t1")
    log = tmp_path / "events.log"
    log.write_text("".join(f"INFO toolgate.telemetry: {e.to_json()}\n" for e in memory.events))
    replayed = UsageStats.from_log(log, catalog)
    for stats in (live, replayed):
        assert stats.called == {"s/a": 1}
        assert stats.invalid == {}
        assert (stats.search_calls, stats.search_invalid) == (2, 1)
        assert stats.never_routed() == ["s/b", "s/c", "s/d"]
        assert stats.never_called() == ["s/b", "s/c", "s/d"]
        data = json.loads(json.dumps(stats.to_dict()))
        assert data["tools"] == 4
        assert data["search_calls"] == 2
        assert data["search_invalid_arguments"] == 1
        assert data["invalid_arguments"] == {}
        report = stats.pruning_report()
        assert report["tools"] == 4
        assert report["not_routed"] == ["s/b", "s/c", "s/d"]
        assert report["not_called"] == ["s/b", "s/c", "s/d"]
    # Events built by hand may name it in an active set; it still is not a catalog tool.
    stats = UsageStats([*catalog.ids, TOOL_SEARCH_ID])
    stats.emit(RouteEvent(turn_id="t", active=("s/a", TOOL_SEARCH_ID)))
    stats.emit(PromoteEvent(turn_id="t", active=("s/a", TOOL_SEARCH_ID)))
    assert stats.to_dict()["tools"] == 4
    assert stats.pruning_report()["loaded_not_called"] == ["s/a"]


def _log_lines(*events: Event) -> list[str]:
    return [f"2026-01-01 INFO toolgate.telemetry: {e.to_json()}" for e in events]


def test_replay_skips_a_half_written_last_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "events.log"
    complete = _log_lines(RouteEvent(turn_id="t1", active=("s/a",)))
    half = _log_lines(RouteEvent(turn_id="t2", active=("s/b",)))[0][:-12]
    log.write_text("\n".join([*complete, half]))
    with caplog.at_level(logging.WARNING, logger="toolgate.telemetry"):
        stats = UsageStats.from_log(log)
    assert stats.routed == {"s/a": 1}
    assert f"{log}, line 2: not a toolgate event" in caplog.text
    assert "skipped: the last line, still being written" in caplog.text
    # A writer cut off inside a multi-byte character leaves a tail that is not even UTF-8.
    log.write_bytes(
        "\n".join(complete).encode() + '\nINFO {"kind": "route", "q": "caf\u00e9'.encode()[:-1]
    )
    assert UsageStats.from_log(log).routed == {"s/a": 1}
    # The same line followed by more is a corrupt log, not a live one.
    log.write_text("\n".join([*complete, half, *complete]) + "\n")
    with pytest.raises(InvalidInputError, match=r"events.log, line 2: not a toolgate event"):
        UsageStats.from_log(log)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_replay_refuses_what_is_no_regular_file(tmp_path: Path, kind: str) -> None:
    """Opening a pipe blocks until a writer comes and /dev/zero is one endless line: both
    would hang the replay."""
    log = Path("/dev/zero") if kind == "device" else tmp_path / "events.log"
    if kind == "fifo":
        os.mkfifo(log)
    elif kind == "directory":
        log.mkdir()
    with pytest.raises(InvalidInputError, match=r"telemetry log .*not a regular file"):
        UsageStats.from_log(log)


def test_replay_ignores_json_lines_of_other_programs(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    lines = [
        '2026-01-01 INFO deployer: {"kind": "deployment", "service": "api", "replicas": 3}',
        '{"kind": 7, "note": "a kind that is not even a string"}',
        '{"level": "info", "meta": {"kind": "route"}}',
        *_log_lines(VerifyEvent(turn_id="t1", name="a", tool_id="s/a", ok=True)),
    ]
    log.write_text("\n".join(lines) + "\n")
    assert UsageStats.from_log(log).called == {"s/a": 1}
    # A line marked as toolgate's stays an error, whatever its kind.
    log.write_text('INFO toolgate.telemetry: {"kind": "deployment"}\n')
    with pytest.raises(InvalidInputError, match=r"line 1: .*unknown event kind 'deployment'"):
        UsageStats.from_log(log)


def test_replay_reads_events_attached_by_a_json_formatter(tmp_path: Path) -> None:
    event = RouteEvent(turn_id="t1", active=("s/a",))
    record = {"name": "toolgate.telemetry", "message": event.to_json()}
    log = tmp_path / "events.log"
    log.write_text(json.dumps({**record, "toolgate_event": event.to_dict()}) + "\n")
    assert UsageStats.from_log(log).routed == {"s/a": 1}
    broken = {**event.to_dict(), "active": "s/a"}
    log.write_text(json.dumps({**record, "toolgate_event": broken}) + "\n")
    with pytest.raises(InvalidInputError, match=r"line 1: not a toolgate event .*'active'"):
        UsageStats.from_log(log)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("1" + "0" * 5000, "integer string conversion"),
    ],
    ids=["deep", "long-integer"],
)
def test_replay_reports_json_python_cannot_hold(tmp_path: Path, value: str, reason: str) -> None:
    log = tmp_path / "events.log"
    log.write_text(f'{{"kind": "route", "scores": {value}}}\n')
    with pytest.raises(InvalidInputError, match=f"line 1: not a toolgate event .*{reason}"):
        UsageStats.from_log(log)


def test_last_times_are_the_latest_not_the_last_seen(tmp_path: Path) -> None:
    events = [
        RouteEvent(turn_id="late", timestamp=2000.0, active=("s/a",)),
        PromoteEvent(turn_id="late", timestamp=2000.0, active=("s/a",)),
        VerifyEvent(turn_id="late", timestamp=2000.0, name="a", tool_id="s/a", ok=True),
    ]
    early = [replace(e, turn_id="early", timestamp=1000.0) for e in events]
    log = tmp_path / "merged.log"
    log.write_text("\n".join(_log_lines(*events, *early)) + "\n")
    stats = UsageStats.from_log(log, ["s/a", "s/b"])
    report = stats.pruning_report(window_s=500, now=2100.0)
    assert report["not_routed"] == ["s/b"]
    assert report["not_called"] == ["s/b"]
    assert stats.last_routed == stats.last_loaded == stats.last_called == {"s/a": 2000.0}


def test_replay_streams_the_log(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    noise = "2026-01-01 12:00:00 INFO app: request served in 3 ms path=/health status=200\n"
    event = _log_lines(RouteEvent(turn_id="t1", active=("s/a",)))[0] + "\n"
    log.write_text((noise * 1000 + event) * 100)  # about 8 MB
    tracemalloc.start()
    try:
        stats = UsageStats.from_log(log)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats.routed == {"s/a": 100}
    assert peak < 1_000_000


def test_as_telemetry_rejects_sinks_passed_bare() -> None:
    hub = Telemetry([MemorySink()])
    assert as_telemetry(hub) is hub
    assert as_telemetry(None) is None
    for wrong, name in ([MemorySink()], "list"), (MemorySink(), "MemorySink"):
        with pytest.raises(InvalidInputError, match=rf"e.g. Telemetry\(\[sink\]\), got {name}$"):
            as_telemetry(wrong)


def test_a_json_file_sink_appends_whole_lines_from_many_threads(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.write_text("an older line\n", encoding="utf-8")  # appended to, never truncated
    sink = JsonFileSink(log)
    calls = [VerifyEvent(name="get_me", tool_id="github/get_me", ok=True)] * 250

    def emit_all() -> None:
        for event in calls:
            sink.emit(event)

    threads = [threading.Thread(target=emit_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink.close()
    lines = log.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "an older line"
    assert len(lines) == 1 + 1000
    assert all(json.loads(line)["kind"] == "verify" for line in lines[1:])
    assert UsageStats.from_log(log).called == {"github/get_me": 1000}


def test_a_json_file_sink_refuses_pickling_saying_what_to_do(tmp_path: Path) -> None:
    # Its descriptor's number means another file, or none, in another process.
    hub = Telemetry([JsonFileSink(tmp_path / "events.jsonl")])
    with pytest.raises(
        TypeError,
        match=r"^cannot pickle or deep-copy a toolgate JsonFileSink: .*JsonFileSink\(path\)",
    ):
        pickle.dumps(hub)


def test_a_json_file_sink_names_a_file_it_cannot_open(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"cannot write events to .*missing/events"):
        JsonFileSink(tmp_path / "missing" / "events.jsonl")


def test_a_closed_json_file_sink_writes_nowhere(tmp_path: Path) -> None:
    sink = JsonFileSink(tmp_path / "events.jsonl")
    sink.close()
    # The descriptor's number is free again: the next file opened may get it.
    other = tmp_path / "other.txt"
    with other.open("w", encoding="utf-8") as handle:
        with pytest.raises(InvalidInputError, match=r"event sink for .*events\.jsonl is closed"):
            sink.emit(VerifyEvent(name="get_me", tool_id="github/get_me", ok=True))
        sink.close()  # a second close must not close the file that took the number
        handle.write("still mine\n")
    assert other.read_text(encoding="utf-8") == "still mine\n"
    assert (tmp_path / "events.jsonl").read_text(encoding="utf-8") == ""


def test_replay_passes_over_other_programs_lines_and_non_finite_times(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    event = RouteEvent(turn_id="t1", candidates=("s/a",), active=("s/a",)).to_dict()
    lines = [
        'myapp INFO order={"kind":"order","id":3} done',  # JSON then text: another program's
        'myapp INFO {"kind": "order", "items": [',  # broken, and not toolgate's
        f"INFO toolgate.telemetry: {json.dumps(event)} (logged)",  # text after toolgate's JSON
        "INFO toolgate.telemetry: " + json.dumps({**event, "timestamp": float("nan")}),
    ]
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(InvalidInputError, match="line 4: "):
        UsageStats.from_log(log)  # a NaN time is no event's: it would pass every window
    log.write_text("\n".join(lines[:3]) + "\n")
    assert UsageStats.from_log(log).routed == {"s/a": 1}


@pytest.mark.usefixtures("usual_umask")
def test_a_json_file_sink_creates_its_file_for_its_owner_only(tmp_path: Path) -> None:
    JsonFileSink(tmp_path / "events.jsonl").close()
    assert file_mode(tmp_path / "events.jsonl") == "-rw-------"


@pytest.mark.usefixtures("usual_umask")
def test_a_json_file_sink_keeps_the_mode_of_a_file_that_exists(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.touch(mode=0o644)
    JsonFileSink(log).close()
    assert file_mode(log) == "-rw-r--r--"


def _calls(count: int) -> list[VerifyEvent]:
    return [
        VerifyEvent(turn_id=f"t{n}", name="get_me", tool_id="github/get_me", ok=True)
        for n in range(count)
    ]


def test_a_line_a_full_disk_cut_short_is_ended_by_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk filling up mid-line leaves part of it written: the rest goes first at the next
    write that succeeds, so no line is left cut short, and no event runs into it."""
    log = tmp_path / "events.jsonl"
    sink = JsonFileSink(log)
    events = _calls(4)
    sink.emit(events[0])
    real_write = os.write

    def filled_up(fd: int, data: bytes) -> int:  # the disk takes 40 bytes, then is full
        return real_write(fd, data[:40])

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", filled_up)
    sink.emit(events[1])
    monkeypatch.setattr(os, "write", full)
    sink.emit(events[2])  # lost: nothing of it reached the disk
    monkeypatch.undo()
    sink.emit(events[3])
    sink.close()
    lines = log.read_text(encoding="utf-8").splitlines()
    assert lines == [events[n].to_json() for n in (0, 1, 3)]
    assert UsageStats.from_log(log).called == {"github/get_me": 3}


def test_a_json_file_sink_starts_a_line_of_its_own_after_one_cut_short(tmp_path: Path) -> None:
    """A writer stopped mid-line (killed, a disk that stayed full) leaves a line without its
    end: the next writer's first event does not run into it."""
    log = tmp_path / "events.jsonl"
    cut = _calls(1)[0].to_json()[:40]
    log.write_text(cut, encoding="utf-8")
    event = _calls(2)[1]
    sink = JsonFileSink(log)
    sink.emit(event)
    sink.close()
    assert log.read_text(encoding="utf-8").splitlines() == [cut, event.to_json()]


@pytest.mark.parametrize("ending", ["", "\n"])
def test_a_json_file_sink_appends_to_a_file_where_there_is_no_pread_nor_o_nonblock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """Windows has neither: a sink opened on a file with events already in it (a gateway
    started again) was an AttributeError naming ``os.O_NONBLOCK``."""
    monkeypatch.delattr(os, "O_NONBLOCK", raising=False)
    monkeypatch.delattr(os, "pread", raising=False)
    log = tmp_path / "events.jsonl"
    before = _calls(1)[0].to_json()[: None if ending else 40]
    log.write_text(before + ending, encoding="utf-8")
    event = _calls(2)[1]
    sink = JsonFileSink(log)
    sink.emit(event)
    sink.close()
    assert log.read_text(encoding="utf-8").splitlines() == [before, event.to_json()]


@pytest.mark.usefixtures("usual_umask")
def test_a_json_file_sink_follows_its_path_when_the_file_is_moved_or_deleted(
    tmp_path: Path,
) -> None:
    """logrotate moves the file away: events written on into it were out of sight, and into
    a deleted one lost, its disk space kept for as long as the writer ran."""
    log, rotated = tmp_path / "events.jsonl", tmp_path / "events.jsonl.1"
    sink = JsonFileSink(log)
    events = _calls(3)
    sink.emit(events[0])
    log.rename(rotated)
    sink.emit(events[1])
    assert rotated.read_text(encoding="utf-8").splitlines() == [events[0].to_json()]
    assert log.read_text(encoding="utf-8").splitlines() == [events[1].to_json()]
    assert file_mode(log) == "-rw-------"
    log.unlink()
    sink.emit(events[2])
    sink.close()
    assert log.read_text(encoding="utf-8").splitlines() == [events[2].to_json()]


def _descriptors_open_on(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds a descriptor of."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [name for name in names if name.startswith(str(folder))]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_json_file_sink_let_go_unclosed_closes_its_file(tmp_path: Path) -> None:
    # A raw descriptor has no destructor: a server making a sink per tenant or per request,
    # and letting it go, ran out of descriptors (200 sinks, 200 descriptors).
    log = tmp_path / "events.jsonl"
    for _ in range(3):
        sink = JsonFileSink(log)
        sink.emit(_calls(1)[0])
        log.rename(tmp_path / "events.jsonl.1")  # the next event opens the file again
        sink.emit(_calls(1)[0])
        assert len(_descriptors_open_on(tmp_path)) == 1
        del sink
    assert _descriptors_open_on(tmp_path) == []


def test_a_json_file_sink_says_once_that_it_cannot_write_and_when_it_can_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk fails every event: one warning per event would flood the log."""
    log = tmp_path / "events.jsonl"
    sink = JsonFileSink(log)
    events = _calls(102)

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with caplog.at_level(logging.WARNING, logger="toolgate.telemetry"):
        for event in events[:100]:
            sink.emit(event)
        monkeypatch.undo()
        sink.emit(events[100])
        sink.emit(events[101])
    sink.close()
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        f"events not written to {log}: No space left on device; "
        "more are dropped, without a word, until writing works again",
        f"events written to {log} again: 100 were dropped",
    ]
    assert log.read_text(encoding="utf-8").splitlines() == [e.to_json() for e in events[100:]]


def test_a_json_file_sink_whose_folder_is_gone_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    sink = JsonFileSink(folder / "events.jsonl")
    (folder / "events.jsonl").rename(tmp_path / "kept.jsonl")
    folder.rmdir()
    with caplog.at_level(logging.WARNING, logger="toolgate.telemetry"):
        for event in _calls(5):
            sink.emit(event)
    sink.close()
    assert [r.getMessage() for r in caplog.records] == [
        f"events go on into the file moved from {folder / 'events.jsonl'}, which cannot be "
        "opened again: No such file or directory"
    ]
    assert len((tmp_path / "kept.jsonl").read_text(encoding="utf-8").splitlines()) == 5


class _CountedId(str):
    """A tool id that counts the comparisons made with it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        type(self).compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_usage_reports_compare_each_tool_a_few_times_not_with_every_other() -> None:
    """Each report held the lock every emit waits for, while it tested each tool seen
    against the whole registry: seconds for a catalog of 16,000 tools."""
    ids = [_CountedId(f"s/tool_{n}") for n in range(500)]
    stats = UsageStats(ids)
    stats.emit(RouteEvent(turn_id="t", active=tuple(ids)))
    stats.emit(PromoteEvent(turn_id="t", active=tuple(ids)))
    stats.emit(VerifyEvent(turn_id="t", name="tool_0", tool_id=ids[0], ok=True))
    _CountedId.compared = 0
    report = stats.to_dict()
    stats.pruning_report()
    assert stats.never_called() == ids[1:]
    assert stats.never_routed() == []
    assert report["tools"] == len(ids)
    assert _CountedId.compared < 10 * len(ids)


# In a process of its own, as tests/test_forks.py: each sink's lock is held by another thread
# at the fork; the child then emits to each. Exits 0 if it could, 3 if a lock stayed held.
_EMIT_AFTER_FORK = """
import os, signal, sys, threading
from toolgate.telemetry import JsonFileSink, MemorySink, UsageStats, VerifyEvent

sinks = [JsonFileSink(sys.argv[1]), MemorySink(), UsageStats(["s/a"])]
held, done = threading.Barrier(len(sinks) + 1), threading.Event()

def hold(sink):
    with sink._lock:
        held.wait(10)
        done.wait(10)

holders = [threading.Thread(target=hold, args=(sink,)) for sink in sinks]
for holder in holders:
    holder.start()
held.wait(10)
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
    signal.alarm(5)
    for sink in sinks:
        sink.emit(VerifyEvent(name="a", tool_id="s/a", ok=True))
    os._exit(0)
status = os.waitpid(pid, 0)[1]
done.set()
for holder in holders:
    holder.join()
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_sinks_made_before_a_fork_take_events_in_the_child(tmp_path: Path) -> None:
    """A router made before a fork serves in the child (docs/api.md): a sink lock another
    thread held at the fork stayed held there, and the child's first route hung."""
    log = tmp_path / "events.jsonl"
    run = subprocess.run(
        [sys.executable, "-c", _EMIT_AFTER_FORK, str(log)], timeout=60, check=False
    )
    assert run.returncode == 0
    assert UsageStats.from_log(log).called == {"s/a": 1}


def test_replay_passes_over_other_programs_lines_not_in_utf8(tmp_path: Path) -> None:
    """One Latin-1 line of another program stopped toolgate stats at it."""
    log = tmp_path / "events.log"
    event = _log_lines(RouteEvent(turn_id="t1", active=("s/a",)))[0].encode()
    log.write_bytes(b"myapp: caf\xe9 opened\n" + event + b'\nmyapp {"kind": "caf\xe9"}\n')
    assert UsageStats.from_log(log).routed == {"s/a": 1}
    log.write_bytes(event + b"\n" + event.replace(b"t1", b"t\xe9") + b"\n")
    with pytest.raises(InvalidInputError, match=r"line 2: not UTF-8 \(byte 0xe9\)"):
        UsageStats.from_log(log)  # toolgate's own line damaged: said, not skipped

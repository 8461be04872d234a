"""UsageStats counts turns in bounded memory, with the figures of a full set of ids."""

from __future__ import annotations

import copy
import pickle
import tracemalloc

import pytest

from toolgate.telemetry import usage
from toolgate.telemetry.events import PromoteEvent, RouteEvent, VerifyEvent
from toolgate.telemetry.usage import UsageStats


def test_a_turn_counts_once_whatever_the_events_between_its_own() -> None:
    stats = UsageStats(["s/a"])
    for n in range(10):
        stats.emit(RouteEvent(turn_id=f"t{n}", active=("s/a",)))
    for n in range(10):  # every turn's call after every other turn's route
        stats.emit(PromoteEvent(turn_id=f"t{n}", active=("s/a",)))
        stats.emit(VerifyEvent(turn_id=f"t{n}", name="a", tool_id="s/a", ok=True))
    stats.emit(VerifyEvent(name="a", tool_id="s/a", ok=True))  # no turn id: no turn
    assert stats.to_dict()["turns"] == 10


def test_turns_of_a_long_lived_process_take_bounded_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every turn id seen was kept: a process serving for weeks grew without end."""
    monkeypatch.setattr(usage, "RECENT_TURNS", 100)
    stats = UsageStats(["s/a"])
    events = [RouteEvent(turn_id=f"turn-{n:040d}", active=("s/a",)) for n in range(20_000)]
    tracemalloc.start()
    try:
        for event in events:
            stats.emit(event)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats.to_dict()["turns"] == 20_000
    assert held < 500_000  # the 20,000 ids kept held about 2.5 MB


def test_a_turn_id_seen_again_past_the_window_counts_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(usage, "RECENT_TURNS", 3)
    stats = UsageStats()
    for turn in ["a", "b", "a", "c", "d", "a", "e", "f", "g", "a"]:
        stats.emit(VerifyEvent(turn_id=turn, name="x"))
    # "a" stays remembered while seen within 3 other turns; after e, f and g it is new.
    assert stats.turns == 8


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_stats_travel_between_processes_and_keep_counting(how: str) -> None:
    """A pool's workers send their stats back pickled to be merged: the lock refused it."""
    stats = UsageStats(["s/a", "s/b"])
    stats.emit(RouteEvent(turn_id="t1", active=("s/a",)))
    stats.emit(VerifyEvent(turn_id="t1", name="a", tool_id="s/a", ok=True))
    back = pickle.loads(pickle.dumps(stats)) if how == "pickle" else copy.deepcopy(stats)
    assert back.to_dict() == stats.to_dict()
    # Each counts on its own from here, the copy under a lock of its own.
    back.emit(VerifyEvent(turn_id="t1", name="b", tool_id="s/b", ok=True))
    back.emit(RouteEvent(turn_id="t2", active=("s/b",)))
    assert (back.never_called(), stats.never_called()) == ([], ["s/b"])
    assert (back.to_dict()["turns"], stats.to_dict()["turns"]) == (2, 1)
    assert back._lock is not stats._lock


def test_made_up_names_are_counted_in_bounded_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every distinct name the model made up was a counter for the process's life."""
    monkeypatch.setattr(usage, "MAX_UNKNOWN_NAMES", 3)
    stats = UsageStats(["s/a"])
    for name in ["x", "y", "x", "z", "w", "v", "y"]:
        stats.emit(VerifyEvent(name=name, ok=False, error="unknown_tool"))
    assert stats.to_dict()["unknown_tools"] == {"x": 2, "y": 2, "z": 1, usage.OTHER_NAMES: 2}

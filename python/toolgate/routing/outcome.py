"""From the core's outcome of one route to the :class:`~toolgate.routing.result.RouteResult`.

The core answers in rows (``_toolgate.RouteOutcome``); the result speaks in tool ids, says why
each forced tool is in, names the flags a gated tool misses and reports what ``select:`` or
``include`` named that no tool has.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from toolgate import _toolgate
from toolgate.errors import InvalidInputError
from toolgate.routing.result import GatedOut, RoutedTool, RouteResult
from toolgate.routing.state import FlagVocabulary

__all__ = ["Turn", "check_current", "route_result"]


@dataclass
class Turn:
    """What a route knows besides the core's outcome: the query, why each forced row is in
    (a row not listed is pinned), names of no tool, how the query was read when that is not
    what it says (``notes``), and the time spent so far."""

    query: str
    form: str
    start: float
    reasons: Mapping[int, str] = field(default_factory=dict)
    unknown: Sequence[str] = ()
    notes: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)

    def lap(self, name: str, since: float) -> float:
        """Record the milliseconds from ``since`` to now under ``name``; now."""
        now = time.perf_counter()
        self.timings_ms[name] = (now - since) * 1e3
        return now


def route_result(
    outcome: _toolgate.RouteOutcome,
    turn: Turn,
    *,
    ids: Sequence[str],
    vocabulary: FlagVocabulary,
    catalog_version: str,
    shut_out: Iterable[tuple[int, str]] = (),
    ranked: Sequence[_toolgate.RoutedRow] | None = None,
    forced: Sequence[_toolgate.RoutedRow] | None = None,
    no_tool: tuple[bool, float | None] = (False, None),
) -> RouteResult:
    """The result of one route: ``outcome``'s rows as tools, then ``shut_out`` rows (those
    selected that the caller's allow or deny list kept out) after the gated ones.

    ``ranked`` replaces the outcome's ranked rows (adaptive selection's cut, with any rows
    a clause added: ``turn.reasons`` says which); ``forced`` likewise replaces its forced rows
    (less those a learned lift added, which compete with the ranked ones); ``no_tool`` is the
    decision that the request needs no tool and its confidence."""
    tools = [
        RoutedTool(ids[r.row], r.fused, r.dense, r.bm25, turn.reasons.get(r.row, "pinned"))
        for r in (outcome.forced if forced is None else forced)
    ]
    tools += [
        RoutedTool(
            ids[r.row],
            r.fused,
            r.dense,
            r.bm25,
            turn.reasons.get(r.row, "ranked"),
            None if r.copy_of is None else ids[r.copy_of],
        )
        for r in (outcome.ranked if ranked is None else ranked)
    ]
    gated_out = [
        GatedOut(
            ids[gated.row],
            gated.fused,
            tuple(missing := vocabulary.describe(gated.missing_flags)),
            "requires " + ", ".join(missing),
        )
        for gated in outcome.gated
    ]
    gated_out += [GatedOut(ids[row], 0.0, (), reason) for row, reason in shut_out]
    timings = turn.timings_ms
    timings["total"] = (time.perf_counter() - turn.start) * 1e3
    return RouteResult(
        query=turn.query,
        form=turn.form,
        tools=tuple(tools),
        gated_out=tuple(gated_out),
        n_gated=outcome.n_gated,
        n_out_of_scope=outcome.n_out_of_scope,
        unknown=tuple(dict.fromkeys(turn.unknown)),
        notes=turn.notes,
        timings_ms={key: round(value, 4) for key, value in timings.items()},
        catalog_version=catalog_version,
        no_tool=no_tool[0],
        no_tool_confidence=None if no_tool[1] is None else round(no_tool[1], 4),
    )


def check_current(result: object, catalog_version: str) -> None:
    """Raise :class:`InvalidInputError` unless ``result`` is a :class:`RouteResult` of the
    catalog at ``catalog_version`` (a result that records no version passes)."""
    if not isinstance(result, RouteResult):
        raise InvalidInputError(
            f"expected the RouteResult of this router's route(), got {type(result).__name__}"
        )
    if result.catalog_version and result.catalog_version != catalog_version:
        raise InvalidInputError(
            f"the route result is for catalog version {result.catalog_version}, "
            f"this router serves {catalog_version}"
        )

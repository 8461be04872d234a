"""Fit the router's threshold, fusion weight and selection on labelled queries.

As the Tool Attention paper describes: sweep the ISO (cosine) threshold over [0.10, 0.50] in
steps of 0.02 and keep the value that maximises F1 of the routed set against the gold tools.
F1 is micro-averaged over (query, tool) pairs: a routed tool matching no gold entry is a false
positive, a gold entry matched by no routed tool a false negative, so queries with empty gold
reward routing nothing. Those only ever add false positives, so a set needs at least one query
with gold tools to be fitted.

The fusion weight ``alpha`` orders the tools, and F1 of a set cut by a threshold cannot judge
an order: of the router's own and :data:`ALPHAS`, the one with the best nDCG at ``top_k`` of
the fused order is taken, the router's own unless another beats it by :data:`ALPHA_MARGIN`.
The threshold is then the F1-best at that ``alpha`` of those that keep recall within
:data:`RECALL_TOLERANCE` of the lowest threshold's, since F1 alone buys precision with needed
tools (docs/design.md, "What calibrate fits the floor and alpha by"). The curve still covers
every ``alpha``. With fewer gold entries than ``1 / RECALL_TOLERANCE`` one entry moves recall
by more than that tolerance, so the floor would be fitted to the sample's lowest gold cosine:
the router's own threshold is kept, and :attr:`CalibrationReport.notes` says so.

First, ``row_centring`` (:mod:`toolgate.routing.centring`): of :data:`ROW_CENTRINGS` and the
router's own share, the one with the best nDCG at ``top_k`` on the queries with gold, taken
only when it beats the router's own by :data:`CENTRING_MARGIN`; every other share is a router
centred anew from the stored rows (``Router.recentred``, no model run), and what follows is
fitted on the chosen one, whose cosines the threshold is read against.

For a catalog of several servers, ``server_weight`` (:mod:`toolgate.routing.servers`) is
fitted next: of :data:`SERVER_WEIGHTS`, the one with the best nDCG at ``top_k`` on the queries
with gold, kept only when it beats no server signal by :data:`SERVER_MARGIN` (it helps
catalogs of real servers and costs those whose "servers" are loose groupings).

Then ``name_weight`` (the share of a tool name's words the request holds, in the order of the
ranking's head): of :data:`NAME_WEIGHTS` and the router's own weight, the one with the best
nDCG at ``top_k``, taken only when it beats the router's own by :data:`NAME_MARGIN` (catalogs
whose names are their topic, and multi-tool requests, gain from more).

Each of these four ranking choices takes another value than the reference only when its
per-query nDCG gain also beats twice its standard error (:mod:`.ranking_choice`: on a small
set one rank swap beats the margin); a gain within noise leaves the reference and a note.

Then adaptive selection (:mod:`toolgate.routing.selection`) is fitted under the fitted
ranking: of ``min_tools`` x ``keep_ratio``, the point that sends the fewest schema tokens
while keeping completeness (every gold tool shown) within ``tolerance`` of what the plain top
``top_k`` holds, so a deployment trades a known share of completeness for tokens. When no
point does, the most complete is taken, and the report says so
(:attr:`CalibrationReport.selection_goal_met` is false). From fewer queries with gold than
``1 / tolerance`` it is not fitted (the router's own stays; the report's ``notes`` say so).

With ``false_rejections`` (``--false-rejections RATE``), the "no tool needed" threshold
(:mod:`toolgate.routing.no_tool`) is fitted last: the lowest confidence that rejects at most
``RATE`` of the queries with gold, whatever it does to those without (it reports the share
of them it rejects); only queries the decision applies to count (no ``select:``, named tool
or ``+term`` word). From fewer queries with gold than resolve ``RATE``
(:data:`MIN_NO_TOOL_QUERIES`, and ``1 / RATE``) it is not fitted (the router's own stays; the
report's ``notes`` say so).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from toolgate import _toolgate
from toolgate.arguments import check_count, check_flag, check_share, number_list
from toolgate.errors import InvalidInputError
from toolgate.evaluation.calibration_report import (
    AlphaPoint,
    CalibrationPoint,
    CalibrationReport,
    CentringPoint,
    NamePoint,
    NoToolPoint,
    SelectionPoint,
    ServerPoint,
)
from toolgate.evaluation.evaluate import (
    LabelledQuery,
    labelled_queries,
    progress_bar,
    unmatched_summary,
)
from toolgate.evaluation.metrics import distinct_gold, gold_hits, ndcg
from toolgate.evaluation.ranking_choice import SIGNIFICANCE_Z, Ranked, choose
from toolgate.routing.router import Router, RouterConfig

__all__ = [
    "AlphaPoint",
    "CalibrationPoint",
    "CalibrationReport",
    "CentringPoint",
    "NamePoint",
    "SelectionPoint",
    "ServerPoint",
    "calibrate",
    "check_fittable",
    "fit_name_weight",
    "fit_no_tool",
    "fit_row_centring",
    "fit_selection",
    "fit_server_weight",
    "selection_floor",
]

THRESHOLDS = tuple(round(0.10 + 0.02 * i, 2) for i in range(21))
ALPHAS = tuple(round(0.1 * i, 1) for i in range(11))
#: What another ``alpha`` must add to nDCG at ``top_k`` over the router's own to be taken.
ALPHA_MARGIN = 0.005
#: Recall the fitted threshold may give up against the lowest one tried.
RECALL_TOLERANCE = 0.01
MIN_TOOLS = (1, 2, 3, 4)
KEEP_RATIOS = (0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
#: Completeness the fitted selection may give up against the plain top ``top_k``.
TOLERANCE = 0.05
#: The server weights tried; 0 (no server signal) is the reference.
SERVER_WEIGHTS = (0.0, 0.2, 0.35)
#: What a server weight must add to nDCG at ``top_k`` over none to be kept: less is noise.
SERVER_MARGIN = 0.005
#: The name weights tried beside the router's own, which is the reference.
NAME_WEIGHTS = (0.0, 0.4, 0.6)
#: What another name weight must add to nDCG at ``top_k`` over the router's own to be taken.
NAME_MARGIN = 0.005
#: The row centring shares tried beside the router's own, which is the reference.
ROW_CENTRINGS = (0.0, 0.5, 0.75)
#: What another share must add to nDCG at ``top_k`` over the router's own to be taken.
CENTRING_MARGIN = 0.005
#: Fewest queries with gold a "no tool needed" threshold is fitted from, whatever the rate.
#: The fit is an order statistic: just above the (floor(R n) + 1)-th highest confidence of n
#: queries, which a new request needing a tool passes with a chance of about
#: (floor(R n) + 1) / (n + 1), one query's worth (1 / n) over the rate R asked for. That excess
#: stays within R itself only from n >= 1 / R (below, the fit rejects none of the sample and
#: sits at its highest confidence: 2 queries at R 0.5 gave 0.0054, rejecting nearly every
#: request), and within 0.05, the completeness a selection may give up (:data:`TOLERANCE`),
#: only from 20. No n resolves R = 0; R = 1 needs none (see :func:`_no_tool_notes`).
MIN_NO_TOOL_QUERIES = 20


@dataclass
class _Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    def point(self, alpha: float, threshold: float) -> CalibrationPoint:
        precision = self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0
        recall = self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0
        f1 = 2 * self.tp / (2 * self.tp + self.fp + self.fn) if self.tp + self.fp + self.fn else 1.0
        return CalibrationPoint(
            alpha, threshold, round(precision, 4), round(recall, 4), round(f1, 4)
        )


def calibrate(
    router: Router,
    queries: Sequence[LabelledQuery],
    *,
    alphas: Sequence[float] = ALPHAS,
    thresholds: Sequence[float] = THRESHOLDS,
    top_k: int | None = None,
    progress: bool = False,
    selection: bool = True,
    tolerance: float = TOLERANCE,
    false_rejections: float | None = None,
    centring: bool = True,
) -> CalibrationReport:
    """With ``centring``, fit the row centring first (:func:`fit_row_centring`; the report's
    ``config`` then names the share, and a saved router must be ``router.recentred`` to it);
    sweep ``alphas`` (and the router's own) x ``thresholds`` over ``queries``, take the
    ``alpha`` of the best nDCG (see the module) and return the F1-best point at it; then
    fit the server weight under it (:func:`fit_server_weight`), then the name weight
    (:func:`fit_name_weight`); with
    ``selection``, then fit adaptive selection under both (:func:`fit_selection`); with
    ``false_rejections``, then the "no tool needed" threshold (:func:`fit_no_tool`).

    Each query is embedded once; every point reuses its dense and BM25 scores. Every
    argument is checked first, as ``toolgate calibrate`` checks its options: a wrong one
    must not cost a sweep before it is said.
    """
    queries = labelled_queries(queries)
    check_fittable(queries)
    alphas = number_list(alphas, "alphas", 0.0, 1.0)
    thresholds = number_list(thresholds, "thresholds", -1.0, 1.0)  # cosines
    if not thresholds:
        raise InvalidInputError("thresholds is empty: no threshold to fit")
    if top_k is not None:
        check_count("top_k", top_k, minimum=1)  # 0 read as "the router's own" before
    for name, flag in (("progress", progress), ("selection", selection), ("centring", centring)):
        check_flag(name, flag)
    check_share("tolerance", tolerance)
    if false_rejections is not None:
        check_share("false_rejections", false_rejections)
    # Gold entries asking for one tool count once, as toolgate eval counts them.
    queries = [replace(item, gold=distinct_gold(item.gold, router.catalog)) for item in queries]
    n, shown = unmatched_summary(router.catalog, queries)
    if n == sum(len(item.gold) for item in queries):
        # Nothing could be found: every figure is 0, and each fit keeps its first setting.
        raise InvalidInputError(
            f"no gold entry of the queries names a tool of the catalog ({shown}): nothing to fit"
        )
    k = router.config.top_k if top_k is None else top_k
    centring_curve: tuple[CentringPoint, ...] = ()
    noise: tuple[str, ...] = ()  # the ranking settings a gain within noise did not move
    if centring:
        router, centring_curve, noise = fit_row_centring(
            router, queries, top_k=k, progress=progress
        )
    own = router.config.alpha
    alphas = list(dict.fromkeys([own, *alphas]))
    counts = {(a, t): _Counts() for a in alphas for t in thresholds}
    # nDCG and completeness of each query with gold, per alpha: the choice is paired.
    ordered: dict[float, tuple[list[float], list[bool]]] = {a: ([], []) for a in alphas}
    ids = router.catalog.ids
    names = [tool.name for tool in router.catalog.tools]
    for item in progress_bar(queries, progress, "calibrating"):
        cosine, dense, sparse = router._scores(item.query)
        for alpha in alphas:
            fused = _toolgate.fuse(
                dense,
                sparse,
                alpha=alpha,
                method=router.config.fusion,
                top=router.config.fusion_top,
            )
            order = np.lexsort((np.arange(len(fused)), -fused))[:k]
            if item.gold:
                ranks = gold_hits(item.gold, [ids[r] for r in order], [names[r] for r in order])
                ordered[alpha][0].append(ndcg(ranks, k))
                ordered[alpha][1].append(all(ranks))
            for threshold in thresholds:
                rows = [row for row in order if cosine[row] >= threshold]
                routed = [ids[row] for row in rows]
                _count(counts[(alpha, threshold)], item.gold, routed, [names[r] for r in rows])
    by_alpha = {a: Ranked(tuple(gain), tuple(done)) for a, (gain, done) in ordered.items()}
    alpha_curve = tuple(AlphaPoint(a, *ranked.figures) for a, ranked in by_alpha.items())
    alpha, unsure = choose(by_alpha, own, ALPHA_MARGIN, "alpha")
    curve = tuple(counts[key].point(*key) for key in counts)
    at_alpha = [point for point in curve if point.alpha == alpha]
    # A floor that cuts a needed tool costs more than a schema too many: of the thresholds
    # that keep recall within RECALL_TOLERANCE of the lowest one's, the F1-best.
    lowest = min(at_alpha, key=lambda p: p.threshold)
    kept = [point for point in at_alpha if point.recall >= lowest.recall - RECALL_TOLERANCE]
    best = max(kept, key=lambda p: (p.f1, p.recall, -p.threshold))
    few = _floor_notes(queries, router.config.threshold)
    floor = router.config.threshold if few else best.threshold
    config = replace(router.config, alpha=alpha, threshold=floor)
    weight, servers, server_noise = fit_server_weight(
        router.with_config(config), queries, top_k=k, progress=progress
    )
    config = replace(config, server_weight=weight)
    view = router.with_config(config)
    weight, name_curve, name_noise = fit_name_weight(view, queries, top_k=k, progress=progress)
    config = replace(config, name_weight=weight)
    notes = (*few, *noise, *unsure, *server_noise, *name_noise)
    report = CalibrationReport(
        best, curve, len(queries), k, config, server_curve=servers, centring_curve=centring_curve,
        name_curve=name_curve, alpha_curve=alpha_curve, notes=notes,
    )  # fmt: skip
    few = _selection_notes(queries, tolerance, router.config) if selection else ()
    if few:
        report = replace(report, notes=(*notes, *few))
    elif selection:
        fitted = fit_selection(
            router.with_config(config), queries, top_k=k, tolerance=tolerance, progress=progress
        )
        chosen, points, reference = fitted
        config = replace(config, min_tools=chosen.min_tools, keep_ratio=chosen.keep_ratio)
        report = replace(
            report, config=config, selection=chosen, selection_curve=points,
            top_k_complete=reference, selection_target=selection_floor(reference, tolerance),
        )  # fmt: skip
    if false_rejections is not None:
        view = router.with_config(config)
        relevant, irrelevant = _no_tool_confidences(view, queries, k, progress)
        few = _no_tool_notes(len(relevant), false_rejections, config.no_tool_threshold)
        if few:
            return replace(report, notes=(*report.notes, *few))
        point = _no_tool_point(relevant, irrelevant, false_rejections)
        config = replace(config, no_tool_threshold=point.threshold)
        report = replace(report, config=config, no_tool=point)
    return report


def _no_tool_notes(n: int, rate: float, own: float | None) -> tuple[str, ...]:
    """Why the "no tool needed" threshold is not fitted to ``rate`` from ``n`` queries with
    gold, if it is not (:data:`MIN_NO_TOOL_QUERIES`). A rate of 1 is met by every threshold:
    the lowest, 0, reads no confidence, so any sample with one query gives it."""
    head = f"no_tool_threshold not fitted: {n} queries with gold the decision applies to"
    kept = f"kept the router's own ({own})"
    if rate == 0:
        return (
            f"{head}; a false-rejection rate of 0 is resolved by no sample (the fit sits just "
            f"above the highest confidence, which about 1 in n + 1 new requests needing a tool "
            f"pass); {kept}; ask for 1 / n or more from n >= {MIN_NO_TOOL_QUERIES} queries",
        )
    need = 1 if rate == 1 else max(MIN_NO_TOOL_QUERIES, math.ceil(1 / rate - 1e-9))
    if n >= need:
        return ()
    moves = f", one moves the rate by {1 / n:.3g}" if n else ""
    return (
        f"{head}{moves}; a false-rejection rate of {rate} needs at least {need} to be "
        f"resolved; {kept}; label at least {need}",
    )


def _selection_notes(
    queries: Sequence[LabelledQuery], tolerance: float, own: RouterConfig
) -> tuple[str, ...]:
    """Why the selection is not fitted on ``queries``, if it is not: with fewer queries with
    gold than ``1 / tolerance``, one moves completeness by more than the tolerance, so the
    fit took the fewest tools the sample allowed (10 MetaTool queries gave min_tools 1:
    held-out complete 0.63 against 0.75). A tolerance of 0 asks for exactly that."""
    n = sum(1 for item in queries if item.gold)
    if tolerance == 0 or n * tolerance >= 1 - 1e-9:
        return ()
    return (
        f"min_tools and keep_ratio not fitted: {n} queries with gold, one moves completeness "
        f"by {1 / n:.3g}, more than the tolerance {tolerance}; kept the router's own "
        f"({own.min_tools}, {own.keep_ratio}); label at least {math.ceil(1 / tolerance)}",
    )


def _floor_notes(queries: Sequence[LabelledQuery], own: float | None) -> tuple[str, ...]:
    """Why the floor is not fitted on ``queries``, if it is not: with fewer gold entries than
    ``1 / RECALL_TOLERANCE``, keeping recall within that tolerance means losing no entry, and
    F1 then puts the floor just under the sample's lowest gold cosine (10 MetaTool queries
    gave 0.34: held-out recall@10 0.60 against 0.85, a fifth of the requests routed nothing)."""
    entries = sum(len(item.gold) for item in queries)
    if entries * RECALL_TOLERANCE >= 1 - 1e-9:
        return ()
    return (
        f"threshold not fitted: {entries} gold entries, one moves recall by "
        f"{1 / entries:.3g}, more than the {RECALL_TOLERANCE} the floor may give up; "
        f"kept the router's own ({own}); label at least {math.ceil(1 / RECALL_TOLERANCE)}",
    )


def fit_no_tool(
    router: Router,
    queries: Sequence[LabelledQuery],
    false_rejections: float,
    *,
    top_k: int,
    progress: bool = False,
) -> NoToolPoint:
    """The lowest "no tool needed" threshold that rejects at most ``false_rejections`` of
    the ``queries`` with gold, and what it rejects of those without: of the queries the
    decision applies to (:func:`_no_tool_confidences`)."""
    check_share("false_rejections", false_rejections)
    check_fittable(queries)
    relevant, irrelevant = _no_tool_confidences(router, queries, top_k, progress)
    if not relevant:
        raise InvalidInputError(
            "no query with gold that the decision applies to (select:, a named tool or a "
            "+term word always gets its tools): no false-rejection rate to fit"
        )
    return _no_tool_point(relevant, irrelevant, false_rejections)


def _no_tool_confidences(
    router: Router, queries: Sequence[LabelledQuery], top_k: int, progress: bool
) -> tuple[list[float], list[float]]:
    """The "no tool needed" confidence of each query with gold, and of each without, that
    the decision applies to. A ``select:``, a named tool, a ``+term`` word or a learned
    request is never rejected (routing/pipeline.py): counted, a named tool's confidence
    could set the threshold, which then rejected fewer than the rate allows."""
    # At a threshold of 0 every request the decision reads is rejected; the route itself
    # says which those are, so this cannot drift from the pipeline's rules.
    probe = router.with_config(replace(router.config, no_tool_threshold=0.0))
    relevant: list[float] = []
    irrelevant: list[float] = []
    for item in progress_bar(queries, progress, "fitting no-tool"):
        result = probe.route(item.query, top_k=top_k, adaptive=False)
        if result.no_tool and result.no_tool_confidence is not None:
            (relevant if item.gold else irrelevant).append(result.no_tool_confidence)
    return relevant, irrelevant


def _no_tool_point(
    relevant: Sequence[float], irrelevant: Sequence[float], false_rejections: float
) -> NoToolPoint:
    """The lowest threshold rejecting at most ``false_rejections`` of the confidences
    ``relevant`` (not empty), and the shares of both lists it rejects."""
    ranked = sorted(relevant, reverse=True)
    allowed = math.floor(false_rejections * len(ranked) + 1e-9)
    # Just above the confidence of the first relevant query that must not be rejected; a
    # threshold above 1 would never reject, which 1.0 itself nearly never does either.
    threshold = 0.0 if allowed >= len(ranked) else min(1.0, _above(ranked[allowed]))
    return NoToolPoint(
        threshold,
        false_rejections,
        round(sum(c >= threshold for c in relevant) / len(relevant), 4),
        round(sum(c >= threshold for c in irrelevant) / len(irrelevant), 4) if irrelevant else None,
    )


def _above(confidence: float) -> float:
    """The 4-decimal number just above ``confidence`` (results report it to 4 decimals)."""
    return math.floor(confidence * 1e4 + 1) / 1e4


def fit_server_weight(
    router: Router,
    queries: Sequence[LabelledQuery],
    *,
    top_k: int,
    weights: Sequence[float] = SERVER_WEIGHTS,
    margin: float = SERVER_MARGIN,
    z: float = SIGNIFICANCE_Z,
    progress: bool = False,
) -> tuple[float, tuple[ServerPoint, ...], tuple[str, ...]]:
    """The ``server_weight`` of ``weights`` (which must hold 0) with the best nDCG at
    ``top_k`` on ``queries`` (those with gold), 0 unless it beats 0 by ``margin`` and ``z``
    standard errors (:func:`~toolgate.evaluation.ranking_choice.choose`), every point
    measured, and a note if a gain was within noise; 0 and no points for a catalog of one
    server, which has nothing to tell apart."""
    if 0.0 not in weights:
        raise InvalidInputError(f"weights must hold 0 (no server signal), got {list(weights)}")
    if len({tool.server for tool in router.catalog}) < 2:
        return 0.0, (), ()
    measured = _by_setting(router, queries, "server_weight", sorted(weights), top_k, progress)
    points = tuple(ServerPoint(w, *ranked.figures) for w, ranked in measured.items())
    weight, notes = choose(measured, 0.0, margin, "server_weight", z)
    return weight, points, notes


def fit_name_weight(
    router: Router,
    queries: Sequence[LabelledQuery],
    *,
    top_k: int,
    weights: Sequence[float] = NAME_WEIGHTS,
    margin: float = NAME_MARGIN,
    z: float = SIGNIFICANCE_Z,
    progress: bool = False,
) -> tuple[float, tuple[NamePoint, ...], tuple[str, ...]]:
    """Of the router's own ``name_weight`` and ``weights``, the one with the best nDCG at
    ``top_k`` on ``queries`` (those with gold): the router's own unless another beats it by
    ``margin`` and ``z`` standard errors (:func:`~toolgate.evaluation.ranking_choice.choose`);
    every point measured, its own first; and a note if a gain was within noise."""
    own = router.config.name_weight
    tried = list(dict.fromkeys([own, *weights]))
    measured = _by_setting(router, queries, "name_weight", tried, top_k, progress)
    points = tuple(NamePoint(w, *ranked.figures) for w, ranked in measured.items())
    weight, notes = choose(measured, own, margin, "name_weight", z)
    return weight, points, notes


def _by_setting(
    router: Router,
    queries: Sequence[LabelledQuery],
    setting: str,
    values: Sequence[float],
    top_k: int,
    progress: bool,
) -> dict[float, Ranked]:
    """:func:`_rankings` of ``router`` under each of ``values`` of the ranking setting
    ``setting`` (the same index: ``Router.with_config``), over the queries with gold."""
    check_fittable(queries)
    relevant = [item for item in queries if item.gold]
    views = {v: router.with_config(router.config.with_settings({setting: v})) for v in values}
    return _rankings(views, relevant, top_k, progress, f"fitting {setting}")


def fit_row_centring(
    router: Router,
    queries: Sequence[LabelledQuery],
    *,
    top_k: int,
    shares: Sequence[float] = ROW_CENTRINGS,
    margin: float = CENTRING_MARGIN,
    z: float = SIGNIFICANCE_Z,
    progress: bool = False,
) -> tuple[Router, tuple[CentringPoint, ...], tuple[str, ...]]:
    """The router at whichever of its own share and ``shares`` ranks ``queries`` (those with
    gold) best by nDCG at ``top_k``: ``router`` itself unless another share beats its own by
    ``margin`` and ``z`` standard errors (:func:`~toolgate.evaluation.ranking_choice.choose`);
    every point measured, its own share first; and a note if a gain was within noise."""
    check_fittable(queries)
    relevant = [item for item in queries if item.gold]
    own = router.config.row_centring
    views = {s: router if s == own else router.recentred(s) for s in dict.fromkeys([own, *shares])}
    measured = _rankings(views, relevant, top_k, progress, "fitting centring")
    points = tuple(CentringPoint(s, *ranked.figures) for s, ranked in measured.items())
    share, notes = choose(measured, own, margin, "row_centring", z)
    return views[share], points, notes


def _rankings(
    views: Mapping[float, Router],
    relevant: Sequence[LabelledQuery],
    top_k: int,
    progress: bool,
    label: str,
) -> dict[float, Ranked]:
    """nDCG and completeness at ``top_k`` of each router of ``views`` (by the setting it was
    made with) on each query of ``relevant``: each query is routed once per router, and the
    choice pairs them query by query."""
    gains: dict[float, list[float]] = {key: [] for key in views}
    complete: dict[float, list[bool]] = {key: [] for key in views}
    for item in progress_bar(relevant, progress, label):
        for key, view in views.items():
            # decide=False: the "no tool needed" decision is fitted on its own, last; the
            # router's current threshold (fitted before, maybe) must not blank queries here.
            ids = view.route(item.query, top_k=top_k, adaptive=False, decide=False).ids
            ranks = gold_hits(item.gold, ids, [view.catalog[i].name for i in ids])
            gains[key].append(ndcg(ranks, top_k))
            complete[key].append(all(ranks))
    return {key: Ranked(tuple(gains[key]), tuple(complete[key])) for key in views}


def fit_selection(
    router: Router,
    queries: Sequence[LabelledQuery],
    *,
    top_k: int,
    tolerance: float = TOLERANCE,
    min_tools: Sequence[int] = MIN_TOOLS,
    keep_ratios: Sequence[float] = KEEP_RATIOS,
    progress: bool = False,
) -> tuple[SelectionPoint, tuple[SelectionPoint, ...], float]:
    """The (min_tools, keep_ratio) that shows the fewest schema tokens while completeness on
    ``queries`` (those with gold) stays at :func:`selection_floor` or above (the most
    complete point when none does), every point measured, and the plain top ``top_k``'s
    completeness."""
    check_share("tolerance", tolerance)
    relevant = [item for item in queries if item.gold]
    check_fittable(relevant)
    grid = [(m, r) for m in min_tools if m <= top_k for r in keep_ratios]
    views = {key: router.with_config(_selecting(router.config, *key)) for key in grid}
    sums = {key: [0.0, 0.0, 0.0] for key in grid}
    reference = 0.0
    catalog = router.catalog
    for item in progress_bar(relevant, progress, "fitting selection"):
        # One query at a time through every point: its embedding is computed once.
        # Without the "no tool needed" decision, as in _rankings.
        plain = router.route(item.query, top_k=top_k, adaptive=False, decide=False).ids
        reference += _complete(item.gold, plain, catalog)
        for key, view in views.items():
            shown = view.route(item.query, top_k=top_k, adaptive=True, decide=False).ids
            total = sums[key]
            total[0] += _complete(item.gold, shown, catalog)
            total[1] += len(shown)
            total[2] += sum(catalog[i].token_count("openai", compact=True) for i in shown)
    n = len(relevant)
    points = tuple(
        SelectionPoint(m, r, round(c / n, 4), round(t / n, 2), round(x / n, 1))
        for (m, r), (c, t, x) in sums.items()
    )
    complete = round(reference / n, 4)
    floor = selection_floor(complete, tolerance)
    within = [p for p in points if p.complete >= floor]
    if within:
        chosen = min(within, key=lambda p: (p.schema_tokens, -p.complete))
    else:
        chosen = max(points, key=lambda p: (p.complete, -p.schema_tokens))
    return chosen, points, complete


def selection_floor(top_k_complete: float, tolerance: float) -> float:
    """The completeness a fitted selection must keep: the plain top k's, as reported, less
    ``tolerance``; rounded as the points are, so the report's figures check against it."""
    return round(top_k_complete - tolerance, 4)


def _selecting(config: RouterConfig, min_tools: int, keep_ratio: float) -> RouterConfig:
    return replace(config, adaptive=True, min_tools=min_tools, keep_ratio=keep_ratio)


def _complete(gold: Sequence[str], ids: Sequence[str], catalog: Any) -> bool:
    """Whether every gold entry matches a tool of ``ids``."""
    return all(gold_hits(gold, ids, [catalog[i].name for i in ids]))


def check_fittable(queries: Sequence[LabelledQuery], source: str = "the query set") -> None:
    """Raise :class:`InvalidInputError` unless some query in ``queries`` has gold tools.

    Without one, F1 has no true positive to find: every point that routes nothing ties at 1.0,
    so the fitted threshold would be arbitrary. ``source`` names the set in the message.
    """
    if not queries:
        raise InvalidInputError(f"no queries in {source}")
    if not any(item.gold for item in queries):
        raise InvalidInputError(
            f"no query in {source} has gold tools; calibrate needs at least one (queries with"
            " empty gold only add false positives)"
        )


def _count(counts: _Counts, gold: Sequence[str], routed: list[str], names: list[str]) -> None:
    ranks = gold_hits(gold, routed, names)
    found = sum(1 for rank in ranks if rank > 0)
    counts.tp += found
    counts.fn += len(ranks) - found
    matched_positions = {rank for rank in ranks if rank > 0}
    counts.fp += len(routed) - len(matched_positions)

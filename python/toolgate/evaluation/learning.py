"""``toolgate eval --learn-first F``: routing quality before and after learning from use.

The gold of the first fraction ``F`` of the queries (in file order) is fed to the router as
feedback, as an agent's traffic would (the tools that served each request); the rest are
evaluated twice, without the memory and with it. Nothing of the evaluated queries is learned.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolgate.errors import InvalidInputError
from toolgate.evaluation.evaluate import LabelledQuery, evaluate, labelled_queries, progress_bar
from toolgate.evaluation.metrics import accepted_tools
from toolgate.routing.feedback import LearnConfig

if TYPE_CHECKING:
    from toolgate.routing.router import Router

__all__ = ["evaluate_learning", "split_for_learning"]

#: The evaluation feeds a day's traffic in seconds: the rate cap, meant for a flooding caller,
#: would refuse most of it.
_UNCAPPED = dataclasses.replace(LearnConfig(), rate_per_tool=1e12)


def split_for_learning(
    queries: Sequence[LabelledQuery], fraction: float
) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    """The first ``fraction`` of ``queries`` (rounded down) and the rest, both non-empty."""
    if not (isinstance(fraction, float | int) and 0.0 < fraction < 1.0):
        raise InvalidInputError(f"--learn-first must be a fraction in (0, 1), got {fraction!r}")
    cut = math.floor(len(queries) * fraction)
    if cut < 1 or cut >= len(queries):
        raise InvalidInputError(
            f"--learn-first {fraction} of {len(queries)} queries leaves nothing to learn from "
            "or nothing to evaluate"
        )
    return list(queries[:cut]), list(queries[cut:])


def evaluate_learning(
    router: Router,
    queries: Sequence[LabelledQuery],
    fraction: float,
    *,
    top_k: int = 10,
    progress: bool = False,
    config: LearnConfig | None = None,
) -> dict[str, Any]:
    """The metrics of :func:`evaluate` on the queries after the first ``fraction``, once the
    router learned from the gold of those, with ``"before"`` (the same metrics without
    learning), ``"learned_from"`` and ``"learned_rows"``. Both passes embed every query
    (``route_ms`` means the same in each). A router that already learns is measured without
    its memory, and has it back after."""
    learn, rest = split_for_learning(labelled_queries(queries), fraction)
    learning = router._pipeline.learning
    # A router that already learns (a deployment's own memory) is measured without it, as
    # "before" says, and gets it back: the evaluation learns into a memory of its own.
    kept = (learning.memory, learning.from_verify, learning._followed)
    learning.memory = None
    # Both passes embed every query: a router that routed them before (a deployment's) has
    # their vectors memoised, and the pass before learning would time no model run.
    router._pipeline.query_vectors.forget()
    try:
        before = evaluate(router, rest, top_k=top_k, progress=progress)
        memory = router.learn(":memory:", config=config or _UNCAPPED)
        catalog = router.catalog
        for item in progress_bar(learn, progress, "learning"):
            # A gold entry may be an id as well as a name, as toolgate eval scores it.
            accepted = (accepted_tools(entry, catalog) for entry in item.gold)
            used = list(dict.fromkeys(tool_id for tools in accepted for tool_id in tools))
            if used:
                router.feedback(item.query, used=used)
        # The first pass memoised the evaluated queries' vectors: without this, the second
        # pass's route_ms would leave out the model run that the first one's includes.
        router._pipeline.query_vectors.forget()
        after = evaluate(router, rest, top_k=top_k, progress=progress)
    finally:
        learning.memory, learning.from_verify, learning._followed = kept  # as it was
    return {**after, "before": before, "learned_from": len(learn), "learned_rows": len(memory)}

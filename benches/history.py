"""Conversations: what blending earlier turns into the query is worth, by decay.

    .venv/bin/python -m benches.history [--fixture apibank|tooltalk] [--turns N]

Routes a multi-turn fixture's conversations -- API-Bank's dialogues
(``tests/fixtures/apibank``, the default) or ToolTalk's (``tests/fixtures/tooltalk``); see
their READMEs -- with :class:`toolgate.RouterConfig`'s defaults but ``history_decay``, for each
decay in :data:`DECAYS`, and prints per-turn figures: every turn, and the later turns (those
with a conversation before them), with their history blended in and without it. The default
decay in :class:`~toolgate.routing.config.RouterConfig` is the one this chose on API-Bank
(docs/design.md).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from toolgate.catalog.catalog import Catalog
from toolgate.evaluation.evaluate import evaluate, load_queries
from toolgate.routing.router import Router, RouterConfig

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
#: The multi-turn fixtures by name, and the title each is printed under.
FIXTURES = {"apibank": "API-Bank dialogues", "tooltalk": "ToolTalk conversations"}
DECAYS = (0.0, 0.25, 0.5, 0.75, 1.0)


def sweep(fixture: Path, decays: tuple[float, ...], turns: int) -> list[dict[str, Any]]:
    """nDCG@10 and complete@5 of every turn and of the later turns, at each decay."""
    router = Router.from_catalog(Catalog.load(fixture / "tools.jsonl"))
    queries = load_queries(fixture / "queries.jsonl")
    rows = []
    for decay in decays:
        config = dataclasses.replace(router.config, history_decay=decay, history_turns=turns)
        report = evaluate(router.with_config(config), queries)
        later = report["later_turns"]
        rows.append(
            {
                "decay": decay,
                "ndcg@10": report["ndcg@10"],
                "without history": report["without_history"]["ndcg@10"],
                "later ndcg@10": later["ndcg@10"],
                "later complete@5": later["complete@5"],
                "later without history": later["without_history"]["ndcg@10"],
            }
        )
    return rows


def main() -> None:
    """Print the sweep as a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fixture",
        default="apibank",
        help=f"one of {', '.join(FIXTURES)}, or the path of a folder in their format",
    )
    parser.add_argument("--turns", type=int, default=RouterConfig().history_turns)
    args = parser.parse_args()
    if args.fixture in FIXTURES:
        fixture, title = FIXTURES_DIR / args.fixture, FIXTURES[args.fixture]
    else:
        fixture, title = Path(args.fixture), "Conversations"
    rows = sweep(fixture, DECAYS, args.turns)
    print(f"{title} ({fixture}), history_turns = {args.turns}")
    print(" | ".join(rows[0]))
    for row in rows:
        print(" | ".join(f"{value:.4f}" for value in row.values()))


if __name__ == "__main__":
    main()

"""Adaptive selection: how many of the ranked tools a turn shows, from the evidence.

``top_k`` is a ceiling, not a count. Every schema shown costs tokens on every turn, so a turn
shows what the evidence asks for:

- the best ``min_tools`` ranked tools: the fused score's gaps at the head of a ranking say
  little about whether the best tool is the one needed (on the labelled sets a rule on score
  gaps alone did no better than a fixed count; see docs/design.md, "Promotion: lean
  requests"), so a floor on the count is what keeps a near miss in. The best tool always;
  each further one only while the floor's schemas cost at most ``floor_tokens`` (value per
  token: the third tool is needed about a ninth as often as the first, so it earns its
  place when it is small, not when it is a 300-token schema);
- for a query of several clauses ("convert 5 USD to EUR, then email the result to Bob"),
  the best ``clause_tools`` tools of each clause (each clause's best right after the best
  tool, before the rest of the floor), ranked by the clause's own vector and words:
  each intent needs its own tool, and the whole query's ranking buries the second one;
- then any further ranked tool whose fused score is at least ``keep_ratio`` of the best one's
  (and likewise the second tool of a clause against its clause's best): a tool that scores
  nearly as well as the best is as likely to be the one needed;
- the cosine floor (``threshold``) applies to every candidate, as in the ranking itself;
- the whole selection keeps within ``selection_tokens`` of schemas (the best tool always; a
  tool that does not fit is passed over), so the largest turn is bounded by a constant, not
  only the mean.

The order of the result is the order of that list, which is the order of the evidence.

>>> select([("a", 1.0), ("b", 0.95), ("c", 0.5)], [], ceiling=8, min_tools=1,
...        keep_ratio=0.9, clause_tools=2)
['a', 'b']
>>> select([("a", 1.0), ("b", 0.5), ("c", 0.5)], [], ceiling=8, min_tools=3,
...        keep_ratio=0.9, clause_tools=2, cost={"a": 100, "b": 300, "c": 50}.get,
...        floor_tokens=400)
['a', 'b']
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, TypeVar

from toolgate.routing.config import RouterConfig

if TYPE_CHECKING:
    from toolgate._toolgate import RoutedRow

__all__ = ["CLAUSE_HEAD", "adapt", "select", "with_clause_slots"]

#: The whole query's best tools that stay ahead of the clauses' in a ranking with clause
#: slots: the query's own head is right more often than any one clause's best.
CLAUSE_HEAD = 2

Key = TypeVar("Key", bound=Hashable)


def select(
    ranked: Sequence[tuple[Key, float]],
    clauses: Sequence[Sequence[tuple[Key, float]]],
    *,
    ceiling: int,
    min_tools: int,
    keep_ratio: float,
    clause_tools: int,
    cost: Callable[[Key], int | None] | None = None,
    floor_tokens: int | None = None,
    selection_tokens: int | None = None,
) -> list[Key]:
    """The keys to show, at most ``ceiling``, in the order of the evidence (see the module).

    ``ranked`` holds the whole query's candidates as ``(key, fused score)``, best first;
    ``clauses`` holds each clause's, ranked by the clause alone (empty for a query of one
    clause). ``cost`` gives a key's schema tokens; without it, or without ``floor_tokens``,
    the floor is the best ``min_tools`` whatever they cost, and without it, or without
    ``selection_tokens``, the whole selection is not capped in tokens.
    """
    floor = _floor(ranked[:min_tools], cost, floor_tokens)
    # Each clause's best comes right after the best tool: a clause's own tool is worth more
    # than the whole query's third, and a low ceiling cuts from the end.
    firsts = [clause[0][0] for clause in clauses if clause] if clause_tools else []
    chosen = [*floor[:1], *firsts, *floor[1:]]
    for depth in range(1, clause_tools):
        for clause in clauses:
            if depth < len(clause) and clause[depth][1] >= keep_ratio * clause[0][1]:
                chosen.append(clause[depth][0])
    best = ranked[0][1] if ranked else 0.0
    chosen += [key for key, score in ranked[len(floor) :] if score >= keep_ratio * best]
    return _within(list(dict.fromkeys(chosen)), ceiling, cost, selection_tokens)


def _within(
    keys: list[Key],
    ceiling: int,
    cost: Callable[[Key], int | None] | None,
    selection_tokens: int | None,
) -> list[Key]:
    """The first ``ceiling`` of ``keys`` whose schemas fit in ``selection_tokens`` together,
    in order: the first key always, and a key that does not fit is passed over, not the end
    (a smaller one after it may fit)."""
    if cost is None or selection_tokens is None:
        return keys[:ceiling]
    out: list[Key] = []
    spent = 0
    for key in keys:
        tokens = cost(key) or 0
        if out and spent + tokens > selection_tokens:
            continue
        out.append(key)
        spent += tokens
        if len(out) == ceiling:
            break
    return out


def _floor(
    head: Sequence[tuple[Key, float]],
    cost: Callable[[Key], int | None] | None,
    floor_tokens: int | None,
) -> list[Key]:
    """The floor: the best key, then the next ones while their schemas stay within
    ``floor_tokens`` (the first that does not fit ends it: the floor follows the rank)."""
    keys = [key for key, _ in head]
    if cost is None or floor_tokens is None:
        return keys
    spent = 0
    for depth, key in enumerate(keys):
        spent += cost(key) or 0
        if depth and spent > floor_tokens:
            return keys[:depth]
    return keys


def adapt(
    ranked: Sequence[RoutedRow],
    clauses: Sequence[Sequence[RoutedRow]],
    *,
    ceiling: int,
    config: RouterConfig,
    cost: Callable[[int], int | None] | None = None,
) -> tuple[list[RoutedRow], list[int]]:
    """The core's ``ranked`` rows cut down by :func:`select`, and the rows added for a clause
    that the whole query did not rank.

    ``clauses`` holds each clause's own ranking, as the core's route returns it
    (``RouteOutcome.clauses``: the query's first clauses, each ranked as the query was, with
    the same gate, scope, floor and forced rows). ``cost(row)`` gives a row's schema tokens,
    for ``config.floor_tokens`` and ``config.selection_tokens``.
    """
    ranked_clauses = [list(clause) for clause in clauses] if config.clause_tools else []
    rows = {r.row: r for clause in ranked_clauses for r in clause}
    rows |= {r.row: r for r in ranked}
    keys = select(
        [(r.row, r.fused) for r in ranked],
        [[(r.row, r.fused) for r in clause] for clause in ranked_clauses],
        ceiling=ceiling,
        min_tools=config.min_tools,
        keep_ratio=config.keep_ratio,
        clause_tools=config.clause_tools,
        cost=cost,
        floor_tokens=config.floor_tokens,
        selection_tokens=config.selection_tokens,
    )
    own = {r.row for r in ranked}
    return [rows[key] for key in keys], [key for key in keys if key not in own]


def with_clause_slots(
    ranked: Sequence[RoutedRow],
    clauses: Sequence[Sequence[RoutedRow]],
    *,
    slots: int,
    k: int,
) -> tuple[list[RoutedRow], list[int]]:
    """The best ``k`` of a ranking in which each clause's best ``slots`` rows come right after
    the whole query's best :data:`CLAUSE_HEAD` (clause by clause, each clause's best first),
    then the rest of ``ranked``; and the rows that only a clause placed in the top ``k``.

    One vector for "fetch the page and post a summary to #eng" lands between its two tools,
    and the whole query's ranking buries the second; each clause ranked on its own finds it.
    ``clauses`` holds each clause's ranking as the core returns it (empty for one clause).
    """
    if not slots or not clauses:
        return list(ranked[:k]), []
    picked = [clause[depth] for depth in range(slots) for clause in clauses if depth < len(clause)]
    # A row the whole query ranked reports the whole query's scores, as in adapt().
    rows = {r.row: r for r in picked} | {r.row: r for r in ranked}
    order = [r.row for r in ranked[:CLAUSE_HEAD]] + [r.row for r in picked]
    order = list(dict.fromkeys([*order, *(r.row for r in ranked)]))[:k]
    own = {r.row for r in ranked[:k]}
    return [rows[row] for row in order], [row for row in order if row not in own]

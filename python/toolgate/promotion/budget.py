"""Tool budgets and the enforcer that applies them.

A :class:`Budget` caps what one turn may load: the number of tools offered for calling
(``max_tools``: the routed and pinned ones, not the ``tool_search`` tool, which only asks for
more), their schema tokens, the search tool's included (``max_schema_tokens``), and the share
of the context window that the summary pool and the schemas take together
(``max_context_share`` of ``context_window``). :func:`enforce` checks a ranked set of tools
against it:

==========  ===============================================  ======================================
status      mode ``"block"``                                 mode ``"warn"``
==========  ===============================================  ======================================
``pass``    everything fits, nothing dropped                 everything fits
``warn``    over budget: the unpinned tools worth least      over budget: everything is sent
            for their tokens are left out until it fits;     anyway; ``dropped`` lists what block
            ``dropped`` lists each with the limit it broke   mode would have dropped
``block``   even with every unpinned tool dropped it does    (never: warn mode reports ``warn``)
            not fit (pinned tools or the pool alone are
            too big): nothing is promoted, ``reasons``
            says why
==========  ===============================================  ======================================

Block mode never fails open: a breach is either trimmed visibly or blocks visibly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgate.errors import InvalidInputError, ToolgateError

__all__ = [
    "Budget",
    "BudgetDecision",
    "BudgetExceededError",
    "Candidate",
    "Dropped",
    "enforce",
    "enforce_counted",
    "value",
]


class BudgetExceededError(ToolgateError):
    """Raised by :meth:`BudgetDecision.raise_for_status` when a budget blocked a promotion."""


@dataclass(frozen=True)
class Budget:
    """Per-turn caps. ``None`` means no cap.

    ``max_context_share`` and ``context_window`` make one cap and come together.

    >>> Budget(max_tools=15, max_schema_tokens=10_000).max_context_tokens is None
    True
    """

    max_tools: int | None = None
    max_schema_tokens: int | None = None
    max_context_share: float | None = None
    context_window: int | None = None
    mode: str = "block"

    def __post_init__(self) -> None:
        for name in ("max_tools", "max_schema_tokens", "context_window"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidInputError(f"Budget.{name} must be a non-negative int, got {value!r}")
        share = self.max_context_share
        if share is not None and (
            isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1
        ):
            raise InvalidInputError(f"Budget.max_context_share must be in (0, 1], got {share!r}")
        if share is not None and not self.context_window:
            raise InvalidInputError("Budget.max_context_share needs context_window (in tokens)")
        if share is not None and self.context_window is not None:
            try:
                float(self.context_window)  # the share of it is taken in floating point
            except OverflowError:
                bits = self.context_window.bit_length()
                raise InvalidInputError(
                    f"Budget.context_window is too large: a {bits}-bit int"
                ) from None
        if share is None and self.context_window is not None:
            # The window alone caps nothing; guessing a share would invent a cap nobody set.
            raise InvalidInputError(
                "Budget.context_window is only used with max_context_share: give the share of "
                "the window the tools may take (1.0 for all of it)"
            )
        if self.mode not in ("block", "warn"):
            raise InvalidInputError(f"Budget.mode must be 'block' or 'warn', got {self.mode!r}")

    @property
    def max_context_tokens(self) -> int | None:
        """``max_context_share * context_window``, the cap on pool plus schema tokens."""
        if self.max_context_share is None or self.context_window is None:
            return None
        return int(self.max_context_share * self.context_window)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {
            "max_tools": self.max_tools,
            "max_schema_tokens": self.max_schema_tokens,
            "max_context_share": self.max_context_share,
            "context_window": self.context_window,
            "mode": self.mode,
        }


@dataclass(frozen=True)
class Candidate:
    """A tool asking to be promoted: its id, schema tokens, rank (0 = best), whether pinned,
    and whether it is the discovery tool (``tool_search``), whose tokens count but which
    takes none of ``max_tools``' slots: it offers no task of its own, and counting it would
    cap a digest pool's turns one tool below a full pool's."""

    tool_id: str
    tokens: int
    rank: int
    pinned: bool = False
    discovery: bool = False


@dataclass(frozen=True)
class _Load:
    """What a set of candidates adds up to: how many, how many of them ``max_tools`` counts
    (all but the discovery tool) and their tokens. Kept as a running total, so that trying a
    candidate costs the same however many are kept."""

    n: int = 0
    tools: int = 0
    tokens: int = 0

    def plus(self, candidate: Candidate) -> _Load:
        """This load with ``candidate`` added."""
        counted = 0 if candidate.discovery else 1
        return _Load(self.n + 1, self.tools + counted, self.tokens + candidate.tokens)

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> _Load:
        """The load of ``candidates``."""
        load = cls()
        for candidate in candidates:
            load = load.plus(candidate)
        return load


@dataclass(frozen=True)
class Dropped:
    """A tool left out (or, in warn mode, that would have been) and the limit that cost it."""

    tool_id: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready view."""
        return {"tool_id": self.tool_id, "reason": self.reason}


@dataclass(frozen=True)
class BudgetDecision:
    """The enforcer's verdict: ``status``, the ids kept, the drops, and the reasons."""

    status: str
    kept: tuple[str, ...]
    dropped: tuple[Dropped, ...] = ()
    reasons: tuple[str, ...] = ()
    budget: Budget | None = None
    usage: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.status != "block"

    def __hash__(self) -> int:
        # Of the fields but usage, a dict (the generated hash took it, a TypeError).
        return hash((self.status, self.kept, self.dropped, self.reasons, self.budget))

    def raise_for_status(self) -> None:
        """Raise :class:`BudgetExceededError` if the decision is ``block``."""
        if self.status == "block":
            raise BudgetExceededError("; ".join(self.reasons) or "tool budget exceeded")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {
            "status": self.status,
            "kept": list(self.kept),
            "dropped": [d.to_dict() for d in self.dropped],
            "reasons": list(self.reasons),
            "budget": self.budget.to_dict() if self.budget else None,
            "usage": dict(self.usage),
        }


def _breaches(budget: Budget, count: int, schema_tokens: int, fixed_tokens: int) -> list[str]:
    out = []
    if budget.max_tools is not None and count > budget.max_tools:
        out.append(f"{count} tools > max_tools {budget.max_tools}")
    if budget.max_schema_tokens is not None and schema_tokens > budget.max_schema_tokens:
        out.append(f"{schema_tokens} schema tokens > max_schema_tokens {budget.max_schema_tokens}")
    limit = budget.max_context_tokens
    if limit is not None and schema_tokens + fixed_tokens > limit:
        out.append(
            f"{schema_tokens + fixed_tokens} tool tokens (pool {fixed_tokens} + schemas "
            f"{schema_tokens}) > {budget.max_context_share:.0%} of {budget.context_window} "
            f"= {limit}"
        )
    return out


#: Whether a set of candidates, by its load, keeps within the budget.
Fits = Callable[[_Load], bool]


def value(candidate: Candidate) -> float:
    """What sending ``candidate`` is worth: the chance that the tool at its rank is the one
    needed, taken to fall as ``1 / rank**2``, as the share of needed tools found at each rank
    does on the labelled sets (docs/design.md, "Promotion: lean requests")."""
    return 1.0 / (candidate.rank + 1) ** 2


def _fill(fixed: Sequence[Candidate], free: Sequence[Candidate], fits: Fits) -> list[Candidate]:
    """The candidates of ``free`` to send beside ``fixed``: of three fills that ``fits``, the
    one worth most (:func:`value`): by rank (the best ranks that fit, the old rule), by value
    per token (the knapsack greedy), and the single most valuable tool (which the greedy alone
    can lose to many small ones); ties keep the rank fill. Whatever still fits beside it is
    then added, by value per token."""
    base = _Load.of(fixed)
    by_rank = sorted(free, key=lambda c: c.rank)
    by_density = sorted(free, key=lambda c: (-value(c) / max(c.tokens, 1), c.rank))

    def top_up(fill: list[Candidate], order: Sequence[Candidate]) -> list[Candidate]:
        load, taken = _Load.of([*fixed, *fill]), {c.tool_id for c in fill}
        for candidate in order:
            if candidate.tool_id not in taken and fits(more := load.plus(candidate)):
                fill.append(candidate)
                taken.add(candidate.tool_id)
                load = more
        return fill

    prefix: list[Candidate] = []
    load = base
    for candidate in by_rank:
        if not fits(more := load.plus(candidate)):
            break
        prefix.append(candidate)
        load = more
    single = next(([c] for c in by_rank if fits(base.plus(c))), [])
    fills = [prefix, top_up([], by_density), single]
    return top_up(max(fills, key=lambda fill: sum(map(value, fill))), by_density)


def enforce(
    budget: Budget | None,
    candidates: Sequence[Candidate],
    *,
    pool_tokens: int = 0,
    overhead_tokens: int = 0,
) -> BudgetDecision:
    """Fit ``candidates`` into ``budget``: pinned tools always, then the unpinned tools worth
    most within it (see :func:`_fill`), so a cap on tokens keeps several small tools rather
    than one large tool of little value, and never less than the best ranks that fit.

    ``pool_tokens`` (the phase-1 pool, which cannot be dropped) counts toward the context share.
    ``overhead_tokens`` is the provider's fixed cost of sending any tools at all (Anthropic's
    tool-use prompt, OpenAI's namespace header); it counts as schema tokens while any tool is
    kept. The ``kept`` ids keep the order of ``candidates``; ``dropped`` lists the others,
    lowest rank first, each with the limits it would break.
    """
    ids = tuple(c.tool_id for c in candidates)

    def schema_tokens(load: _Load) -> int:
        return load.tokens + (overhead_tokens if load.n else 0)

    def breaches(load: _Load) -> list[str]:
        assert budget is not None
        return _breaches(budget, load.tools, schema_tokens(load), pool_tokens)

    every = _Load.of(candidates)
    usage = {"tools": every.tools, "schema_tokens": schema_tokens(every)}
    usage["pool_tokens"] = pool_tokens
    if budget is None:
        return BudgetDecision("pass", ids, usage=usage)
    reasons = tuple(breaches(every))
    if not reasons:
        return BudgetDecision("pass", ids, budget=budget, usage=usage)

    pinned = [c for c in candidates if c.pinned]
    free = [c for c in candidates if not c.pinned]
    still = breaches(_Load.of(pinned))
    chosen = [] if still else _fill(pinned, free, lambda load: not breaches(load))
    kept = {c.tool_id for c in [*pinned, *chosen]}
    kept_load = _Load.of([*pinned, *chosen])
    left_out = sorted((c for c in free if c.tool_id not in kept), key=lambda c: -c.rank)
    dropped = tuple(
        Dropped(
            c.tool_id,
            f"rank {c.rank + 1} ({c.tokens} tokens): "
            + "; ".join(breaches(kept_load.plus(c)) or still),
        )
        for c in left_out
    )
    if budget.mode == "warn":
        return BudgetDecision("warn", ids, dropped, reasons, budget, usage)
    if still:
        why = tuple(f"pinned tools and the pool alone exceed the budget: {s}" for s in still)
        return BudgetDecision("block", (), dropped, reasons + why, budget, usage)
    sent = [c for c in candidates if c.tool_id in kept]
    kept_usage = {**usage, "tools": kept_load.tools, "schema_tokens": schema_tokens(kept_load)}
    return BudgetDecision(
        "warn", tuple(c.tool_id for c in sent), dropped, reasons, budget, kept_usage
    )


# How many times a budget is applied again when the set it kept counts dearer than its sum.
_RECOUNTS = 4


def enforce_counted(
    budget: Budget | None,
    candidates: Sequence[Candidate],
    count: Callable[[Sequence[str]], int],
    *,
    pool_tokens: int = 0,
) -> tuple[BudgetDecision, int]:
    """:func:`enforce`, with the tokens of a set of tools as ``count`` (the ids kept, in the
    order of ``candidates``) gives them when sent together; the decision and the schema
    tokens of the set it kept.

    Tokens are not additive: a provider's fixed cost of sending any tools (Anthropic's
    tool-use prompt, OpenAI's namespace header) is in the whole set's count and in no tool's
    own. It is charged as overhead, and where the set kept still counts dearer than the sum
    the budget was applied to, the budget is applied again, that much dearer.
    """
    ids = [c.tool_id for c in candidates]
    whole = count(ids) if candidates else 0
    overhead = max(0, whole - sum(c.tokens for c in candidates))
    for _ in range(_RECOUNTS):
        decision = enforce(budget, candidates, pool_tokens=pool_tokens, overhead_tokens=overhead)
        kept = set(decision.kept)
        sent = [i for i in ids if i in kept]
        schema_tokens = whole if len(sent) == len(ids) else (count(sent) if sent else 0)
        shortfall = schema_tokens - decision.usage.get("schema_tokens", schema_tokens)
        if shortfall <= 0:
            break
        overhead += shortfall
    return decision, schema_tokens

"""The budget enforcer: fills by value per token, never drops pins, never fails open."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from toolgate.errors import InvalidInputError, ToolgateError
from toolgate.promotion import budget as budget_module
from toolgate.promotion.budget import Budget, BudgetExceededError, Candidate, enforce


def _candidates(tokens: list[int], pinned: set[int] = frozenset()) -> list[Candidate]:  # type: ignore[assignment]
    return [Candidate(f"s/t{i}", tok, i, i in pinned) for i, tok in enumerate(tokens)]


def test_no_budget_passes_everything() -> None:
    decision = enforce(None, _candidates([100, 200]))
    assert decision.status == "pass"
    assert decision.kept == ("s/t0", "s/t1")
    assert decision


def test_within_budget_passes() -> None:
    decision = enforce(Budget(max_tools=2, max_schema_tokens=300), _candidates([100, 200]))
    assert decision.status == "pass"
    assert not decision.dropped


def test_count_cap_drops_lowest_ranked_first() -> None:
    decision = enforce(Budget(max_tools=2), _candidates([10, 10, 10, 10]))
    assert decision.status == "warn"
    assert decision.kept == ("s/t0", "s/t1")
    assert [d.tool_id for d in decision.dropped] == ["s/t3", "s/t2"]
    assert "max_tools 2" in decision.dropped[0].reason


def test_token_cap_never_drops_pinned_tools() -> None:
    decision = enforce(Budget(max_schema_tokens=300), _candidates([100, 100, 200], pinned={2}))
    assert decision.kept == ("s/t0", "s/t2")
    assert [d.tool_id for d in decision.dropped] == ["s/t1"]


def test_pinned_tools_alone_over_budget_block_visibly() -> None:
    decision = enforce(Budget(max_schema_tokens=100), _candidates([50, 300], pinned={1}))
    assert decision.status == "block"
    assert decision.kept == ()
    assert not decision
    assert any("pinned tools and the pool alone" in r for r in decision.reasons)
    with pytest.raises(BudgetExceededError, match="schema tokens"):
        decision.raise_for_status()
    assert issubclass(BudgetExceededError, ToolgateError)


def test_pool_counts_toward_context_share() -> None:
    budget = Budget(max_context_share=0.1, context_window=2000)
    fits = enforce(budget, _candidates([50, 50]), pool_tokens=100)
    assert fits.status == "pass"
    trimmed = enforce(budget, _candidates([50, 50]), pool_tokens=120)
    assert trimmed.kept == ("s/t0",)
    assert "10% of 2000 = 200" in trimmed.dropped[0].reason
    blocked = enforce(budget, _candidates([50]), pool_tokens=250)
    assert blocked.status == "block"


def test_warn_mode_sends_everything_but_says_what_it_would_drop() -> None:
    decision = enforce(Budget(max_tools=1, mode="warn"), _candidates([10, 10, 10]))
    assert decision.status == "warn"
    assert decision.kept == ("s/t0", "s/t1", "s/t2")
    assert [d.tool_id for d in decision.dropped] == ["s/t2", "s/t1"]
    assert decision.reasons == ("3 tools > max_tools 1",)


def _rank_prefix(tokens: list[int], pinned: set[int], cap: int) -> tuple[int, ...] | None:
    """Reference: drop a suffix of unpinned tools by rank until the cap holds."""
    unpinned = [i for i in range(len(tokens)) if i not in pinned]
    for n_drop in range(len(unpinned) + 1):
        dropped = set(unpinned[len(unpinned) - n_drop :]) if n_drop else set()
        kept = tuple(i for i in range(len(tokens)) if i not in dropped)
        if sum(tokens[i] for i in kept) <= cap:
            return kept
    return None


def _best_value(tokens: list[int], pinned: set[int], cap: int) -> float:
    """Reference: the most value (1 / rank**2 per unpinned tool) any subset fitting the cap
    holds, by trying every subset."""
    free = [i for i in range(len(tokens)) if i not in pinned]
    room = cap - sum(tokens[i] for i in pinned)
    best = 0.0
    for size in range(len(free) + 1):
        for subset in itertools.combinations(free, size):
            if sum(tokens[i] for i in subset) <= room:
                best = max(best, sum(1 / (i + 1) ** 2 for i in subset))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_fill_is_worth_at_least_the_rank_rule_and_half_the_best(seed: int) -> None:
    import random

    rng = random.Random(seed)
    tokens = [rng.randint(1, 300) for _ in range(rng.randint(1, 10))]
    pinned = {i for i in range(len(tokens)) if rng.random() < 0.2}
    cap = rng.randint(0, 1500)
    decision = enforce(Budget(max_schema_tokens=cap), _candidates(tokens, pinned))
    if sum(tokens[i] for i in pinned) > cap:
        assert decision.status == "block"
        assert decision.kept == ()
        return
    kept = [int(tool_id.removeprefix("s/t")) for tool_id in decision.kept]
    assert kept == sorted(kept)  # the candidates' order
    assert pinned <= set(kept)
    assert sum(tokens[i] for i in kept) <= cap
    worth = sum(1 / (i + 1) ** 2 for i in kept if i not in pinned)
    by_rank = _rank_prefix(tokens, pinned, cap)
    assert by_rank is not None
    assert worth >= sum(1 / (i + 1) ** 2 for i in by_rank if i not in pinned) - 1e-12
    assert worth >= _best_value(tokens, pinned, cap) / 2 - 1e-12
    dropped = {d.tool_id for d in decision.dropped}
    assert dropped == {f"s/t{i}" for i in range(len(tokens)) if i not in kept}
    # Nothing left out would still have fitted, and each says which limit it would break.
    sent = sum(tokens[i] for i in kept)
    assert all(sent + tokens[i] > cap for i in range(len(tokens)) if i not in kept)
    assert all("max_schema_tokens" in d.reason for d in decision.dropped)


def test_token_cap_fills_by_value_per_token_not_by_rank_alone() -> None:
    # Rank order stops at the 250-token second tool; two small tools fit beside the first.
    decision = enforce(Budget(max_schema_tokens=340), _candidates([300, 250, 40, 40]))
    assert decision.kept == ("s/t0", "s/t2")
    assert [d.tool_id for d in decision.dropped] == ["s/t3", "s/t1"]
    assert "rank 2 (250 tokens): " in decision.dropped[1].reason
    # A top tool larger than the cap does not take the smaller ones down with it.
    decision = enforce(Budget(max_schema_tokens=500), _candidates([600, 100, 100, 100]))
    assert decision.kept == ("s/t1", "s/t2", "s/t3")
    # One valuable tool beats many small ones of little value.
    decision = enforce(Budget(max_schema_tokens=500), _candidates([500, 100, 100, 100, 100]))
    assert decision.kept == ("s/t0",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tools": -1}, "max_tools must be a non-negative int"),
        ({"max_tools": 2.5}, "max_tools must be a non-negative int"),
        ({"max_schema_tokens": True}, "max_schema_tokens must be a non-negative int"),
        ({"max_context_share": 0.2}, "needs context_window"),
        ({"max_context_share": 1.5, "context_window": 10}, r"must be in \(0, 1\]"),
        ({"max_context_share": True, "context_window": 10}, r"must be in \(0, 1\], got True"),
        ({"context_window": 10}, "context_window is only used with max_context_share"),
        ({"mode": "strict"}, "mode must be 'block' or 'warn'"),
        # Past a float's range the share of it could not be taken: an OverflowError at
        # the first promotion, outside toolgate's errors.
        ({"max_context_share": 0.5, "context_window": 10**400}, "context_window is too large"),
    ],
)
def test_bad_budgets_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Budget(**kwargs)


def test_decision_to_dict_is_json_ready() -> None:
    import json

    decision = enforce(Budget(max_tools=1), _candidates([1, 2]))
    data = json.loads(json.dumps(decision.to_dict()))
    assert data["status"] == "warn"
    assert data["dropped"][0]["tool_id"] == "s/t1"
    assert data["budget"]["max_tools"] == 1


def test_every_subset_order_is_stable() -> None:
    # The kept ids keep the candidates' order whatever the ranks.
    cands = [Candidate(f"s/{c}", 10, r) for c, r in zip("abcd", [2, 0, 3, 1], strict=True)]
    for perm in itertools.permutations(cands):
        decision = enforce(Budget(max_tools=2), list(perm))
        assert set(decision.kept) == {"s/b", "s/d"}
        assert list(decision.kept) == [c.tool_id for c in perm if c.tool_id in {"s/b", "s/d"}]


def test_provider_overhead_counts_while_any_tool_is_kept() -> None:
    budget = Budget(max_schema_tokens=400)
    fits = enforce(budget, _candidates([100, 100]), overhead_tokens=200)
    assert fits.status == "pass"
    assert fits.usage["schema_tokens"] == 400
    trimmed = enforce(budget, _candidates([100, 100, 100]), overhead_tokens=200)
    assert trimmed.kept == ("s/t0", "s/t1")
    blocked = enforce(Budget(max_schema_tokens=250), _candidates([100], {0}), overhead_tokens=200)
    assert blocked.status == "block"


def test_the_discovery_tool_takes_no_max_tools_slot_but_its_tokens_count() -> None:
    search = Candidate("toolgate:tool_search", 40, 3, pinned=True, discovery=True)
    decision = enforce(Budget(max_tools=1), [search, *_candidates([10, 10, 10])])
    assert decision.kept == ("toolgate:tool_search", "s/t0")
    assert decision.usage == {"tools": 1, "schema_tokens": 50, "pool_tokens": 0}
    assert decision.reasons == ("3 tools > max_tools 1",)
    trimmed = enforce(Budget(max_schema_tokens=60), [search, *_candidates([10, 10, 10])])
    assert trimmed.kept == ("toolgate:tool_search", "s/t0", "s/t1")


def test_max_tools_zero_sends_the_discovery_tool_alone() -> None:
    search = Candidate("toolgate:tool_search", 40, 1, pinned=True, discovery=True)
    decision = enforce(Budget(max_tools=0), [search, *_candidates([10])])
    assert decision.status == "warn"
    assert decision.kept == ("toolgate:tool_search",)


@pytest.mark.parametrize(
    "budget", [Budget(max_tools=2_000), Budget(max_schema_tokens=70_000)], ids=["tools", "tokens"]
)
def test_a_large_set_half_kept_is_fitted_in_linear_time(
    budget: Budget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A whole 4,000-tool catalog under a cap that keeps half of it: each fill re-summed the
    # set kept for every candidate, minutes of work at 10,000 tools. Counted in candidates
    # added to a running total, not timed: a sum over the kept set per candidate is ~2,000
    # additions each, a running total a handful of passes over the 4,000.
    added = 0
    plus = budget_module._Load.plus

    def counted(load: budget_module._Load, candidate: Candidate) -> budget_module._Load:
        nonlocal added
        added += 1
        return plus(load, candidate)

    monkeypatch.setattr(budget_module._Load, "plus", counted)
    candidates = [Candidate(f"s/t{i}", 20 + i * 7 % 31, i) for i in range(4_000)]
    decision = enforce(budget, candidates)
    assert added < 10 * len(candidates)
    assert decision.status == "warn"
    assert 1_000 < len(decision.kept) < 4_000
    assert len(decision.kept) + len(decision.dropped) == 4_000
    assert decision.usage["schema_tokens"] <= (budget.max_schema_tokens or 10**9)

"""How calibrate chooses a ranking setting: a paired, significant nDCG gain over its own."""

from __future__ import annotations

from toolgate.evaluation.ranking_choice import Ranked, choose


def _ranked(ndcgs: list[float]) -> Ranked:
    return Ranked(tuple(ndcgs), tuple(g == 1.0 for g in ndcgs))


def test_a_gain_one_rank_swap_carries_is_noise_and_the_note_says_what_would_tell() -> None:
    """One swap on 30 queries (1 -> 0.63) adds 0.012 to mean nDCG: the margin (0.005) alone
    took it, as it took alpha 0.6 on 30-60 MetaTool queries whose held-out nDCG then fell."""
    own = [1.0] * 10 + [0.5] * 20
    swapped = [*own[:29], 1.0]  # one query's gold moved up a rank or two: +0.5 on 1 of 30
    measured = {0.5: _ranked(own), 0.7: _ranked(swapped)}
    assert measured[0.7].figures[0] >= measured[0.5].figures[0] + 0.005, "beats the margin"
    value, notes = choose(measured, 0.5, 0.005, "alpha")
    assert value == 0.5
    (note,) = notes
    assert note.startswith(
        "alpha not fitted: 0.7 beat the router's own (0.5) by 0.0167 nDCG on 30 queries "
        "with gold, only 1 standard errors of the per-query gains (fewer than 2: noise); "
        "kept the router's own (0.5); a gain this size would take about "
    )
    # One winner among n is 1 standard error whatever its size: (z * 1)^2 n = 4 n queries
    # reach 2 (rounding may put the bound on either side of 120).
    assert note.endswith((" about 120 to tell", " about 121 to tell"))


def test_a_gain_most_queries_share_is_taken() -> None:
    own = [0.5 + 0.01 * (i % 5) for i in range(30)]
    better = [g + 0.02 + 0.005 * (i % 3) for i, g in enumerate(own)]
    value, notes = choose({0.0: _ranked(own), 0.4: _ranked(better)}, 0.0, 0.005, "name_weight")
    assert (value, notes) == (0.4, ())


def test_a_gain_below_the_margin_keeps_the_own_value_without_a_note() -> None:
    own = [0.5] * 30
    # Significant (every query gains alike) but smaller than the margin.
    value, notes = choose({0.0: _ranked(own), 0.2: _ranked([0.503] * 30)}, 0.0, 0.005, "server")
    assert (value, notes) == (0.0, ())


def test_one_query_tells_no_gain_from_noise_unless_z_is_0() -> None:
    measured = {0.5: _ranked([0.5]), 0.0: _ranked([1.0])}
    value, notes = choose(measured, 0.5, 0.005, "row_centring")
    assert value == 0.5
    assert notes == (
        "row_centring not fitted: 0.0 beat the router's own (0.5) by 0.5 nDCG on 1 queries "
        "with gold, and one query cannot tell a gain from noise; kept the router's own (0.5)",
    )
    assert choose(measured, 0.5, 0.005, "row_centring", z=0.0) == (0.0, ())

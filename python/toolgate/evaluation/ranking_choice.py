"""How calibrate chooses a ranking setting (``alpha``, ``row_centring``, ``server_weight``,
``name_weight``): another value than the router's own only on a paired, significant nDCG gain.

Every value tried ranks the same labelled queries, so the gain is read per query (a paired
test): the mean of the per-query nDCG differences must beat the margin and also
:data:`SIGNIFICANCE_Z` standard errors of those differences. On a small set one rank swap
moves mean nDCG by more than the margin (one swap on 30 queries: about 0.012), and the margin
alone took such noise: on 30 and 60 seeded MetaTool queries it took alpha 0.6 and centring 0
for +0.012 to +0.025 in-sample while held-out nDCG@10 fell 0.7247 -> 0.7191 (docs/design.md,
"What calibrate fits the floor and alpha by").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

#: Standard errors the mean per-query gain must exceed. 2 is about a one-sided 2.3 % chance
#: (normal approximation) that a value ranking no better on the whole is taken on its sample
#: (somewhat more for the best of several values): a gain one query carries is exactly 1
#: standard error, two give about 1.4, and are kept out, while a gain most queries share
#: passes from a few dozen queries.
SIGNIFICANCE_Z = 2.0


@dataclass(frozen=True)
class Ranked:
    """How one value of a setting ranked each query with gold: nDCG and completeness at
    ``top_k``, in the order of the queries."""

    ndcg: tuple[float, ...]
    complete: tuple[bool, ...]

    @property
    def figures(self) -> tuple[float, float]:
        """Mean nDCG and share complete, rounded to 4 decimals as the report's points are."""
        n = len(self.ndcg)
        return round(sum(self.ndcg) / n, 4), round(sum(self.complete) / n, 4)


def choose(
    measured: Mapping[float, Ranked],
    reference: float,
    margin: float,
    setting: str,
    z: float = SIGNIFICANCE_Z,
) -> tuple[float, tuple[str, ...]]:
    """Of the values ``measured``, the one with the best mean nDCG, taken only when it beats
    ``reference``'s by ``margin`` and by ``z`` standard errors of the per-query differences;
    ``reference`` on a tie or a smaller gain (of other tied values, the first). And a note
    when a value beat the margin but not the noise, naming the queries it would take."""
    figures = {value: ranked.figures for value, ranked in measured.items()}
    best = max(figures, key=lambda v: (figures[v][0], v == reference))
    # The margin reads the figures the report shows, so they check against the choice.
    if figures[best][0] < figures[reference][0] + margin:
        return reference, ()
    diffs = [b - r for b, r in zip(measured[best].ndcg, measured[reference].ndcg, strict=True)]
    n = len(diffs)
    gain = sum(diffs) / n
    if gain <= 0:  # a margin of 0 or less, and rounding: nothing gained
        return reference, ()
    spread = math.sqrt(sum((d - gain) ** 2 for d in diffs) / (n - 1)) if n > 1 else math.inf
    error = spread / math.sqrt(n)
    if gain > (z * error if z else 0.0):  # z 0 asks for the margin alone, even from 1 query
        return best, ()
    head = (
        f"{setting} not fitted: {best} beat the router's own ({reference}) by {gain:.3g} "
        f"nDCG on {n} queries with gold"
    )
    kept = f"kept the router's own ({reference})"
    if n == 1:
        return reference, (f"{head}, and one query cannot tell a gain from noise; {kept}",)
    # The fewest queries at which a gain this size and spread passes: n > (z * spread / gain)^2.
    need = math.floor((z * spread / gain) ** 2) + 1
    return reference, (
        f"{head}, only {gain / error:.2g} standard errors of the per-query gains (fewer "
        f"than {z:g}: noise); {kept}; a gain this size would take about {need} to tell",
    )

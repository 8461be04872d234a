"""The result of one ``Router.route`` call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from toolgate.arguments import shown

__all__ = ["GatedOut", "RouteResult", "RoutedTool"]


@dataclass(frozen=True)
class RoutedTool:
    """One active tool: its id, fused score, the score of each signal and why it is in.

    ``dense`` is the whole-query cosine the core ranked with, at the index's storage precision
    (int8 by default: within the quantisation error of the f32 cosine; routing does not
    re-score in f32 as ``Index.search`` does); ``bm25`` is the BM25 score.
    ``reason`` is ``"ranked"`` (by fused score, or past a close score for the request holding
    its name's words, ``RouterConfig.name_weight``: ``score`` need not fall down the list),
    ``"clause"`` (among the best for one clause of a multi-intent query, which the whole query
    ranked lower), ``"named"`` (named verbatim in the query), ``"selected"`` (a ``select:``
    query), ``"included"`` (the caller's ``include`` list), ``"pinned"`` (always included),
    ``"learned"`` (lifted by requests like this one that it served) or ``"co-used"`` (lifted
    as used together with one of the best tools; see :mod:`toolgate.routing.feedback`).
    ``copy_of`` is the id of a tool placed above that this ranked one nearly copies (the same
    name, nearly the same row: ``RouterConfig.near_copy_cosine``): it was moved below the
    different tools that score at least half as well.
    """

    id: str
    score: float
    dense: float
    bm25: float
    reason: str = "ranked"
    copy_of: str | None = None


@dataclass(frozen=True)
class GatedOut:
    """A strong candidate kept out of the active set by state or scope, and why."""

    id: str
    score: float
    missing: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class RouteResult:
    """The tools routed for one turn, best first, with the evidence behind the choice.

    Over the demo catalog (see :class:`~toolgate.routing.router.Router`), with no state
    giving the scope ``github/create_issue`` requires:

    >>> result = router.route("open an issue about the flaky test")  # doctest: +SKIP
    >>> result.ids  # doctest: +SKIP
    ['github/list_issues', 'github/get_issue', 'postgres/run_query']
    >>> result.gated_out[0].id, result.gated_out[0].missing  # doctest: +SKIP
    ('github/create_issue', ('scope:github:write',))
    """

    query: str
    form: str
    tools: tuple[RoutedTool, ...]
    gated_out: tuple[GatedOut, ...] = ()
    n_gated: int = 0
    n_out_of_scope: int = 0
    unknown: tuple[str, ...] = ()
    #: How the query was read where that differs from what it says: a ``select:`` of words
    #: that named no tool, routed as text.
    notes: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    catalog_version: str = ""
    #: The allow / deny patterns routed under (``None``: not given), so that a promotion
    #: keeps the tools they shut out out of its summary pool as well.
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] | None = None
    #: Whether the request needs none of the catalog's tools (:mod:`toolgate.routing.no_tool`),
    #: and the confidence that it does not (``None``: not judged, as for a ``select:`` query).
    #: With ``RouterConfig.no_tool_drop`` such a route holds only pinned, named and included
    #: tools.
    no_tool: bool = False
    no_tool_confidence: float | None = None

    @property
    def ids(self) -> list[str]:
        """Tool ids (``server/name``) in rank order."""
        return [t.id for t in self.tools]

    @property
    def scores(self) -> list[float]:
        """Fused scores, aligned with :attr:`ids`."""
        return [t.score for t in self.tools]

    def __hash__(self) -> int:
        # Of the fields that are not dicts (the generated hash took timings_ms, a TypeError):
        # equal results still hash equal.
        return hash((self.query, self.form, self.tools, self.catalog_version))

    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self) -> Iterator[RoutedTool]:
        return iter(self.tools)

    def __contains__(self, tool_id: object) -> bool:
        return any(t.id == tool_id for t in self.tools)

    def __repr__(self) -> str:
        head = ", ".join(f"{t.id}:{t.score:.3f}" for t in self.tools[:5])
        more = f", +{len(self.tools) - 5}" if len(self.tools) > 5 else ""
        said = "".join(
            f", {name}={_listed(value)}"
            for name, value in (("unknown", self.unknown), ("notes", self.notes))
            if value
        )
        none = ", no_tool=True" if self.no_tool else ""
        return f"RouteResult([{head}{more}], gated={self.n_gated}{none}{said})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of everything in the result."""
        return asdict(self)

    def to_json(self) -> str:
        """:meth:`to_dict` as compact JSON."""
        return json.dumps(self.to_dict(), separators=(",", ":"))


def _listed(values: tuple[str, ...], most: int = 5) -> str:
    """The first ``most`` of ``values``, each cut short, and how many more: a select's names
    are the model's, and a log line should not hold megabytes of them."""
    more = [f"+{len(values) - most}"] if len(values) > most else []
    return f"[{', '.join([*map(shown, values[:most]), *more])}]"

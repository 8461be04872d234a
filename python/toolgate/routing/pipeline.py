"""One route, start to end: the query read (its ToolSearch form, the tools it names, the
caller's lists), the query embedded, one call into the core, its outcome made a result.

:class:`~toolgate.routing.router.Router` owns one :class:`RoutePipeline` and hands it every
``route``; a ``select:`` query takes the core's select mode, which scans nothing.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from toolgate import _toolgate
from toolgate.arguments import check_flag
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.scopes import pattern_list
from toolgate.embedding.long_texts import PREFIX_CHARS
from toolgate.errors import IndexFormatError, InvalidInputError, ToolgateError
from toolgate.lazy import Lazy
from toolgate.routing.co_use import CO_USE_DEPTH
from toolgate.routing.config import DEFAULT, DefaultType, RouterConfig
from toolgate.routing.feedback import Learning, co_used, lifted
from toolgate.routing.history import HistoryTurn
from toolgate.routing.lookalikes import Lookalikes, find_lookalikes
from toolgate.routing.no_tool import (
    GAP_RANK,
    NullScores,
    features,
    no_tool_confidence,
    null_requests,
    null_vectors,
)
from toolgate.routing.outcome import Turn, route_result
from toolgate.routing.outline import tool_schema_tokens
from toolgate.routing.query import ParsedQuery, parse_query, query_text, reads_as_words
from toolgate.routing.query_vectors import QueryVectors
from toolgate.routing.result import RouteResult
from toolgate.routing.rows import CatalogRows, Scope
from toolgate.routing.selection import adapt, with_clause_slots
from toolgate.routing.servers import SERVER_DEPTH, ServerVectors
from toolgate.routing.state import FlagVocabulary, State
from toolgate.routing.store import CatalogOutline

if TYPE_CHECKING:
    from toolgate.embedding.embedder import Embedder

__all__ = ["RoutePipeline"]

_WORDS_NOTE = "'select:' named no tool and reads as words: routed as text"


class Limits(NamedTuple):
    """What a ranked route lets through: at most ``k`` ranked rows, with a cosine of at least
    ``floor``, whose required ``flags`` are met, within the caller's ``scope``; ``adaptive``
    makes ``k`` a ceiling (:mod:`toolgate.routing.selection`); ``decide`` lets the route say
    that no tool is needed (:mod:`toolgate.routing.no_tool`)."""

    k: int
    floor: float | None
    flags: np.ndarray
    scope: Scope
    adaptive: bool = False
    decide: bool = True


class RoutePipeline:
    """Routes queries over one index: its BM25, rows, flag vocabulary and query vectors."""

    def __init__(
        self,
        index: _toolgate.Index,
        bm25: _toolgate.Bm25,
        outline: CatalogOutline,
        vocabulary: FlagVocabulary,
        config: RouterConfig,
        embedder: Embedder | Callable[[], Embedder],
        catalog: Callable[[], Catalog],
        null: NullScores | None = None,
    ) -> None:
        """The parts of one router: ``outline`` gives the ids of the rows, in order;
        ``embedder`` and ``catalog`` may be loaders, called on first need (the catalog only
        for a manifest too old to name every row's tool, see :meth:`CatalogRows.of`).
        ``null`` are the catalog's null scores, measured on first need when not given (a
        manifest that predates them)."""
        if len(index) != len(outline.ids) or len(bm25) != len(outline.ids):
            raise IndexFormatError(
                f"index ({len(index)} rows) and BM25 ({len(bm25)} documents) do not match "
                f"the catalog ({len(outline.ids)} tools)"
            )
        self._index = index
        self._bm25 = bm25
        self._outline = outline
        self._vocabulary = vocabulary
        self._config = config
        self._rows = CatalogRows.of(outline, bm25, catalog)
        self._catalog = catalog
        self._schema_tokens: dict[int, int | None] = {}
        self._unreadable = False
        self._addressing = np.asarray(outline.addressing, dtype=np.uint32)
        # Loaders over the parts they read, never over ``self``: a pipeline holding a function
        # that holds it is a reference cycle, and a dropped router's index (its descriptor, its
        # mapping) would stay until the cyclic GC ran. ``with_config`` copies share them too.
        self._lookalikes = Lazy(None, self._lookalikes_loader(config))
        rows = self._rows
        self._servers = Lazy(None, lambda: ServerVectors.of(index.vectors, rows.servers()))
        self.query_vectors = QueryVectors(
            embedder, config, model_id=index.model_id, index_path=index.path
        )
        self._null = null
        #: What feedback teaches this router (``Router.learn``); no memory, no lift.
        self.learning = Learning(
            f"{index.model_id}@{outline.version}",
            outline.ids,
            self._rows.servers,
            self._rows.names,
            index.dim,
        )

    def with_config(self, config: RouterConfig) -> RoutePipeline:
        """This pipeline under ``config``: the same index, rows and embedder."""
        view = copy.copy(self)
        view._config = config
        view.learning = copy.copy(self.learning)  # learning started on the view stays its own
        if config.lookalike_cosine != self._config.lookalike_cosine:
            view._lookalikes = Lazy(None, view._lookalikes_loader(config))
        view.query_vectors = self.query_vectors.with_config(config)
        return view

    def route(
        self,
        query: str,
        *,
        state: State | Mapping[str, Iterable[str]] | None,
        history: Sequence[HistoryTurn] | None,
        top_k: int | None,
        threshold: float | DefaultType | None,
        allow: Iterable[str] | None,
        deny: Iterable[str] | None,
        forms: bool,
        include: Iterable[str] | None,
        adaptive: bool | None = False,
        decide: bool = True,
    ) -> RouteResult:
        """:meth:`Router.route <toolgate.routing.router.Router.route>`, but telemetry
        (``adaptive=None``: the config's)."""
        start = time.perf_counter()
        if adaptive is None:
            adaptive = self._config.adaptive
        elif not isinstance(adaptive, bool):
            raise InvalidInputError(
                f"adaptive must be True, False or None, got a {type(adaptive).__name__}"
            )
        check_flag("decide", decide)
        check_flag("forms", forms)
        allow, deny = pattern_list(allow), pattern_list(deny)
        query = query_text(query)
        if len(query) > PREFIX_CHARS:
            # Text is read no further than the embedder reads any: a pasted 10 MB log, parsed
            # and its words all ranked by BM25, cost seconds a route. A select names tools.
            cut = query[:PREFIX_CHARS]
            query = query if parse_query(cut, forms=forms).select else cut
        parsed = parse_query(query, forms=forms)
        notes: tuple[str, ...] = ()
        if parsed.select and self._words_not_names(parsed.select):
            parsed, notes = parse_query(query, forms=False), (_WORDS_NOTE,)
        k = _checked_k(top_k, self._config.top_k, len(self._outline.ids))
        floor = _checked_floor(threshold, self._config.threshold)
        flags = self._vocabulary.flags(State.coerce(state))
        scope = self._rows.scope(allow, deny)
        included, unknown = self._rows.included(include)
        turn = Turn(query, parsed.form, start, unknown=unknown, notes=notes)
        if parsed.select:
            result = self._select(parsed.select, turn, flags, scope, included)
        elif not parsed.text:
            raise InvalidInputError("query is empty")
        else:
            limits = Limits(k, floor, flags, scope, adaptive, decide)
            result = self._rank(parsed, history, turn, limits, included)
        if allow is not None or deny is not None:
            result = replace(result, allow=allow, deny=deny)
        return result

    def _words_not_names(self, names: Sequence[str]) -> bool:
        """Whether the entries of a ``select:`` are a person's words that happen to start with
        it: they read as words and none of them names a tool."""
        return reads_as_words(names) and not self._rows.selected(names)[0]

    def _rank(
        self,
        parsed: ParsedQuery,
        history: Sequence[HistoryTurn] | None,
        turn: Turn,
        limits: Limits,
        included: Sequence[int],
    ) -> RouteResult:
        """A text query (``+term`` words filter what is ranked): the tools it names and
        ``included`` come first, whatever their score, then the best ``limits.k`` others."""
        named = self._rows.mentioned(turn.query)
        turn.reasons = {row: "included" for row in included} | {row: "named" for row in named}
        forced = self._rows.with_pinned(sorted(turn.reasons))
        # Named, included and pinned tools stay in whatever ``rankable`` says.
        rankable, copiers = self._lookalike_rows(turn.query)
        demoted = self._addressing
        if len(copiers):  # a server of look-alikes: its other tools weigh down too
            demoted = np.union1d(demoted, copiers).astype(np.uint32)
        if parsed.required_terms:
            having = self._rows.having_terms(parsed.required_terms)
            rankable = having if rankable is None else np.intersect1d(having, rankable)
        embed_start = turn.lap("parse", turn.start)
        vector, clauses = self.query_vectors(parsed.text, history)
        core_start = turn.lap("embed", embed_start)
        config = self._config
        memory = self.learning.memory
        lifts = {} if memory is None else memory.lift(vector)
        shown = set(forced.tolist())
        learned = np.asarray([row for row in lifts if row not in shown], dtype=np.uint32)
        # Tools used together with the best ones, and tools of the servers nearest the query,
        # are lifted from past the top k.
        co_use = memory is not None and memory.has_co_use()
        servers = self._servers.get() if config.server_weight > 0 else None
        # At least GAP_RANK deep: the "no tool" decision reads the ranking there, whatever
        # top_k a caller asks for (a shorter ranking shrank its gap and rejected requests
        # that need a tool).
        depth = max(
            GAP_RANK,
            limits.k
            + max(CO_USE_DEPTH if co_use else 0, SERVER_DEPTH if servers is not None else 0),
        )
        # Adaptive selection reads each clause's own ranking, made in the same call: the same
        # gate, scope, floor and forced rows as the query's.
        outcome = _toolgate.route(
            self._index, self._bm25, vector, parsed.text,
            alpha=config.alpha, method=config.fusion, top=config.fusion_top, k=depth,
            threshold=limits.floor, flags=limits.flags,
            allow=limits.scope[0], deny=limits.scope[1], forced=forced, rankable=rankable,
            clauses=clauses, clause_weight=config.clause_weight,
            clause_texts=self.query_vectors.clause_texts(parsed.text),
            clause_fusion=config.clause_fusion,
            clause_k=self._clause_depth(limits.adaptive),
            lifted=learned if len(learned) else None,
            near_copy_cosine=config.near_copy_cosine,
            demoted=demoted, demote_weight=config.addressing_weight,
            name_weight=config.name_weight,
        )  # fmt: skip
        # Each getter builds its rows anew: read once.
        forced_rows, ranked = outcome.forced, outcome.ranked
        core_ranked = ranked[:GAP_RANK]  # the ranking no_tool was calibrated on
        learned_in = False  # a learned tool this route may show (not shut out)
        if len(learned):
            # The learned rows came back as forced: each competes for the top k on its fused
            # score plus its lift, under the floor and the +term filter as ranked rows are.
            forced_rows, ranked, learned_in = lifted(
                outcome, set(forced.tolist()), lifts, k=depth, floor=limits.floor,
                rankable=rankable,
            )  # fmt: skip
            turn.reasons = {**turn.reasons, **dict.fromkeys(learned.tolist(), "learned")}
        if servers is not None:
            ranked = servers.lifted(ranked, vector, weight=config.server_weight)
        if co_use and memory is not None:
            ranked, joined = co_used(ranked, memory, k=limits.k)
            turn.reasons = {**dict.fromkeys(joined, "co-used"), **turn.reasons}
        ranked = ranked[: limits.k]
        # Read off the ranking alone, as calibrated; but a request like those a tool served
        # (a learned lift) needs a tool, as one that names a tool or requires a term does.
        # Only a tool the route may show says so: one the state or the lists shut out would
        # leave the request with the ranking's unrelated tools instead of none.
        asked = bool(named) or bool(parsed.required_terms)
        decide = limits.decide and not asked and not learned_in
        no_tool = self._no_tool(core_ranked, parsed.text, decide)
        if no_tool[0] and config.no_tool_drop:
            ranked = []
        elif limits.adaptive:
            # Only where the decision drops tools: no_tool_drop=False keeps every one.
            drop = limits.decide and config.no_tool_drop
            needing = self._clauses_needing_tools(outcome.clauses, parsed.text, drop)
            ranked, picked = adapt(
                ranked, needing, ceiling=limits.k, config=config, cost=self._cost
            )
            turn.reasons = {**turn.reasons, **{row: "clause" for row in picked}}
        else:
            ranked, picked = with_clause_slots(
                ranked, outcome.clauses, slots=config.clause_slots, k=limits.k
            )
            turn.reasons = {**dict.fromkeys(picked, "clause"), **turn.reasons}
        turn.lap("core", core_start)
        return self._result(outcome, turn, ranked=ranked, forced=forced_rows, no_tool=no_tool)

    def _clause_depth(self, adaptive: bool) -> int:
        """How deep the core ranks each clause: for adaptive selection at least
        ``GAP_RANK``, as deep as the "no tool" decision reads (:meth:`_clauses_needing_tools`);
        0 when selection shows no clause's tools."""
        if not adaptive:
            return self._config.clause_slots
        return max(self._config.clause_tools, GAP_RANK) if self._config.clause_tools else 0

    def _clauses_needing_tools(
        self, clauses: Sequence[Sequence[_toolgate.RoutedRow]], text: str, decide: bool
    ) -> list[list[_toolgate.RoutedRow]]:
        """The best ``clause_tools`` rows of each clause of ``text`` that needs a tool; of
        every clause unless ``decide`` (the route's decision drops tools): a search the model
        made or a required call wants tools for each part, and a terse clause is what the
        decision misreads.

        Each clause's best is shown right after the query's best, so a clause of chit-chat
        ("my train was late this morning") put its nearest tool ahead of the request's
        second and third: the "no tool" decision, read on the clause's own ranking, leaves
        it out (docs/design.md, "Noisy requests").
        """
        texts = self.query_vectors.clause_texts(text)
        depth = self._config.clause_tools
        return [
            list(rows[:depth])
            for rows, clause in zip(clauses, texts, strict=False)
            if not (decide and self._no_tool(rows[:GAP_RANK], clause, True)[0])
        ]

    def _lookalike_rows(self, query: str) -> tuple[np.ndarray | None, np.ndarray]:
        """The rows ``query`` may rank, look-alikes left out (``None``: every row), and the
        rows of servers of copies that it weighs down (:meth:`Lookalikes.for_query`)."""
        if self._config.lookalike_cosine is None:
            return None, np.zeros(0, dtype=np.uint32)
        return self._lookalikes.get().for_query(query)

    def _lookalikes_loader(self, config: RouterConfig) -> Callable[[], Lookalikes]:
        """What finds the index's look-alikes at ``config``'s cosine, on first need (a config
        with another cosine gets a pipeline of its own, see :meth:`with_config`)."""
        cosine, ids = config.lookalike_cosine, self._outline.ids
        rows, index = self._rows, self._index
        if cosine is None:
            return lambda: Lookalikes({}, (), len(ids))
        return lambda: find_lookalikes(ids, rows.names(), index.vectors, cosine)

    def _no_tool(
        self, ranked: Sequence[_toolgate.RoutedRow], text: str, decide: bool
    ) -> tuple[bool, float]:
        """Whether ``text``, whose ranked rows are ``ranked``, needs no tool (only when
        ``decide``), and the confidence that it does not."""
        if self._null is None:
            index, bm25 = self._index, self._bm25
            vectors = null_vectors(index.model_id, self.query_vectors.embedder.embed)
            self._null = NullScores.measure(index, bm25, vectors, null_requests())
        dense, sparse = [r.dense for r in ranked], [r.bm25 for r in ranked]
        values = features(self._null, dense, sparse, text, len(self._outline.ids))
        confidence = no_tool_confidence(self._config.no_tool_weights, values)
        cut = self._config.no_tool_threshold
        return decide and cut is not None and confidence >= cut, confidence

    def _cost(self, row: int) -> int | None:
        """Tokens of ``row``'s tool as a compact OpenAI definition, the measure of adaptive
        selection's ``floor_tokens``, as the outline holds them (counted at build time).

        An outline from a manifest that predates the counts has none: they are counted once
        per row, from the catalog loaded on the first adaptive route; ``None`` for a row the
        catalog lacks, and for every row when the catalog cannot be read (routing never needs
        it: selection then goes by counts alone, and the catalog fails where it is read)."""
        if self._outline.schema_tokens is not None:
            return self._outline.schema_tokens[row]
        if row not in self._schema_tokens:
            if self._unreadable:
                return None
            try:
                tools = self._catalog()
            except ToolgateError:
                self._unreadable = True  # tried once, not on every row of every route
                return None
            tool_id = self._outline.ids[row]
            self._schema_tokens[row] = (
                tool_schema_tokens(tools[tool_id]) if tool_id in tools else None
            )
        return self._schema_tokens[row]

    def _select(
        self,
        names: Sequence[str],
        turn: Turn,
        flags: np.ndarray,
        scope: Scope,
        included: Sequence[int],
    ) -> RouteResult:
        """A ``select:`` query: the tools ``names`` names, then ``included``, then the pinned
        ones, each when the gate lets it through; those the caller's lists shut out are
        reported with the reason."""
        selected, unknown = self._rows.selected(names)
        turn.reasons = {row: "included" for row in included} | {row: "selected" for row in selected}
        turn.unknown = [*unknown, *turn.unknown]
        rows = list(dict.fromkeys([*selected, *included]))  # selected first, each once
        core_start = time.perf_counter()
        outcome = _toolgate.route_select(
            self._index, self._bm25, self._rows.with_pinned(rows),
            flags=flags, allow=scope[0], deny=scope[1],
        )  # fmt: skip
        turn.lap("core", core_start)
        return self._result(outcome, turn, self._rows.shut_out(rows, scope))

    def _result(
        self,
        outcome: _toolgate.RouteOutcome,
        turn: Turn,
        shut_out: Iterable[tuple[int, str]] = (),
        ranked: Sequence[_toolgate.RoutedRow] | None = None,
        forced: Sequence[_toolgate.RoutedRow] | None = None,
        no_tool: tuple[bool, float | None] = (False, None),
    ) -> RouteResult:
        return route_result(
            outcome,
            turn,
            ranked=ranked,
            forced=forced,
            ids=self._outline.ids,
            vocabulary=self._vocabulary,
            catalog_version=self._outline.version,
            shut_out=shut_out,
            no_tool=no_tool,
        )

    def scores(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row's cosine for ``text``, the dense signal that :meth:`route` fuses (the
        cosine with the clause bonus, see ``_toolgate.dense_signal``), and its BM25 score."""
        text = query_text(text)
        vector, clauses = self.query_vectors(text)
        cosine = self._index.scores(vector)
        weight = self._config.clause_weight
        dense = _toolgate.dense_signal(self._index, cosine, clauses, weight)
        return cosine, dense, self._bm25.scores(text)


def _checked_k(top_k: int | None, configured: int, n_tools: int) -> int:
    """``top_k``, or the ``configured`` one, checked and capped at the catalog's size."""
    k = configured if top_k is None else top_k
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInputError(f"top_k must be a positive integer, got {top_k!r}")
    # Past the catalog's size a larger k changes nothing, and the core's k is 64-bit.
    return min(k, max(1, n_tools))


def _checked_floor(threshold: float | DefaultType | None, configured: float | None) -> float | None:
    """The cosine floor: ``threshold``, or the ``configured`` one for ``DEFAULT``."""
    floor = configured if threshold is DEFAULT else threshold
    if floor is None:
        return None
    if (
        isinstance(floor, bool)
        or not isinstance(floor, (int, float, np.floating))
        or not math.isfinite(floor)
    ):
        raise InvalidInputError(f"threshold must be a finite number or None, got {floor!r}")
    return float(floor)

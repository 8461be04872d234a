"""The Router: route / promote / verify over one catalog.

A router holds a catalog, its embedding matrix (memory-mapped, in the Rust core), a BM25 index
over names, descriptions and parameter text, and the compiled precondition masks. ``route`` is
one embedding plus one call into the core, a handful of O(N) passes with the GIL released, so
one router can serve many threads. The core ranks on the matrix's scan scores, at its storage
precision (int8 by default: cosines within the quantisation error of exact), unlike
``Index.search``, which re-scores its candidates in f32.

This class is a facade over its parts: :mod:`~toolgate.routing.build` (the tools read, the
index files built, saved and opened), :mod:`~toolgate.routing.pipeline` (one route, start to
end, over :mod:`~toolgate.routing.query`, :mod:`~toolgate.routing.rows`,
:mod:`~toolgate.routing.state`, :mod:`~toolgate.routing.history` and
:mod:`~toolgate.routing.outcome`), :mod:`~toolgate.routing.store` (the directory's format),
:mod:`~toolgate.routing.stats`, and below them :mod:`toolgate.promotion`,
:mod:`toolgate.verify` and :mod:`toolgate.telemetry`.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgate import _toolgate
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import embedding_views
from toolgate.errors import InvalidInputError
from toolgate.lazy import Lazy
from toolgate.promotion.promote import promote_tools
from toolgate.routing.build import (
    RouterParts,
    ToolsSource,
    build_parts,
    catalog_of,
    check_refresh_path,
    default_embedder,
    embed_tools,
    open_cache,
    open_parts,
    refreshed_vectors,
)
from toolgate.routing.config import DEFAULT, DefaultType, RouterConfig
from toolgate.routing.feedback import LearnConfig, LearnedMemory
from toolgate.routing.history import HistoryTurn
from toolgate.routing.learned_store import LearnedStore, open_store, query_key
from toolgate.routing.near_duplicates import (
    DEFAULT_THRESHOLD,
    DuplicateGroup,
    near_duplicate_groups,
)
from toolgate.routing.outcome import check_current
from toolgate.routing.outline import reusable_tokens
from toolgate.routing.pipeline import RoutePipeline
from toolgate.routing.result import RouteResult
from toolgate.routing.state import State
from toolgate.routing.stats import catalog_stats
from toolgate.routing.store import CATALOG, load_saved_catalog, publish, router_directory
from toolgate.telemetry.recorder import Telemetry, as_telemetry
from toolgate.verify import verify_call

if TYPE_CHECKING:
    from toolgate.embedding.cache import EmbeddingCache
    from toolgate.embedding.embedder import Embedder
    from toolgate.promotion.promote import Budget, Promotion
    from toolgate.verify import Verdict

__all__ = ["DEFAULT", "Router", "RouterConfig", "default_embedder"]

_SCHEMA_CACHE_ENTRIES = 4096
_SCHEMA_CACHE_BYTES = 64 << 20


class Router:
    """Routes each turn to the few tools the model should see in full.

    >>> from toolgate import Router
    >>> router = Router.from_tools(tools)  # doctest: +SKIP
    >>> router.route("open an issue for the crash", top_k=5).ids  # doctest: +SKIP
    ['github/create_issue', ...]
    """

    def __init__(
        self,
        parts: RouterParts,
        *,
        catalog: Catalog | Callable[[], Catalog],
        embedder: Embedder | Callable[[], Embedder],
        telemetry: Telemetry | None = None,
    ) -> None:
        """Use :meth:`from_tools`, :meth:`from_catalog` or :meth:`open` instead.

        ``catalog`` and ``embedder`` may be loaders, called on first use: routing needs only
        the ``parts``, whose outline names the catalog's tools.
        """
        self._parts = parts
        self._catalog = Lazy(catalog) if isinstance(catalog, Catalog) else Lazy(None, catalog)
        self.config = parts.config
        self.telemetry = as_telemetry(telemetry)
        self._base: Router | None = None  # see with_config
        if parts.workdir is not None:
            # A router built without a path owns a temporary directory for its index files,
            # removed when the router is collected (an explicit finalizer, not
            # TemporaryDirectory, whose implicit clean-up warns).
            weakref.finalize(self, shutil.rmtree, parts.workdir, ignore_errors=True)
        self._pipeline = RoutePipeline(
            parts.index, parts.bm25, parts.outline, parts.vocabulary, parts.config, embedder,
            lambda: self.catalog, parts.null,
        )  # fmt: skip
        self._schema_cache = _toolgate.SchemaCache(_SCHEMA_CACHE_ENTRIES, _SCHEMA_CACHE_BYTES)
        self._learn_from_verify = False

    @property
    def catalog(self) -> Catalog:
        """The tools this router serves (read from disk on first use after :meth:`open`)."""
        return self._catalog.get()

    @classmethod
    def from_tools(
        cls,
        tools: ToolsSource,
        *,
        server: str | None = None,
        lenient: bool = False,
        **options: Any,
    ) -> Router:
        """A router over ``tools``: a list of tool dicts in any provider's shape (or
        :class:`Tool` objects), a whole document such as an MCP ``tools/list`` result or
        ``{server: result}`` for several servers, or a catalog file.

        Tools whose document names no server are given ``server``; else, read from a file,
        the file's name up to its first dot (as ``toolgate route --tools FILE`` does); else
        ``"default"``. ``lenient=True`` skips bad tools with a warning; other options are
        those of :meth:`from_catalog`.
        """
        catalog = catalog_of(tools, server=server, lenient=lenient)
        return cls.from_catalog(catalog, **options)

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog,
        *,
        config: RouterConfig | None = None,
        embedder: Embedder | None = None,
        path: str | os.PathLike[str] | None = None,
        cache: EmbeddingCache | str | os.PathLike[str] | bool | None = True,
        telemetry: Telemetry | None = None,
    ) -> Router:
        """Embed and index ``catalog``; saved under ``path`` when given, else in a temp dir.

        ``cache`` keeps tool embeddings across runs (``True``: the default file under
        ``$TOOLGATE_HOME``; a path or an :class:`EmbeddingCache`; ``None`` or ``False``: none),
        so re-indexing a changed catalog embeds only the tools that changed. ``telemetry``
        receives an event for every route, promote and verify.
        """
        as_telemetry(telemetry)  # before embedding, the slow part
        config = config or RouterConfig()
        embedder = embedder or default_embedder(config.precision)
        vectors = embed_tools(embedder, embedding_views(catalog), open_cache(cache))
        parts = build_parts(catalog, vectors, config, embedder.model_id, path, embedder.embed)
        return cls(parts, catalog=catalog, embedder=embedder, telemetry=telemetry)

    def refresh(
        self,
        tools: ToolsSource,
        *,
        path: str | os.PathLike[str] | None = None,
        server: str | None = None,
        lenient: bool = False,
    ) -> Router:
        """A new router over ``tools``, a new version of this one's catalog, that embeds only
        the tools added or changed since; unchanged tools keep their stored vectors. This
        router is not changed: serve the one returned (``router = router.refresh(tools)``).

        ``tools`` is a :class:`Catalog` or anything :meth:`from_tools` takes, read with the
        same ``server`` and ``lenient``. Use it when a file changes or an MCP server sends
        ``notifications/tools/list_changed`` (see :meth:`replace_server`). ``path`` must
        differ from this router's directory, which stays valid until the old router is dropped.
        """
        catalog = catalog_of(tools, server=server, lenient=lenient)
        index = self._parts.index
        check_refresh_path(index, path)
        embedder = self._pipeline.query_vectors.embedder
        outline = self._parts.outline
        vectors = refreshed_vectors(index, self.catalog, outline, catalog, embedder)
        tokens = reusable_tokens(self.catalog, outline)
        parts = build_parts(
            catalog, vectors, self.config, embedder.model_id, path, embedder.embed, tokens
        )
        new = type(self)(parts, catalog=catalog, embedder=embedder, telemetry=self.telemetry)
        if (memory := self.memory) is not None:  # the same store, the new version's rows
            new.learn(memory.store, config=memory.config, from_verify=self._learn_from_verify)
        return new

    def replace_server(self, server: str, tools: Any) -> Router:
        """:meth:`refresh` after one server's ``tools/list`` changed: ``tools`` is its new list
        in any format :meth:`Catalog.replace_server` accepts. Returns the new router."""
        return self.refresh(self.catalog.replace_server(server, tools))

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        embedder: Embedder | None = None,
        telemetry: Telemetry | None = None,
    ) -> Router:
        """Reopen a router saved with :meth:`save` (or built with ``path=``).

        The matrix is memory-mapped, not read, and the full catalog (needed by
        :meth:`promote` and :meth:`verify`, not by :meth:`route`) and the embedding model load
        on first use, so opening takes milliseconds at any N.
        """
        directory = router_directory(path)
        parts = open_parts(directory)
        return cls(
            parts,
            catalog=lambda: load_saved_catalog(directory / CATALOG, parts.outline),
            embedder=embedder or (lambda: default_embedder(parts.config.precision)),
            telemetry=telemetry,
        )

    def with_config(self, config: RouterConfig) -> Router:
        """This router under ``config`` (fitted by ``toolgate calibrate``, say): the same
        index, so a setting the index is built with (BM25's, the storage, the model's
        precision) must stay as it is; ranking and selection settings may change."""
        built = ("bm25_k1", "bm25_b", "bm25_weights", "index_dtype", "precision")
        if changed := [
            name for name in built if getattr(config, name) != getattr(self.config, name)
        ]:
            raise InvalidInputError(
                f"{', '.join(changed)} set how the index was built: build a new router for them"
            )
        view = copy.copy(self)
        view.config = config
        view._parts = dataclasses.replace(self._parts, config=config)  # what save() writes
        view._pipeline = self._pipeline.with_config(config)
        # A router built without a path removes its index files when collected: the view
        # reads the same files, so it keeps that router alive.
        view._base = self
        return view

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this router to the directory ``path`` (created if needed).

        Not over a router that processes have open: use :meth:`publish` for that.
        """
        self._parts.save(self.catalog, path)

    def publish(self, path: str | os.PathLike[str], *, keep: int = 2) -> Path:
        """Save this router to a new directory and switch the symbolic link ``path`` to it in
        one rename: the safe way to replace a router that processes have open (see
        :func:`toolgate.routing.store.publish`). Returns the new directory."""
        return publish(self.save, path, keep=keep)

    @property
    def model_id(self) -> str:
        """The embedding model the index was built with."""
        return str(self._parts.index.model_id)

    def __len__(self) -> int:
        return len(self._parts.outline.ids)

    def __repr__(self) -> str:
        return f"Router({len(self)} tools, {self._parts.index.dtype} index, {self.model_id})"

    def route(
        self,
        query: str,
        *,
        state: State | Mapping[str, Iterable[str]] | None = None,
        history: Sequence[HistoryTurn] | None = None,
        top_k: int | None = None,
        threshold: float | DefaultType | None = DEFAULT,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        turn_id: str = "",
        forms: bool = True,
        include: Iterable[str] | None = None,
        adaptive: bool | None = None,
        decide: bool = True,
    ) -> RouteResult:
        """The tools to show the model in full this turn, best first (docs/api.md, "route").

        ``query`` is plain text or a ToolSearch form (:mod:`~toolgate.routing.query`); tools
        it names verbatim and pinned tools are always included when eligible, as are those
        ``include`` names (what a ``tool_search`` found last turn; entries naming no tool are
        reported in the result's ``unknown``). ``state`` gates tools by their preconditions;
        ``allow`` / ``deny`` are patterns (:mod:`~toolgate.catalog.scopes`); ``threshold``
        overrides the configured cosine floor (``None``: none); ``history`` holds earlier
        turns, most recent last. ``forms=False`` reads the whole query as text, for words a
        person wrote. ``turn_id`` labels the telemetry event.
        ``top_k`` is a ceiling when selection is adaptive (``adaptive``, default the
        config's): how many ranked tools are shown then follows the evidence
        (:mod:`toolgate.routing.selection`); ``adaptive=False`` shows the top ``top_k``.
        The result says when the request needs none of the tools (``no_tool``, see
        :mod:`toolgate.routing.no_tool`); ``decide=False`` never says so (a search the model
        asked for wants an answer), though the confidence is still reported.
        """
        if adaptive is not None and not isinstance(adaptive, bool):
            raise InvalidInputError(
                f"adaptive must be True, False or None, got a {type(adaptive).__name__}"
            )
        result = self._pipeline.route(
            query, state=state, history=history, top_k=top_k, threshold=threshold,
            allow=allow, deny=deny, forms=forms, include=include,
            adaptive=self.config.adaptive if adaptive is None else adaptive,
            decide=decide is not False,
        )  # fmt: skip
        if self.telemetry is not None:
            self.telemetry.route(result, turn_id=turn_id)
        return result

    @property
    def memory(self) -> LearnedMemory | None:
        """What this router learned from use (:meth:`learn`), or ``None``."""
        return self._pipeline.memory

    def learn(
        self,
        store: LearnedStore | str | os.PathLike[str] | None = None,
        *,
        config: LearnConfig | None = None,
        from_verify: bool = False,
    ) -> LearnedMemory:
        """Learn from use: lift tools for requests like those they served (docs/api.md,
        "Learning from use"). Returns the memory, read from ``store`` for this catalog version.

        ``store`` is a SQLite path (``None``: ``$TOOLGATE_HOME/learned.sqlite3``; ``":memory:"``:
        this process only), a ``postgresql://`` address that replicas share, or a
        :class:`~toolgate.routing.learned_store.LearnedStore`. ``from_verify=True`` makes every
        call that passes :meth:`verify` against a route count as used for that route's query.
        """
        memory = LearnedMemory(
            open_store(store),
            f"{self.model_id}@{self._parts.outline.version}",
            self._parts.outline.ids,
            lambda: [tool.server for tool in self.catalog],
            self._parts.index.dim,
            config,
        )
        self._pipeline.memory = memory
        self._learn_from_verify = from_verify
        return memory

    def feedback(self, query: str, *, used: Iterable[str] = (), missed: Iterable[str] = ()) -> int:
        """Record which tools served ``query``: ``used`` ones the turn called, ``missed`` ones
        it needed but the route did not show (a ``tool_search`` found them, say). Both are
        tool ids. Starts learning into the default store if :meth:`learn` was not called.
        Returns how many tools were recorded (a flood past the rate cap is refused)."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("feedback needs the query's text")
        memory = self.learn() if self.memory is None else self.memory
        tools = [*_tool_ids(used, "used"), *_tool_ids(missed, "missed")]
        rows = [memory.row(tool) for tool in tools]
        if not rows:
            return 0
        vector, _ = self._pipeline.query_vectors(query)
        return memory.learn(vector, rows, query_key(query))

    def forget(self, *, tool: str | None = None, server: str | None = None) -> int:
        """Forget what was learned for the tool ``tool`` (an id) or every tool of ``server``,
        in the store too (every catalog version). Returns the rows dropped from this memory."""
        memory = self.memory
        if memory is None:
            if (tool is None) == (server is None):
                raise InvalidInputError("forget takes one of tool= or server=")
            return 0
        return memory.forget(tool=tool, server=server)

    def catalog_stats(self, encoding: str = "cl100k_base") -> dict[str, Any]:
        """Size of the catalog and what sending all of it would cost, per provider."""
        parts = self._parts
        return catalog_stats(self.catalog, parts.index, parts.vocabulary, encoding)

    def near_duplicates(self, threshold: float = DEFAULT_THRESHOLD) -> list[DuplicateGroup]:
        """Groups of tools whose rows have a cosine of at least ``threshold``: near copies
        to fold into one (see :mod:`toolgate.routing.near_duplicates`), largest group first."""
        vectors = self._parts.index.vectors(range(len(self.catalog)))
        return near_duplicate_groups(vectors, self.catalog.ids, threshold)

    def signals(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The dense (cosine) and BM25 scores of every tool for ``text``, in catalog order."""
        cosine, _, sparse = self._scores(text)
        return cosine, sparse

    def _scores(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each tool's cosine, the dense signal that :meth:`route` fuses (the cosine with the
        clause bonus, see ``_toolgate.dense_signal``), and its BM25 score."""
        return self._pipeline.scores(text)

    def promote(
        self,
        result: RouteResult,
        *,
        format: str = "openai",
        budget: Budget | None = None,
        schema_source: Any = None,
        pool: str = "auto",
        turn_id: str = "",
    ) -> Promotion:
        """Phase 1 (the summary pool) and phase 2 (full schemas of ``result``'s tools).

        Full schemas come from ``schema_source`` through the router's LRU schema cache when
        given, else from the catalog. ``pool`` is ``"auto"``, ``"full"``, ``"digest"`` (a
        per-server digest and a ``tool_search`` tool) or ``"none"``. See
        :func:`toolgate.promotion.promote.promote_tools`.
        """
        check_current(result, self._parts.outline.version)
        promotion = promote_tools(
            self.catalog, result, format=format, budget=budget, schema_source=schema_source,
            cache=self._schema_cache, pool=pool,
        )  # fmt: skip
        if self.telemetry is not None:
            self.telemetry.promote(promotion, turn_id=turn_id)
        return promotion

    def verify(
        self,
        tool_call: Mapping[str, Any],
        result: RouteResult | Promotion | Sequence[str],
        *,
        turn_id: str = "",
    ) -> Verdict:
        """Whether ``tool_call`` names a tool active this turn, with valid arguments.

        ``result`` is the turn's :class:`RouteResult`, or its :class:`Promotion` (then calls
        to the promotion's ``tool_search`` tool pass too), or the ids of the tools the model
        was offered (pinned tools are added). See :func:`toolgate.verify.verify_call`.
        """
        start = time.perf_counter()
        if isinstance(result, RouteResult):
            check_current(result, self._parts.outline.version)
        verdict = verify_call(self.catalog, result, tool_call)
        if (
            self._learn_from_verify
            and verdict.ok
            and verdict.tool_id is not None
            and isinstance(result, RouteResult)
            and result.form == "text"
        ):
            self.feedback(result.query, used=[verdict.tool_id])
        if self.telemetry is not None:
            elapsed = (time.perf_counter() - start) * 1e3
            self.telemetry.verify(verdict, turn_id=turn_id, latency_ms=elapsed)
        return verdict


def _tool_ids(ids: Iterable[str], name: str) -> list[str]:
    """``ids`` as a list of tool ids, or an error naming the argument ``name``."""
    if isinstance(ids, str):
        raise InvalidInputError(f"{name} must be a list of tool ids, not {ids!r}")
    listed = list(ids)
    for tool_id in listed:
        if not isinstance(tool_id, str) or not tool_id:
            raise InvalidInputError(f"{name} holds {tool_id!r}, not a tool id")
    return listed

"""The Router: route / promote / verify over one catalog.

A facade over its parts: :mod:`~toolgate.routing.build` (index files built, refreshed, opened),
:mod:`~toolgate.routing.pipeline` (one route, start to end), :mod:`~toolgate.routing.feedback`
(learning from use), and below them :mod:`toolgate.promotion`, :mod:`toolgate.verify` and
:mod:`toolgate.telemetry`. Routing ranks at the matrix's storage precision, unlike
``Index.search``, which re-scores its candidates in f32; one router serves many threads.
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

from toolgate.arguments import check_instance
from toolgate.catalog.catalog import Catalog
from toolgate.forks import BoundToProcess
from toolgate.lazy import Lazy
from toolgate.promotion.promote import promote_tools
from toolgate.promotion.schema_source import SchemaSourceLike, default_cache
from toolgate.routing.build import (
    RouterParts,
    ToolsSource,
    catalog_of,
    default_embedder,
    index_catalog,
    open_parts,
)
from toolgate.routing.config import DEFAULT, DefaultType, RouterConfig
from toolgate.routing.feedback import LearnConfig, LearnedMemory
from toolgate.routing.history import HistoryTurn
from toolgate.routing.learned_store import LearnedStore
from toolgate.routing.near_duplicates import (
    DEFAULT_THRESHOLD,
    DuplicateGroup,
    near_duplicate_groups,
)
from toolgate.routing.outcome import check_current
from toolgate.routing.pipeline import RoutePipeline
from toolgate.routing.result import RouteResult
from toolgate.routing.state import State
from toolgate.routing.stats import catalog_stats
from toolgate.routing.store import CATALOG, load_saved_catalog, publish, router_directory
from toolgate.telemetry.recorder import Telemetry, VerdictReport, as_telemetry
from toolgate.verify import verify_call

if TYPE_CHECKING:
    from toolgate.embedding.cache import EmbeddingCache
    from toolgate.embedding.embedder import Embedder
    from toolgate.promotion.promote import Budget, Promotion
    from toolgate.verify import Verdict

__all__ = ["DEFAULT", "Router", "RouterConfig", "default_embedder"]

_SCHEMA_CACHE_ENTRIES = 4096


class Router(BoundToProcess):
    """Routes each turn to the few tools the model should see in full.

    Over the demo catalog (``toolgate demo``), whose ``github/create_issue`` requires the
    scope ``github:write`` (the examples load the embedding model):

    >>> from importlib import resources
    >>> from toolgate import Router
    >>> demo = resources.files("toolgate") / "data" / "demo_catalog.json"
    >>> router = Router.from_tools(demo)  # doctest: +SKIP
    >>> write = {"scopes": ["github:write"]}
    >>> router.route("open an issue for the crash", state=write).ids  # doctest: +SKIP
    ['github/create_issue', 'github/get_issue', 'github/add_issue_comment']
    """

    _elsewhere = "save it (router.save(path)) and Router.open(path) in the other process"

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
            weakref.finalize(self, _remove_owned_directory, parts.workdir, os.getpid())
            # The router's own, by its id: a copy (with_config's view) has this dict's too.
            self._owned_directory = (id(self), parts.workdir, os.getpid())
        self._pipeline = RoutePipeline(
            parts.index, parts.bm25, parts.outline, parts.vocabulary, parts.config, embedder,
            self._catalog.get, parts.null,  # a lambda over self: a cycle, files kept till GC
        )  # fmt: skip
        self._schema_cache = default_cache(_SCHEMA_CACHE_ENTRIES)

    def __del__(self) -> None:
        # Freed by reference counting, run before the finalizer above (weak references are
        # cleared after __del__): the index is let go here, so its file is no longer mapped
        # when the directory is removed. Windows refuses to delete a mapped file.
        self.__dict__.pop("_pipeline", None)
        self.__dict__.pop("_parts", None)
        # The cyclic GC runs weak references' callbacks first: the finalizer then removed the
        # directory while the index was still mapped. Removed again now that it is not, by
        # the router that made it, or by a view of it the GC freed after it (a view keeps its
        # base alive, so a router already let go means the GC is freeing both, in no set
        # order). The router, not the view's base: a view of a view freed with that view
        # removed the directory of a router still in use.
        owned = self.__dict__.get("_owned_directory")
        if owned is not None and (owned[0] == id(self) or _maker_let_go(self)):
            _remove_owned_directory(*owned[1:])

    def __copy__(self) -> Router:
        # A copy reads the same index files: like with_config's view, it keeps this router
        # alive, or this router's finalizer removed them while the copy still served.
        clone: Router = super().__copy__()
        clone._base = self
        return clone

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
        config: RouterConfig | None = None,
        embedder: Embedder | None = None,
        path: str | os.PathLike[str] | None = None,
        cache: EmbeddingCache | str | os.PathLike[str] | bool | None = True,
        telemetry: Telemetry | None = None,
    ) -> Router:
        """A router over ``tools``: tool dicts in any provider's shape, a whole document (an
        MCP ``tools/list`` result, ``{server: result}``) or a catalog file (docs/api.md).

        ``server`` names the server of tools whose document names none; ``lenient=True``
        skips bad tools with a warning; other options are those of :meth:`from_catalog`
        (spelt out, not ``**options``, so a type checker catches a misspelt one).
        """
        catalog = catalog_of(tools, server=server, lenient=lenient)
        return cls.from_catalog(
            catalog, config=config, embedder=embedder, path=path, cache=cache,
            telemetry=telemetry,
        )  # fmt: skip

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

        ``cache`` keeps tool embeddings across runs (``True``: the default file; a path or an
        :class:`EmbeddingCache`; ``None`` / ``False``: none), so a changed catalog embeds only
        what changed. ``telemetry`` receives an event for every route, promote and verify.
        """
        as_telemetry(telemetry)  # before embedding, the slow part
        check_instance("config", config, RouterConfig, optional=True)
        config = RouterConfig() if config is None else config
        embedder = embedder or default_embedder(config.precision)
        parts = index_catalog(catalog, config=config, embedder=embedder, path=path, cache=cache)
        return cls(parts, catalog=catalog, embedder=embedder, telemetry=telemetry)

    def refresh(
        self,
        tools: ToolsSource,
        *,
        path: str | os.PathLike[str] | None = None,
        server: str | None = None,
        lenient: bool = False,
    ) -> Router:
        """A new router over ``tools`` (a :class:`Catalog` or what :meth:`from_tools` takes),
        a new version of this one's catalog: only tools added or changed are embedded. This
        router is not changed: serve the one returned. ``path`` must differ from this
        router's directory, which stays valid until this router is dropped.
        """
        catalog = catalog_of(tools, server=server, lenient=lenient)
        embedder = self._pipeline.query_vectors.embedder
        parts = self._parts.refreshed(self.catalog, catalog, embedder, path)
        new = type(self)(parts, catalog=catalog, embedder=embedder, telemetry=self.telemetry)
        new._pipeline.learning.follow(self._pipeline.learning)
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

        The matrix is memory-mapped; the full catalog (which :meth:`route` does not need)
        and the model load on first use, so opening is quick at any N.
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
        check_instance("config", config, RouterConfig)
        parts = self._parts.with_config(config)
        view = copy.copy(self)  # keeps this router, and so its index files, alive
        view.config = config
        view._parts = parts  # what save() writes
        view._pipeline = self._pipeline.with_config(config)
        return view

    def recentred(self, row_centring: float) -> Router:
        """A new router over this one's catalog and settings with its rows centred by
        ``row_centring`` instead (:mod:`toolgate.routing.centring`): the tools' embeddings are
        read back from this index, so no tool is embedded again. It lives in a temporary
        directory; :meth:`save` it to keep it."""
        embedder = self._pipeline.query_vectors.embedder
        parts = self._parts.recentred(self.catalog, row_centring, embedder.embed)
        return Router(parts, catalog=self.catalog, embedder=embedder, telemetry=self.telemetry)

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

        ``query`` is text or a ToolSearch form; tools it names, ``include`` names and pinned
        tools come first when eligible. ``state`` gates by preconditions, ``allow`` / ``deny``
        are patterns, ``history`` holds earlier turns; ``top_k``, ``threshold`` and
        ``adaptive`` override the config. ``decide=False`` never answers ``no_tool``.
        """
        result = self._pipeline.route(
            query, state=state, history=history, top_k=top_k, threshold=threshold,
            allow=allow, deny=deny, forms=forms, include=include, adaptive=adaptive,
            decide=decide,
        )  # fmt: skip
        if self.telemetry is not None:
            self.telemetry.route(result, turn_id=turn_id)
        return result

    @property
    def memory(self) -> LearnedMemory | None:
        """What this router learned from use (:meth:`learn`), or ``None``."""
        return self._pipeline.learning.memory

    def learn(
        self,
        store: LearnedStore | str | os.PathLike[str] | None = None,
        *,
        config: LearnConfig | None = None,
        from_verify: bool = False,
    ) -> LearnedMemory:
        """Learn from use: lift tools for requests like those they served (docs/api.md,
        "Learning from use"). Returns the memory, read from ``store`` for this catalog version.

        ``store`` is a SQLite path (``None``: the default file), a ``postgresql://`` address
        or a :class:`LearnedStore`. ``from_verify=True`` counts every call that passes
        :meth:`verify` against a route of a text query, or the promotion made of one, as used
        for that query.
        """
        return self._pipeline.learning.start(store, config=config, from_verify=from_verify)

    def feedback(self, query: str, *, used: Iterable[str] = (), missed: Iterable[str] = ()) -> int:
        """Record which tools served ``query``: ``used`` ones the turn called, ``missed`` ones
        it needed but the route did not show (a ``tool_search`` found them, say). Both are
        tool ids. Starts learning into the default store if :meth:`learn` was not called.
        Returns how many tools were recorded (a flood past the rate cap is refused)."""
        return self._pipeline.learning.record(query, used, missed, self._query_vector)

    def _query_vector(self, query: str) -> np.ndarray:
        vector, _ = self._pipeline.query_vectors(query)
        return vector

    def forget(self, *, tool: str | None = None, server: str | None = None) -> int:
        """Forget what was learned for the tool ``tool`` (an id) or every tool of ``server``,
        in the store too (every catalog version). Returns the rows dropped from this memory."""
        return self._pipeline.learning.forget(tool=tool, server=server)

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
        schema_source: SchemaSourceLike | None = None,
        pool: str = "auto",
        turn_id: str = "",
        compact: bool = True,
    ) -> Promotion:
        """Phase 1 (the summary pool) and phase 2 (full schemas of ``result``'s tools), as
        :func:`toolgate.promotion.promote.promote_tools`; schemas from ``schema_source`` go
        through the router's schema cache. ``compact=False`` sends each definition as given."""
        check_current(result, self._parts.outline.version)
        promotion = promote_tools(
            self.catalog, result, format=format, budget=budget, schema_source=schema_source,
            cache=self._schema_cache, pool=pool, compact=compact,
        )  # fmt: skip
        if result.form == "text":  # what verify learns from (Router.learn(from_verify=True))
            promotion = dataclasses.replace(promotion, query=result.query)
        if self.telemetry is not None:
            self.telemetry.promote(promotion, turn_id=turn_id)
        return promotion

    def verify(
        self,
        tool_call: object,
        result: RouteResult | Promotion | Sequence[str],
        *,
        turn_id: str = "",
    ) -> Verdict:
        """Whether ``tool_call`` names a tool active this turn, with valid arguments, as
        :func:`toolgate.verify.verify_call`: ``result`` is the turn's :class:`RouteResult`,
        :class:`Promotion` or the ids of the tools offered."""
        verdict, report = self.checked(tool_call, result, turn_id=turn_id)
        if verdict.ok:
            self._pipeline.learning.verified(
                _routed_text(result), verdict.tool_id, self._query_vector
            )
        report(verdict)
        return verdict

    def checked(
        self,
        tool_call: object,
        result: RouteResult | Promotion | Sequence[str],
        *,
        turn_id: str = "",
    ) -> tuple[Verdict, VerdictReport]:
        """:meth:`verify`'s check alone, for a caller that reports the verdict its call ends
        with (an MCP proxy's): the verdict, and what reports a verdict to :attr:`telemetry`
        with this check's latency. Nothing is reported or learned here."""
        start = time.perf_counter()
        if isinstance(result, RouteResult):
            check_current(result, self._parts.outline.version)
        verdict = verify_call(self.catalog, result, tool_call)
        elapsed = (time.perf_counter() - start) * 1e3
        return verdict, VerdictReport(self.telemetry, turn_id, elapsed)


def _routed_text(result: object) -> str:
    """The text query ``result`` was routed from: a :class:`RouteResult` of a text query, or
    a :class:`Promotion` that :meth:`Router.promote` made of one; "" for anything else."""
    if isinstance(result, RouteResult):
        return result.query if result.form == "text" else ""
    query = getattr(result, "query", "")
    return query if isinstance(query, str) else ""


def _maker_let_go(view: Router) -> bool:
    """Whether ``view`` is a view (:meth:`Router.with_config`, of a view too) whose router,
    the first of its bases, has been let go (its ``__del__`` ran)."""
    maker = view
    while (base := maker.__dict__.get("_base")) is not None:
        maker = base
    return maker is not view and "_pipeline" not in vars(maker)


def _remove_owned_directory(directory: Path, owner: int) -> None:
    """Remove ``directory`` if this is the process ``owner`` that made it. A forked child
    (a pre-forking server's worker) inherits the router and its finalizer, and runs it when
    it exits: the directory is still its parent's, which routes and saves from it."""
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)

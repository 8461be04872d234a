"""The Router: route / promote / verify over one catalog.

A router holds a catalog, its embedding matrix (memory-mapped, in the Rust core), a BM25 index
over names, descriptions and parameter text, and the compiled precondition masks. ``route`` is one
embedding plus a handful of O(N) passes in Rust with the GIL released, so one router can serve
many threads.
"""

from __future__ import annotations

import copy
import math
import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from toolgate import _toolgate
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import TEXT_VERSION, bm25_document, embedding_views
from toolgate.catalog.tool import Tool
from toolgate.embedding.clauses import clauses as clause_texts
from toolgate.errors import IndexFormatError, InvalidInputError
from toolgate.formats.tokens import count_tools
from toolgate.lazy import Lazy
from toolgate.promotion.promote import promote_tools
from toolgate.routing.config import DEFAULT, DefaultType, RouterConfig
from toolgate.routing.history import HistoryTurn, blend_history, history_texts
from toolgate.routing.near_duplicates import (
    DEFAULT_THRESHOLD,
    DuplicateGroup,
    near_duplicate_groups,
)
from toolgate.routing.query import ParsedQuery, parse_query
from toolgate.routing.result import GatedOut, RoutedTool, RouteResult
from toolgate.routing.scopes import ScopeMatcher, pattern_list
from toolgate.routing.selection import adapt
from toolgate.routing.state import FlagVocabulary, State
from toolgate.routing.store import (
    BM25,
    CATALOG,
    MANIFEST,
    MATRIX,
    CatalogOutline,
    SavedRouter,
    check_files,
    copy_atomic,
    fingerprint,
    load_saved_catalog,
    read_manifest,
    renamed_rows,
    save_fingerprinted,
    write_catalog_and_manifest,
)
from toolgate.telemetry.recorder import Telemetry, as_telemetry
from toolgate.unicode import well_formed
from toolgate.verify import verify_call

if TYPE_CHECKING:
    from toolgate.embedding.cache import EmbeddingCache
    from toolgate.embedding.embedder import Embedder
    from toolgate.promotion.promote import Budget, Promotion
    from toolgate.verify import Verdict

__all__ = ["DEFAULT", "Router", "RouterConfig", "default_embedder"]

_QUERY_CACHE_SIZE = 1024
# Where a name mentioned in running text ends, as in the core's name index
# (rust/bm25/names.rs): whitespace and these delimiters. A word is tried as it is, then
# without the characters around it that are neither alphanumeric nor "_" (**web__search**.).
_MENTION_SPLIT = re.compile(r"[\s,;()\[\]{}<>\"'`|=]+")
_MENTION_EDGES = re.compile(r"^[^\w]+|[^\w]+$")
_EMBEDDING_DIM = 384
_SCHEMA_CACHE_ENTRIES = 4096
_SCHEMA_CACHE_BYTES = 64 << 20


def default_embedder(
    precision: Literal["fp32", "int8"], *, progress: bool | None = None
) -> Embedder:
    """The bundled model at ``precision`` (``progress`` as
    :class:`~toolgate.embedding.embedder.Embedder`)."""
    from toolgate.embedding.embedder import (
        Embedder,  # here: importing toolgate must not load ONNX Runtime
    )

    return Embedder(precision=precision, progress=progress)


class Router:
    """Routes each turn to the few tools the model should see in full.

    >>> from toolgate import Router
    >>> router = Router.from_tools(tools)  # doctest: +SKIP
    >>> router.route("open an issue for the crash", top_k=5).ids  # doctest: +SKIP
    ['github/create_issue', ...]
    """

    def __init__(
        self,
        *,
        catalog: Catalog | Callable[[], Catalog],
        index: _toolgate.Index,
        bm25: _toolgate.Bm25,
        embedder: Embedder | Callable[[], Embedder],
        config: RouterConfig,
        vocabulary: FlagVocabulary,
        outline: CatalogOutline | None = None,
        telemetry: Telemetry | None = None,
        workdir: Path | None = None,
    ) -> None:
        """Use :meth:`from_tools`, :meth:`from_catalog` or :meth:`open` instead.

        ``catalog`` and ``embedder`` may be loaders, called on first use; routing needs only
        the ``outline`` (ids, pinned rows, version) of a catalog that is not loaded yet.
        """
        if isinstance(catalog, Catalog):
            outline = CatalogOutline.of(catalog)
            self._catalog = Lazy(catalog)
        else:
            self._catalog = Lazy(None, catalog)
        if outline is None:
            raise InvalidInputError("a catalog loader needs the catalog's outline")
        if len(index) != len(outline.ids) or len(bm25) != len(outline.ids):
            raise IndexFormatError(
                f"index ({len(index)} rows) and BM25 ({len(bm25)} documents) do not match "
                f"the catalog ({len(outline.ids)} tools)"
            )
        self.config = config
        self.telemetry = as_telemetry(telemetry)
        if hasattr(embedder, "embed"):
            self._embedder: Lazy[Embedder] = Lazy(embedder)  # type: ignore[arg-type]
        else:
            load: Callable[[], Embedder] = embedder
            self._embedder = Lazy(None, lambda: self._checked_embedder(load()))
        self._index = index
        self._bm25 = bm25
        self._vocabulary = vocabulary
        self._outline = outline
        if workdir is not None:
            # A router built without a path owns a temporary directory for its index files,
            # removed when the router is collected (an explicit finalizer, not
            # TemporaryDirectory, whose implicit clean-up warns).
            weakref.finalize(self, shutil.rmtree, workdir, ignore_errors=True)
        self._ids = list(outline.ids)
        self._schema_cache = _toolgate.SchemaCache(_SCHEMA_CACHE_ENTRIES, _SCHEMA_CACHE_BYTES)
        self._scopes: Lazy[ScopeMatcher] = Lazy(
            None, lambda: ScopeMatcher(self._ids, self._tool_names())
        )
        # Recent queries and history turns recur turn after turn; embedding is most of a route.
        self._embed_text = lru_cache(maxsize=_QUERY_CACHE_SIZE)(self._embed_one)
        self._pinned = np.asarray(outline.pinned, dtype=np.uint32)
        self._renamed: Lazy[dict[str, int]] = Lazy(None, self._renamed_mentions)
        self._row_of_id: Lazy[tuple[dict[str, int], dict[str, int]]] = Lazy(None, self._rows_by_id)

    def _rows_by_id(self) -> tuple[dict[str, int], dict[str, int]]:
        """Each id to its row, and each id folded to lower case to its row where no other
        id folds the same."""
        folded: dict[str, list[int]] = {}
        for row, tool_id in enumerate(self._ids):
            folded.setdefault(tool_id.casefold(), []).append(row)
        exact = {tool_id: row for row, tool_id in enumerate(self._ids)}
        return exact, {key: rows[0] for key, rows in folded.items() if len(rows) == 1}

    def _tool_names(self) -> tuple[str, ...]:
        """Each row's tool name; from the outline, unless a manifest written before servers
        holding a ``/`` were recorded leaves ids that split two ways: then the catalog says."""
        ambiguous = any(tool_id.count("/") > 1 for tool_id in self._ids)
        if self._outline.slashed_servers is None and ambiguous:
            return tuple(tool.name for tool in self.catalog)
        return self._outline.names()

    def _renamed_mentions(self) -> dict[str, int]:
        """Folded exposed names that differ from their tool's name, to the tool's row."""
        renamed = self._outline.exposed
        if renamed is None:  # a manifest that predates them: ask the catalog
            renamed = renamed_rows(self.catalog)
        return {name.casefold(): row for row, name in renamed}

    @property
    def catalog(self) -> Catalog:
        """The tools this router serves (read from disk on first use after :meth:`open`)."""
        return self._catalog.get()

    def _checked_embedder(self, embedder: Embedder) -> Embedder:
        if embedder.model_id != self._index.model_id:
            raise IndexFormatError(
                f"{self._index.path}: embedded with {self._index.model_id!r}, "
                f"but the embedder is {embedder.model_id!r}; rebuild with 'toolgate index'"
            )
        return embedder

    def _embed_one(self, text: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
        """``text``'s vector, its clause vectors (see :mod:`toolgate.embedding.clauses`),
        read-only, and the clauses' texts.

        Clause vectors need the token states of :meth:`Embedder.embed_tokens`; an embedder
        without that method gets none, and routes on the whole-query vector alone.
        """
        embedder = self._embedder.get()
        if _wants_clauses(self.config) and hasattr(embedder, "embed_tokens"):
            tokens = embedder.embed_tokens(text)
            vector, (clauses, texts) = tokens.vector, clause_texts(tokens, text)
        else:
            vector = np.asarray(embedder.embed([text])[0], dtype=np.float32)
            clauses, texts = np.empty((0, len(vector)), dtype=np.float32), ()
        vector.setflags(write=False)
        clauses.setflags(write=False)
        return vector, clauses, texts

    @classmethod
    def from_tools(cls, tools: Sequence[Any] | Mapping[str, Any], **options: Any) -> Router:
        """A router over ``tools``: a list of tool dicts in any provider's shape (or
        :class:`Tool` objects), or a whole document such as an MCP ``tools/list`` result or
        ``{server: result}`` for several servers.

        ``lenient=True`` skips bad tools with a warning; other options are those of
        :meth:`from_catalog`.
        """
        lenient = bool(options.pop("lenient", False))
        if isinstance(tools, Mapping):
            catalog = Catalog.load(tools, lenient=lenient)
        else:
            catalog = Catalog.from_tools(tools, lenient=lenient)
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
        vectors = _embed_tools(embedder, embedding_views(catalog), _open_cache(cache))
        return cls._build(catalog, vectors, config, embedder, path, telemetry)

    @classmethod
    def _build(
        cls,
        catalog: Catalog,
        vectors: np.ndarray,
        config: RouterConfig,
        embedder: Embedder,
        path: str | os.PathLike[str] | None,
        telemetry: Telemetry | None,
    ) -> Router:
        """Index ``catalog`` with its tool ``vectors`` under ``path`` (or a temp dir)."""
        workdir = None
        if path is None:
            directory = workdir = Path(tempfile.mkdtemp(prefix="toolgate-"))
        else:
            directory = Path(path)
            directory.mkdir(parents=True, exist_ok=True)
        tools = catalog.tools
        vocabulary = FlagVocabulary.from_tools(tools)
        index = _toolgate.Index.build(
            directory / MATRIX,
            vectors,
            dtype=config.index_dtype,
            model_id=embedder.model_id,
            masks=vocabulary.masks(tools),
        )
        name, description, params, server = config.bm25_weights
        bm25 = _toolgate.Bm25.build(
            [bm25_document(t) for t in tools],
            k1=config.bm25_k1,
            b=config.bm25_b,
            field_weights={
                "name": name,
                "description": description,
                "params": params,
                "server": server,
            },
        )
        files = {MATRIX: fingerprint(directory / MATRIX), BM25: save_fingerprinted(bm25, directory)}
        router = cls(
            catalog=catalog,
            index=index,
            bm25=bm25,
            embedder=embedder,
            config=config,
            vocabulary=vocabulary,
            telemetry=telemetry,
            workdir=workdir,
        )
        router._write_manifest(directory, files)
        return router

    def refresh(self, catalog: Catalog, *, path: str | os.PathLike[str] | None = None) -> Router:
        """A router over ``catalog`` (a new version of this one's) that embeds only the tools
        added or changed since; unchanged tools keep their stored vectors.

        Use it when a file changes or an MCP server sends ``notifications/tools/list_changed``
        (see :meth:`replace_server`). ``path`` must differ from this router's directory, which
        stays valid until the old router is dropped.
        """
        if not isinstance(catalog, Catalog):
            raise InvalidInputError(
                f"refresh takes a Catalog (e.g. Catalog.load(...)), got {type(catalog).__name__}"
            )
        own = Path(self._index.path).parent
        if path is not None and Path(path).resolve() == own.resolve():
            # Other routers (workers that opened it) may be reading these files right now.
            raise InvalidInputError(
                f"refresh path {path} is this router's own directory; write the new router "
                "elsewhere (its files stay valid until this router is dropped)"
            )
        # Vectors embedded from another version of the tool text are not reused: the index
        # would mix two texts.
        current = self._outline.text_version == TEXT_VERSION
        old_rows = {tool.id: row for row, tool in enumerate(self.catalog)} if current else {}
        old_views = embedding_views(self.catalog)
        views = embedding_views(catalog)
        vectors = np.zeros((len(catalog), self._index.dim), dtype=np.float32)
        reused: list[tuple[int, int]] = []
        fresh: list[int] = []
        for row, tool in enumerate(catalog):
            old_row = old_rows.get(tool.id)
            if old_row is not None and old_views[old_row] == views[row]:
                reused.append((row, old_row))
            else:
                fresh.append(row)
        if reused:
            new_rows, rows = zip(*reused, strict=True)
            vectors[list(new_rows)] = self._index.vectors(list(rows))
        embedder = self._embedder.get()
        if fresh:
            vectors[fresh] = _embed_tools(embedder, [views[row] for row in fresh], None)
        return self._build(catalog, vectors, self.config, embedder, path, self.telemetry)

    def replace_server(self, server: str, tools: Any) -> Router:
        """:meth:`refresh` after one server's ``tools/list`` changed: ``tools`` is its new list
        in any format :meth:`Catalog.replace_server` accepts."""
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
        directory = Path(path)
        saved = read_manifest(directory)
        check_files(directory, saved)
        try:
            index = _toolgate.Index.open(directory / MATRIX, expected_dim=_EMBEDDING_DIM)
            bm25 = _toolgate.Bm25.load(directory / BM25)
        except OSError as exc:  # missing, or a directory in a file's place
            raise IndexFormatError(
                f"{exc.filename or directory}: cannot read: {exc.strerror}"
            ) from None
        if index.model_id != saved.model_id:
            raise IndexFormatError(
                f"{directory / MATRIX}: embedded with {index.model_id!r}, "
                f"but {MANIFEST} says {saved.model_id!r}"
            )
        config = saved.config
        return cls(
            catalog=lambda: load_saved_catalog(directory / CATALOG, saved.outline),
            outline=saved.outline,
            index=index,
            bm25=bm25,
            embedder=embedder or (lambda: default_embedder(config.precision)),
            config=config,
            vocabulary=FlagVocabulary(saved.flags),
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
        if _wants_clauses(config) != _wants_clauses(self.config):
            # The cached query embeddings were made with or without clauses as this config
            # says; the view must make its own.
            view._embed_text = lru_cache(maxsize=_QUERY_CACHE_SIZE)(view._embed_one)
        return view

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this router to the directory ``path`` (created if needed)."""
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        source = Path(self._index.path)
        copy_atomic(source, directory / MATRIX)
        # Fingerprints of what this save wrote, taken from its own bytes, not from the
        # directory, where a racing save may have put its files meanwhile.
        files = {MATRIX: fingerprint(source), BM25: save_fingerprinted(self._bm25, directory)}
        self._write_manifest(directory, files)

    def _write_manifest(self, directory: Path, files: dict[str, str]) -> None:
        saved = SavedRouter(
            self.config, self._outline, self._vocabulary.keys, str(self._index.model_id), files
        )
        write_catalog_and_manifest(directory, self.catalog, saved)

    @property
    def model_id(self) -> str:
        """The embedding model the index was built with."""
        return str(self._index.model_id)

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return f"Router({len(self)} tools, {self._index.dtype} index, {self.model_id})"

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
    ) -> RouteResult:
        """The tools to show the model in full this turn, best first.

        ``query`` is plain text or a ToolSearch form (``select:a,b``; ``+term`` requires
        ``term`` in the tool's id, server or name). Tools named verbatim in the query (by
        name, id or exposed name) and pinned tools are always included when eligible.
        ``state`` gates tools by their preconditions; ``allow`` / ``deny`` are patterns,
        without a ``/`` over names (``delete_*``), with one over ids (``github/*``; a deny
        pattern over names too: see :mod:`toolgate.routing.scopes`); ``threshold`` overrides the
        configured cosine floor (``None``: no floor); ``history`` holds earlier turns, most
        recent last, blended into the query with a decay. ``turn_id`` labels the telemetry
        event. ``forms=False`` reads the whole query as plain text, for text a person wrote
        (a gateway routing user messages).
        ``include`` lists tool ids or names to include when eligible, as if the query named
        them: the tools a ``tool_search`` call found last turn, which the search tool
        promises the model on its next turn (``include=found.ids``); entries naming no tool
        (gone after a refresh) are reported in the result's ``unknown``.
        ``top_k`` is a ceiling when selection is adaptive (``adaptive``, default the
        config's): how many ranked tools are shown then follows the evidence
        (:mod:`toolgate.routing.selection`); ``adaptive=False`` shows the top ``top_k``.
        """
        allow, deny = pattern_list(allow), pattern_list(deny)
        adaptive = self.config.adaptive if adaptive is None else adaptive
        result = self._route(
            query, state, history, top_k, threshold, allow, deny, forms, include, adaptive
        )
        if allow is not None or deny is not None:
            result = replace(result, allow=allow, deny=deny)
        if self.telemetry is not None:
            self.telemetry.route(result, turn_id=turn_id)
        return result

    def _route(
        self,
        query: str,
        state: State | Mapping[str, Iterable[str]] | None,
        history: Sequence[HistoryTurn] | None,
        top_k: int | None,
        threshold: float | DefaultType | None,
        allow: Iterable[str] | None,
        deny: Iterable[str] | None,
        forms: bool = True,
        include: Iterable[str] | None = None,
        adaptive: bool = False,
    ) -> RouteResult:
        start = time.perf_counter()
        if isinstance(query, str):  # parse_query names any other type
            query = well_formed(query)
        parsed = parse_query(query, forms=forms)
        k = self._checked_k(top_k)
        floor = self._checked_floor(threshold)
        flags = self._vocabulary.flags(State.coerce(state))
        allow_rows = self._scopes.get().rows(allow)
        deny_rows = self._scopes.get().rows(deny, deny=True)
        included, stale = self._included_rows(include)
        if parsed.select:
            result = self._route_select(
                parsed, query, flags, allow_rows, deny_rows, start, included
            )
            return _with_unknown(result, stale)
        if not parsed.text:
            raise InvalidInputError("query is empty")
        named = {*self._bm25.mentioned_names(query), *self._exposed_mentioned(query)}
        reasons = {row: "included" for row in included} | {row: "named" for row in named}
        forced = np.union1d(np.asarray(sorted(reasons), dtype=np.uint32), self._pinned).astype(
            np.uint32
        )
        scope = allow_rows
        if parsed.required_terms:
            # The terms filter what is ranked; named and pinned tools stay in.
            having = self._require_name_terms(parsed.required_terms, allow_rows)
            admitted = forced if allow_rows is None else np.intersect1d(forced, allow_rows)
            scope = np.union1d(having, admitted).astype(np.uint32)
        embed_start = time.perf_counter()
        vector, clauses = self._query_vectors(parsed.text, history)
        core_start = time.perf_counter()
        rank = partial(
            _toolgate.route, self._index, self._bm25,
            alpha=self.config.alpha, method=self.config.fusion, top=self.config.fusion_top,
            threshold=floor, flags=flags, allow=scope, deny=deny_rows, forced=forced,
            near_copy_cosine=self.config.near_copy_cosine,
        )  # fmt: skip
        outcome = rank(
            vector, parsed.text, k=k, clauses=clauses, clause_weight=self.config.clause_weight
        )
        if adaptive:
            # Each clause ranked as the query is: the same gate, scope, floor and forced rows.
            rank_clause = partial(rank, k=max(self.config.clause_tools, 1))
            texts = self._embed_text(parsed.text)[2]
            outcome, picked = adapt(
                outcome, clauses, texts, rank_clause, ceiling=k, config=self.config
            )
            reasons |= {row: "clause" for row in picked}
        if scope is not allow_rows:
            outcome = (*outcome[:3], self._out_of_scope(allow_rows, deny_rows), *outcome[4:])
        end = time.perf_counter()
        timings = {
            "parse": (embed_start - start) * 1e3,
            "embed": (core_start - embed_start) * 1e3,
            "core": (end - core_start) * 1e3,
        }
        result = self._result(query, parsed.form, outcome, timings, start, reasons=reasons)
        return _with_unknown(result, stale)

    def _checked_k(self, top_k: int | None) -> int:
        """``top_k``, or the configured one, checked and capped at the catalog's size."""
        k = self.config.top_k if top_k is None else top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"top_k must be a positive integer, got {top_k!r}")
        # Past the catalog's size a larger k changes nothing, and the core's k is 64-bit.
        return min(k, max(1, len(self._ids)))

    def _checked_floor(self, threshold: float | DefaultType | None) -> float | None:
        """The cosine floor: ``threshold``, or the configured one for ``DEFAULT``."""
        floor = self.config.threshold if threshold is DEFAULT else threshold
        if floor is None:
            return None
        if (
            isinstance(floor, bool)
            or not isinstance(floor, (int, float, np.floating))
            or not math.isfinite(floor)
        ):
            raise InvalidInputError(f"threshold must be a finite number or None, got {floor!r}")
        return float(floor)

    def catalog_stats(self, encoding: str = "cl100k_base") -> dict[str, Any]:
        """Size of the catalog and what sending all of it would cost, per provider."""
        return {
            "tools": len(self.catalog),
            "servers": len(self.catalog.servers),
            "pinned": sum(1 for tool in self.catalog if tool.pinned),
            "gated_tools": sum(1 for tool in self.catalog if _requires_anything(tool)),
            "flags": len(self._vocabulary.keys),
            "index_dtype": self._index.dtype,
            "model_id": self.model_id,
            "catalog_version": self.catalog.version,
            "full_schema_tokens": {
                provider: count_tools(self.catalog.to_provider(provider), provider, encoding)
                for provider in ("openai", "anthropic", "gemini", "mcp")
            },
        }

    def near_duplicates(self, threshold: float = DEFAULT_THRESHOLD) -> list[DuplicateGroup]:
        """Groups of tools whose rows have a cosine of at least ``threshold``: near copies
        to fold into one (see :mod:`toolgate.routing.near_duplicates`), largest group first."""
        vectors = self._index.vectors(range(len(self.catalog)))
        return near_duplicate_groups(vectors, self.catalog.ids, threshold)

    def signals(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The dense (cosine) and BM25 scores of every tool for ``text``, in catalog order."""
        cosine, _, sparse = self._scores(text)
        return cosine, sparse

    def _scores(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each tool's cosine, the dense signal that :meth:`route` fuses (the cosine with the
        clause bonus, see ``_toolgate.dense_signal``), and its BM25 score."""
        vector, clauses = self._query_vectors(text, None)
        cosine = self._index.scores(vector)
        weight = self.config.clause_weight
        dense = _toolgate.dense_signal(self._index, cosine, clauses, weight)
        return cosine, dense, self._bm25.scores(text)

    def _route_select(
        self,
        parsed: ParsedQuery,
        query: str,
        flags: np.ndarray,
        allow_rows: np.ndarray | None,
        deny_rows: np.ndarray | None,
        start: float,
        included: Sequence[int] = (),
    ) -> RouteResult:
        rows: list[int] = []
        unknown: list[str] = []
        for name in parsed.select:
            found = self._rows_named(name)
            if found:
                rows.extend(r for r in found if r not in rows)
            else:
                unknown.append(name)
        reasons = {row: "included" for row in included} | {row: "selected" for row in rows}
        rows += [row for row in included if row not in rows]
        forced = np.union1d(np.asarray(rows, dtype=np.uint32), self._pinned).astype(np.uint32)
        scope = forced if allow_rows is None else np.intersect1d(forced, allow_rows)
        core_start = time.perf_counter()
        # A zero vector and no text: selection needs no scoring, only the gate.
        outcome = _toolgate.route(
            self._index, self._bm25, np.zeros(self._index.dim, dtype=np.float32), "",
            alpha=self.config.alpha, method=self.config.fusion, top=self.config.fusion_top,
            k=1, threshold=None, flags=flags, allow=scope.astype(np.uint32), deny=deny_rows,
            forced=forced,
        )  # fmt: skip
        timings = {"core": (time.perf_counter() - core_start) * 1e3}
        routed, _, n_gated, _, gated, _ = outcome
        order = {row: i for i, row in enumerate(rows)}
        routed = sorted(routed, key=lambda item: order.get(item[0], len(order)))
        n_out = self._out_of_scope(allow_rows, deny_rows)
        result = self._result(
            query, parsed.form, (routed, [], n_gated, n_out, gated, []), timings, start,
            reasons=reasons,
        )  # fmt: skip
        excluded = self._excluded_by_scope(rows, allow_rows, deny_rows)
        return replace(result, unknown=tuple(unknown), gated_out=result.gated_out + excluded)

    def _excluded_by_scope(
        self, rows: Sequence[int], allow_rows: np.ndarray | None, deny_rows: np.ndarray | None
    ) -> tuple[GatedOut, ...]:
        """Selected rows that the caller's allow or deny list shuts out, with the reason."""
        out = []
        for row in rows:
            if allow_rows is not None and not _contains(allow_rows, row):
                out.append(GatedOut(self._ids[row], 0.0, (), "not in the allow list"))
            elif deny_rows is not None and _contains(deny_rows, row):
                out.append(GatedOut(self._ids[row], 0.0, (), "in the deny list"))
        return tuple(out)

    def _out_of_scope(self, allow_rows: np.ndarray | None, deny_rows: np.ndarray | None) -> int:
        """How many tools the caller's allow and deny lists shut out (not the query form)."""
        allowed = len(self._ids) if allow_rows is None else len(allow_rows)
        if deny_rows is None:
            return len(self._ids) - allowed
        if allow_rows is not None:
            deny_rows = np.intersect1d(allow_rows, deny_rows)
        return len(self._ids) - allowed + len(deny_rows)

    def _exposed_mentioned(self, query: str) -> list[int]:
        """Rows whose exposed name, where it differs from the tool name, the query mentions.

        The model sees exposed names (``web__search``) and repeats them; the core's name
        index knows the tool names, so these are looked up here, word by word.
        """
        renamed = self._renamed.get()
        if not renamed:
            return []
        rows = []
        for word in _MENTION_SPLIT.split(query.casefold()):
            for candidate in (word, _MENTION_EDGES.sub("", word)):
                if (row := renamed.get(candidate)) is not None:
                    rows.append(row)
        return rows

    def _rows_named(self, name: str) -> list[int]:
        """Rows of the tools ``name`` names: an id (any case), a name or an exposed name.

        An entry holding a ``/`` is an id and names its own tool only: a tool of another
        server whose name reads like it (``evil`` naming a tool ``github/search``) is never
        let in, not even when the id itself is gone after a refresh. (Exposed names, what the
        model sees, hold no ``/``; a tool whose name does is named by its id.)
        """
        if "/" in name:
            exact, folded = self._row_of_id.get()
            row = exact.get(name)
            if row is None:
                row = folded.get(name.casefold())
            return [] if row is None else [row]
        rows = list(self._bm25.rows_named(name))
        if not rows and (row := self._renamed.get().get(name.casefold())) is not None:
            rows = [row]
        return rows

    def _included_rows(self, include: Iterable[str] | None) -> tuple[list[int], list[str]]:
        """The rows ``include`` names, and its entries that name no tool.

        Those are reported in the result's ``unknown``, as unknown ``select:`` names are: ids
        a search found last turn may be gone after a refresh, and that must not fail a turn.
        """
        if include is None:
            return [], []
        if isinstance(include, str):
            raise InvalidInputError(f"include must be a list of tool ids or names, not {include!r}")
        rows: list[int] = []
        unknown: list[str] = []
        for entry in include:
            if not isinstance(entry, str) or not entry:
                raise InvalidInputError(f"include entries must be tool ids or names, got {entry!r}")
            found = self._rows_named(entry)
            if not found:
                unknown.append(entry)
            rows.extend(found)
        return sorted(set(rows)), unknown

    def _require_name_terms(
        self, terms: Sequence[str], allow_rows: np.ndarray | None
    ) -> np.ndarray:
        rows: np.ndarray | None = allow_rows
        for term in terms:
            having = np.asarray(self._bm25.name_has_term(term), dtype=np.uint32)
            rows = having if rows is None else np.intersect1d(rows, having)
        assert rows is not None  # terms is never empty here
        return rows.astype(np.uint32)

    def _query_vectors(
        self, text: str, history: Sequence[HistoryTurn] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The query vector, blended with ``history``, and the clause vectors of ``text``."""
        vector, clauses, _ = self._embed_text(text)
        texts = history_texts(history, self.config.history_turns)
        if texts:
            vector = blend_history(vector, texts, self._embed_texts, self.config.history_decay)
        return np.ascontiguousarray(vector, dtype=np.float32), clauses

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._embed_text(text)[0] for text in texts])

    def _result(
        self,
        query: str,
        form: str,
        outcome: tuple[Any, ...],
        timings: dict[str, float],
        start: float,
        *,
        reasons: Mapping[int, str],
    ) -> RouteResult:
        """The result of a route; ``reasons`` says why each forced row is in (else pinned)."""
        forced, ranked, n_gated, n_out_of_scope, gated, copies = outcome
        ids = self._ids
        tools = [
            RoutedTool(ids[row], fused, dense, bm25, reasons.get(row, "pinned"))
            for row, fused, dense, bm25 in forced
        ]
        copy_of = {row: ids[of] for row, of in copies}
        tools += [
            RoutedTool(ids[row], f, d, b, reasons.get(row, "ranked"), copy_of.get(row))
            for row, f, d, b in ranked
        ]
        gated_out = tuple(
            GatedOut(
                ids[row],
                fused,
                tuple(missing_keys := self._vocabulary.describe(missing)),
                "requires " + ", ".join(missing_keys),
            )
            for (row, fused, _dense, _bm25), missing in gated
        )
        timings["total"] = (time.perf_counter() - start) * 1e3
        return RouteResult(
            query=query,
            form=form,
            tools=tuple(tools),
            gated_out=gated_out,
            n_gated=n_gated,
            n_out_of_scope=n_out_of_scope,
            timings_ms={key: round(value, 4) for key, value in timings.items()},
            catalog_version=self._outline.version,
        )

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
        self._check_current(result)
        promotion = promote_tools(
            self.catalog,
            result,
            format=format,
            budget=budget,
            schema_source=schema_source,
            cache=self._schema_cache,
            pool=pool,
        )
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
            self._check_current(result)
        verdict = verify_call(self.catalog, result, tool_call)
        if self.telemetry is not None:
            elapsed = (time.perf_counter() - start) * 1e3
            self.telemetry.verify(verdict, turn_id=turn_id, latency_ms=elapsed)
        return verdict

    def _check_current(self, result: Any) -> None:
        if not isinstance(result, RouteResult):
            raise InvalidInputError(
                f"expected the RouteResult of this router's route(), got {type(result).__name__}"
            )
        if result.catalog_version and result.catalog_version != self._outline.version:
            raise InvalidInputError(
                f"the route result is for catalog version {result.catalog_version}, "
                f"this router serves {self._outline.version}"
            )


def _wants_clauses(config: RouterConfig) -> bool:
    """Whether routing under ``config`` reads a query's clauses (to rank or to select)."""
    return config.clause_weight > 0 or config.clause_tools > 0


def _contains(sorted_rows: np.ndarray, row: int) -> bool:
    at = int(np.searchsorted(sorted_rows, row))
    return at < len(sorted_rows) and int(sorted_rows[at]) == row


def _with_unknown(result: RouteResult, unknown: Sequence[str]) -> RouteResult:
    """``result`` also reporting ``unknown`` names (of ``include``) in its ``unknown``."""
    if not unknown:
        return result
    return replace(result, unknown=tuple(dict.fromkeys((*result.unknown, *unknown))))


def _requires_anything(tool: Tool) -> bool:
    return bool(tool.requires_scopes or tool.requires_tools or tool.requires_milestones)


def _open_cache(
    cache: EmbeddingCache | str | os.PathLike[str] | bool | None,
) -> EmbeddingCache | None:
    from toolgate.embedding.embedder import resolve_cache

    return resolve_cache(cache if not isinstance(cache, os.PathLike) else Path(cache), None)


def _embed_tools(
    embedder: Embedder, views: list[tuple[str, ...]], cache: EmbeddingCache | None
) -> np.ndarray:
    """Each tool's row: the normalised sum of its views' embeddings.

    Texts found in ``cache`` are not embedded again, so re-indexing a catalog embeds only
    what changed.
    """
    texts = [text for tool_views in views for text in tool_views]
    if cache is None:
        vectors = embedder.embed(texts) if texts else np.zeros((0, embedder.dim), np.float32)
    else:
        vectors = cache.embed_through(embedder.model_id, texts, embedder.embed)
    owners = np.repeat(np.arange(len(views)), [len(v) for v in views])
    rows = np.zeros((len(views), embedder.dim), dtype=np.float32)
    np.add.at(rows, owners, vectors)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    normalised: np.ndarray = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return normalised

"""Building a router's index files: tool rows embedded, the matrix and BM25 index written.

:mod:`toolgate.routing.store` holds the directory's format (manifest, fingerprints, atomic
writes); this module reads the tools a router is asked to serve into a catalog, fills a
directory from it, reuses the vectors of unchanged tools when a catalog changes, and opens
the files of a saved router, as :class:`RouterParts`.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from toolgate import _toolgate
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import TEXT_VERSION, bm25_documents, embedding_views
from toolgate.embedding.embedder import Embedder, resolve_cache
from toolgate.embedding.model_files import toolgate_home
from toolgate.embedding.normalise import normalised
from toolgate.errors import IndexFormatError, IndexIncompatibleError, InvalidInputError
from toolgate.forks import fork_safe_lock
from toolgate.routing.atomic_files import Staging, naming, staging
from toolgate.routing.centring import centred, centring_offset, offset_numbers, uncentred
from toolgate.routing.config import RouterConfig
from toolgate.routing.no_tool import NullScores, null_requests, null_vectors
from toolgate.routing.outline import TokenKey, reusable_tokens
from toolgate.routing.state import FlagVocabulary
from toolgate.routing.store import (
    BM25,
    CATALOG,
    MANIFEST,
    MATRIX,
    CatalogOutline,
    SavedRouter,
    check_files,
    check_save_directory,
    fingerprint,
    load_saved_catalog,
    prepare_router_directory,
    read_manifest,
    renamed_rows,
    save_fingerprinted,
    write_catalog_and_manifest,
)
from toolgate.temporary_folders import new_temporary_folder

if TYPE_CHECKING:
    from toolgate.embedding.cache import EmbeddingCache

__all__ = [
    "RouterParts",
    "ToolsSource",
    "build_parts",
    "catalog_of",
    "check_refresh_path",
    "default_embedder",
    "embed_tools",
    "index_catalog",
    "open_cache",
    "open_parts",
    "refreshed_vectors",
]

_EMBEDDING_DIM = 384

#: What ``Router.from_tools`` and ``Router.refresh`` take: a :class:`Catalog`, a list of
#: tools, a whole document, a catalog file or its text.
ToolsSource = Catalog | Sequence[Any] | Mapping[str, Any] | str | os.PathLike[str]


def catalog_of(tools: ToolsSource, *, server: str | None, lenient: bool) -> Catalog:
    """``tools`` as a :class:`Catalog`: itself if it is one, else read with ``server`` and
    ``lenient`` (a document or a file by :meth:`Catalog.load`, a list by
    :meth:`Catalog.from_tools`), so that every way in names servers by one rule."""
    if isinstance(tools, Catalog):
        if server is not None or lenient:
            raise InvalidInputError(
                "server= and lenient= apply to tools being read, not to a Catalog, which is "
                "read already (pass them to Catalog.load)"
            )
        return tools
    if isinstance(tools, (str, os.PathLike, Mapping)):
        return Catalog.load(tools, server=server, lenient=lenient)
    listed: Sequence[Any] = tools
    return Catalog.from_tools(listed, server=server, lenient=lenient)


def default_embedder(
    precision: Literal["fp32", "int8"], *, progress: bool | None = None
) -> Embedder:
    """The bundled model at ``precision`` (``progress`` as
    :class:`~toolgate.embedding.embedder.Embedder`), one per process while anything holds it.

    Every router, filter and middleware given no embedder comes here: an app that builds an
    agent per request would otherwise load (and keep, until the garbage collector finds the
    agent) a model per request. An embedder is safe to share between threads.
    """
    home = toolgate_home()
    with _SHARED_LOCK:
        embedder = _SHARED_EMBEDDERS.get((precision, progress, home))
        if embedder is None:
            embedder = _shared_model(precision, home, progress)
            _SHARED_EMBEDDERS[precision, progress, home] = embedder
    return embedder


def _shared_model(
    precision: Literal["fp32", "int8"], home: Path, progress: bool | None
) -> Embedder:
    """The model at ``precision`` under ``progress``: a shallow copy, sharing its session,
    of one loaded under another setting (a router's bar and a filter's none loaded the
    same weights twice, 78 MB), else a new load. The caller holds ``_SHARED_LOCK``."""
    for (loaded, _, loaded_home), embedder in list(_SHARED_EMBEDDERS.items()):
        if (loaded, loaded_home) == (precision, home):
            twin = copy.copy(embedder)
            twin.progress = progress
            return twin
    return Embedder(precision=precision, progress=progress)


# Weak: the model's memory goes with the last router that uses it. The lock makes threads
# that ask at once share one load; a fork-safe one, as a forked child may ask too.
_SHARED_EMBEDDERS: weakref.WeakValueDictionary[tuple[str, bool | None, Path], Embedder] = (
    weakref.WeakValueDictionary()
)
_SHARED_LOCK = fork_safe_lock()


def open_cache(
    cache: EmbeddingCache | str | os.PathLike[str] | bool | None,
) -> EmbeddingCache | None:
    """The embedding cache ``Router.from_catalog``'s ``cache`` argument names."""
    return resolve_cache(cache if not isinstance(cache, os.PathLike) else Path(cache), None)


def embed_tools(
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
    return normalised(rows)


def refreshed_vectors(
    index: _toolgate.Index,
    old: Catalog,
    outline: CatalogOutline,
    catalog: Catalog,
    embedder: Embedder,
    offset: np.ndarray | None,
) -> np.ndarray:
    """The model's rows for ``catalog``, a new version of ``old`` (indexed in ``index``, its
    rows centred on ``offset``): a tool whose text is unchanged has its stored row read back
    (:func:`~toolgate.routing.centring.uncentred`), the others are embedded."""
    # Vectors embedded from another version of the tool text are not reused: the index
    # would mix two texts.
    current = outline.text_version == TEXT_VERSION
    old_rows = {tool.id: row for row, tool in enumerate(old)} if current else {}
    old_views = embedding_views(old)
    views = embedding_views(catalog)
    vectors = np.zeros((len(catalog), index.dim), dtype=np.float32)
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
        vectors[list(new_rows)] = uncentred(index.vectors(list(rows)), offset)
    if fresh:
        vectors[fresh] = embed_tools(embedder, [views[row] for row in fresh], None)
    return vectors


@dataclass(frozen=True)
class RouterParts:
    """A router's index files, open, and what they were built from: the matrix (``index``),
    the BM25 index (which knows the exposed names), the flag vocabulary of the precondition
    masks, the catalog's ``outline`` and the ``config``. ``workdir`` is set when the files sit
    in a temporary directory that the router owns and removes. ``offset`` is what was taken
    from each row (:mod:`toolgate.routing.centring`; ``None``: nothing)."""

    index: _toolgate.Index
    bm25: _toolgate.Bm25
    vocabulary: FlagVocabulary
    outline: CatalogOutline
    config: RouterConfig
    workdir: Path | None = None
    null: NullScores | None = None
    # An array has no truth value to compare by: parts are equal by their files and settings.
    offset: np.ndarray | None = field(default=None, compare=False)
    #: The fingerprint of the matrix file ``index`` maps (``None``: not known): a rebuild
    #: renames another file over that path, which this mapping never sees.
    matrix_fingerprint: str | None = field(default=None, compare=False)

    def save(self, catalog: Catalog, path: str | os.PathLike[str]) -> None:
        """Write these files and ``catalog`` (the full one, which they index) to the directory
        ``path``, created if needed; a save that fails before every file is written leaves
        the router saved there before as it was."""
        directory = prepare_router_directory(path)
        source = Path(self.index.path)
        with staging() as stage:
            copied = stage.copy(source, directory / MATRIX)
            # Fingerprints of what this save wrote, taken from its own bytes, not from the
            # directory, where a racing save may have put its files meanwhile.
            files = {
                MATRIX: self._own_matrix(copied or source),
                BM25: save_fingerprinted(self.bm25, directory, stage),
            }
            self._write_manifest(directory, catalog, files, stage)
            stage.commit()

    def _own_matrix(self, path: Path) -> str:
        """The fingerprint of ``path``, a copy of this index's file or the file itself,
        checked to be the file this index maps: a router saved with another's rows beside
        its tool ids reopened and routed by the wrong vectors."""
        found = fingerprint(path)
        if self.matrix_fingerprint is not None and found != self.matrix_fingerprint:
            raise IndexFormatError(
                f"{self.index.path} was replaced since this router opened it (a rebuild or "
                "another save there?): its rows are no longer on disk to save; open the "
                "router again, or build it anew"
            )
        return found

    def refreshed(
        self,
        old: Catalog,
        catalog: Catalog,
        embedder: Embedder,
        path: str | os.PathLike[str] | None,
    ) -> RouterParts:
        """These files rebuilt for ``catalog``, a new version of ``old`` (the catalog they
        index): only tools added or changed are embedded, and unchanged tools keep their
        embeddings and schema token counts; every row is centred on the new catalog's mean,
        as a build of it would be. ``path`` may not be this index's own directory."""
        check_refresh_path(self.index, path)
        if embedder.model_id != self.index.model_id:
            # Kept rows are the old model's: new ones from another would share no space.
            raise IndexIncompatibleError(
                f"{self.index.path}: embedded with {self.index.model_id!r}, but the refresh's "
                f"embedder is {embedder.model_id!r}; build the new catalog anew instead"
            )
        raw = refreshed_vectors(self.index, old, self.outline, catalog, embedder, self.offset)
        offset = centring_offset(raw, self.config.row_centring)
        tokens = reusable_tokens(old, self.outline)
        vectors = centred(raw, offset)
        return build_parts(
            catalog, vectors, self.config, embedder.model_id, path, embedder.embed, tokens, offset
        )

    def recentred(
        self, catalog: Catalog, share: float, embed: Callable[[list[str]], np.ndarray]
    ) -> RouterParts:
        """These files rebuilt for the same ``catalog`` (the one they index) with its rows
        centred by ``share`` instead, in a temporary directory: the tools' embeddings are read
        back from the stored rows (:func:`~toolgate.routing.centring.uncentred`), so only
        ``embed`` runs, for the null scores (memoised per model)."""
        config = dataclasses.replace(self.config, row_centring=share)  # checks the share
        raw = uncentred(self.index.vectors(range(len(catalog))), self.offset)
        offset = centring_offset(raw, share)
        tokens = reusable_tokens(catalog, self.outline)
        model_id = str(self.index.model_id)
        vectors = centred(raw, offset)
        return build_parts(catalog, vectors, config, model_id, None, embed, tokens, offset)

    def with_config(self, config: RouterConfig) -> RouterParts:
        """These files under ``config``, which may change ranking and selection but none of
        the settings the files were built with."""
        built = ("bm25_k1", "bm25_b", "bm25_weights", "index_dtype", "precision", "row_centring")
        if changed := [
            name for name in built if getattr(config, name) != getattr(self.config, name)
        ]:
            raise InvalidInputError(
                f"{', '.join(changed)} set how the index was built: build a new router for them"
            )
        return dataclasses.replace(self, config=config)

    def _write_manifest(
        self,
        directory: Path,
        catalog: Catalog,
        files: dict[str, str],
        stage: Staging,
        *,
        built: bool = False,
    ) -> None:
        """Stage ``catalog`` and the manifest; ``built``: the outline was just made from
        ``catalog``, so its flagged rows are taken as they are, not found again."""
        model_id = str(self.index.model_id)
        offset = None if self.offset is None else offset_numbers(self.offset)
        saved = SavedRouter(
            self.config, self.outline, self.vocabulary.keys, model_id, files, self.null, offset
        )
        addressing = self.outline.addressing if built else None
        write_catalog_and_manifest(directory, catalog, saved, stage, addressing=addressing)


def index_catalog(
    catalog: Catalog,
    *,
    config: RouterConfig,
    embedder: Embedder,
    path: str | os.PathLike[str] | None,
    cache: EmbeddingCache | str | os.PathLike[str] | bool | None,
) -> RouterParts:
    """Embed ``catalog`` (through the embedding ``cache``, see :func:`open_cache`), centre its
    rows (:mod:`toolgate.routing.centring`) and build its index files under ``path``, or a
    temporary directory."""
    if path is not None:
        check_save_directory(path)  # before embedding, the slow part
    store = open_cache(cache)
    vectors = embed_tools(embedder, embedding_views(catalog), store)
    offset = centring_offset(vectors, config.row_centring)
    # The null requests go through the cache too: a new process (a CLI's route --tools, a
    # serverless cold start) ran the model over all 107 of them, about 1 s, on every start.
    embed = (
        embedder.embed
        if store is None
        else partial(store.embed_through, embedder.model_id, embed=embedder.embed)
    )
    return build_parts(
        catalog, centred(vectors, offset), config, embedder.model_id, path, embed, offset=offset
    )


def build_parts(
    catalog: Catalog,
    vectors: np.ndarray,
    config: RouterConfig,
    model_id: str,
    path: str | os.PathLike[str] | None,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    tokens: Mapping[TokenKey, int] | None = None,
    offset: np.ndarray | None = None,
) -> RouterParts:
    """Index ``catalog`` with its tool ``vectors`` under ``path`` (or a new temporary
    directory, removed again if indexing fails), manifest and catalog file included;
    ``embed`` (the model's) measures the catalog's null scores
    (:mod:`toolgate.routing.no_tool`); ``tokens`` are schema token counts to reuse
    (:func:`~toolgate.routing.outline.reusable_tokens`); ``offset`` is what was taken from
    each of ``vectors`` (:mod:`toolgate.routing.centring`), saved for a refresh."""
    workdir = None
    if path is None:
        directory = workdir = new_temporary_folder("toolgate-")
    else:
        directory = prepare_router_directory(path)
    try:
        outline = CatalogOutline.of(catalog, reuse=tokens)
        return _build_parts(
            catalog, vectors, config, model_id, directory, workdir, embed, outline, offset
        )
    except BaseException:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        raise


def _build_parts(
    catalog: Catalog,
    vectors: np.ndarray,
    config: RouterConfig,
    model_id: str,
    directory: Path,
    workdir: Path | None,
    embed: Callable[[list[str]], np.ndarray] | None,
    outline: CatalogOutline,
    offset: np.ndarray | None,
) -> RouterParts:
    tools = catalog.tools
    vocabulary = FlagVocabulary.from_tools(tools)
    matrix = directory / MATRIX
    # Every file is staged before any replaces a router saved there before (see save).
    with staging() as stage:
        tmp = stage.path(matrix)
        with naming(matrix, tmp):
            built = _toolgate.Index.build(
                tmp,
                vectors,
                dtype=config.index_dtype,
                model_id=model_id,
                masks=vocabulary.masks(tools),
            )
        name, description, params, server = config.bm25_weights
        bm25 = _toolgate.Bm25.build(
            bm25_documents(catalog),
            k1=config.bm25_k1,
            b=config.bm25_b,
            field_weights={"name": name, "description": description, "params": params,
                           "server": server},
            exposed_names=renamed_rows(catalog),
        )  # fmt: skip
        files = {
            MATRIX: fingerprint(tmp),
            BM25: save_fingerprinted(bm25, directory, stage),
        }
        null = None
        if embed is not None:
            null = NullScores.measure(built, bm25, null_vectors(model_id, embed), null_requests())
        parts = RouterParts(built, bm25, vocabulary, outline, config, workdir, null, offset)
        parts._write_manifest(directory, catalog, files, stage, built=True)
        stage.commit()
    index = _opened_at(matrix, files[MATRIX])
    return dataclasses.replace(parts, index=index, matrix_fingerprint=files[MATRIX])


def _opened_at(path: Path, expected: str) -> _toolgate.Index:
    """The index just built and renamed to ``path``, opened there (the one built knows its
    temporary name only), and checked to be the file built."""
    index = _toolgate.Index.open(path, verify=False)
    if fingerprint(path) != expected:
        raise IndexFormatError(
            f"{path} was replaced as it was saved (a concurrent save?); save the router again"
        )
    return index


def open_parts(directory: Path) -> RouterParts:
    """The files of the router saved in ``directory``, checked to belong together."""
    saved = read_manifest(directory)
    check_files(directory, saved)
    exposed = saved.outline.exposed
    if exposed is None or not saved.sealed:
        # Routing reads the manifest alone: one without a checksum is checked against its
        # catalog now (its ids and version), and one that predates exposed names asks it.
        catalog = load_saved_catalog(directory / CATALOG, saved.outline)
        exposed = renamed_rows(catalog) if exposed is None else exposed
    try:
        index = _toolgate.Index.open(directory / MATRIX, expected_dim=_EMBEDDING_DIM)
        bm25 = _toolgate.Bm25.load(directory / BM25, exposed_names=exposed)
    except OSError as exc:  # missing, or a directory in a file's place
        raise IndexFormatError(
            f"{exc.filename or directory}: cannot read: {exc.strerror}"
        ) from None
    if index.model_id != saved.model_id:
        raise IndexFormatError(
            f"{directory / MATRIX}: embedded with {index.model_id!r}, "
            f"but {MANIFEST} says {saved.model_id!r}"
        )
    vocabulary = FlagVocabulary(saved.flags)
    offset = None
    if saved.offset is not None:
        if len(saved.offset) != index.dim:
            raise IndexFormatError(
                f"{directory / MANIFEST}: row_offset has {len(saved.offset)} values for rows "
                f"of {index.dim}"
            )
        offset = np.asarray(saved.offset, dtype=np.float32)
        # A share of a mean of unit rows is shorter than 1; a longer one has no rows it
        # could have come from (see centring.uncentred).
        if not float(np.linalg.norm(offset)) < 1.0:
            raise IndexFormatError(
                f"{directory / MANIFEST}: row_offset has length "
                f"{float(np.linalg.norm(offset)):.3g}, not under 1 as centring writes it"
            )
    return RouterParts(
        index,
        bm25,
        vocabulary,
        saved.outline,
        saved.config,
        null=saved.null,
        offset=offset,
        matrix_fingerprint=saved.files.get(MATRIX),
    )


def check_refresh_path(index: _toolgate.Index, path: str | os.PathLike[str] | None) -> None:
    """Refuse to write a refreshed router over ``index``'s own directory: other routers
    (workers that opened it) may be reading those files right now."""
    own = Path(index.path).parent
    if path is not None and (Path(path).resolve() == own.resolve() or _same_folder(path, own)):
        raise InvalidInputError(
            f"refresh path {path} is this router's own directory; write the new router "
            "elsewhere (its files stay valid until this router is dropped)"
        )


def _same_folder(path: str | os.PathLike[str], own: Path) -> bool:
    """Whether ``path`` is the folder ``own`` by another name than ``resolve()`` maps to it:
    a case variant on a case-insensitive file system (APFS, NTFS), a bind mount."""
    try:
        return os.path.samefile(path, own)
    except (OSError, ValueError):  # one is missing (a new folder): not the same
        return False

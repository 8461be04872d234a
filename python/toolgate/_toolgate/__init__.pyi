"""Type stubs for the compiled core, ``toolgate._toolgate``. Hand-written: keep in step with
``rust/py/``; ``python -m mypy.stubtest toolgate._toolgate`` checks that they agree (for the
private submodule ``_testing`` too, which only the development build has: its stub
``_testing.pyi`` is left out of wheels)."""

from collections.abc import Callable, Iterable, Iterator, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, Literal, final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "INDEX_FORMATS",
    "Bm25",
    "GatedCandidate",
    "GatedRow",
    "Index",
    "IndexFormatError",
    "InvalidInputError",
    "LearnedRows",
    "RouteOutcome",
    "RoutedRow",
    "SchemaCache",
    "SearchResult",
    "StorageError",
    "ToolgateError",
    "__version__",
    "dense_signal",
    "fuse",
    "route",
    "route_select",
]
__version__: str
# The index files' formats (matrix and BM25 versions), e.g. "matrix 1 bm25 6".
INDEX_FORMATS: str

class ToolgateError(Exception):
    """Base class of every toolgate error."""

class IndexFormatError(ToolgateError):
    """An index file is not a well-formed toolgate index: wrong magic or version, truncated,
    corrupted."""

class InvalidInputError(ToolgateError, ValueError):
    """An argument has a value toolgate cannot use: both a ToolgateError and a ValueError."""

class StorageError(ToolgateError, OSError):
    """A file cannot be read or written (missing, a directory, no permission, disk full...):
    both a ToolgateError and an OSError with errno and filename."""

_Path = str | PathLike[str]
_Dtype = Literal["f32", "int8", "bf16"]

@final
class Index:
    """A memory-mapped embedding index: cosine top-k with precondition gating.

    The file holds the rows L2-normalised (as f32, plus an int8 or bf16 copy for those
    storage types), a model id, one uint64 id per row and per-row required-flag masks. It is
    written atomically and mapped read-only, so many processes share one copy of its pages.
    The searches (:meth:`search`, :meth:`search_gated`, :meth:`search_batch`) scan the compact
    copy of an int8 or bf16 index, then re-score the candidates exactly in f32: their results
    equal an f32 index's, bit for bit. :meth:`scores`, and :func:`route`, which ranks on it,
    give the compact copy's cosines as they are.

    One index may be searched from any number of threads at once; the GIL is released while
    it scans.

    >>> import numpy as np, toolgate
    >>> index = toolgate.Index.build("/tmp/doc.tgi", np.eye(3, dtype=np.float32))
    >>> rows, scores = index.search(np.array([0, 1, 0], np.float32), k=2)
    >>> rows.tolist(), scores.tolist()
    ([1, 0], [1.0, 0.0])
    """

    @staticmethod
    def build(
        path: _Path,
        vectors: NDArray[np.float32],
        *,
        dtype: _Dtype = "f32",
        model_id: str = "",
        masks: NDArray[np.uint64] | Sequence[Iterable[int]] | None = None,
        ids: NDArray[np.uint64] | Sequence[int] | None = None,
    ) -> Index:
        """Writes an index of ``vectors`` ((N, d) float32; rows are L2-normalised, a zero row
        stays zero) to ``path`` atomically, and opens it.

        ``masks`` gives each row's required flags, either as an (N, W) uint64 array (flag ``f``
        is bit ``f % 64`` of word ``f // 64``) or as one iterable of flag numbers per row.
        ``ids`` stores one uint64 per row (default ``0..N``). Raises ``InvalidInputError`` for
        bad input (non-finite values, wrong shapes) and ``StorageError`` (an ``OSError``) when
        the file cannot be written; an existing file at ``path`` is only replaced once the new
        one is complete.
        """

    @staticmethod
    def open(
        path: _Path,
        *,
        verify: bool = True,
        expected_dim: int | None = None,
        threads: int = 1,
    ) -> Index:
        """Maps the index at ``path`` read-only.

        The header, sizes and offsets are always checked. ``verify`` also checks the payload
        CRC-32, which reads the whole file once; pass
        ``False`` to open large indexes lazily and call :meth:`verify` later. ``expected_dim``
        rejects an index of another dimension. ``threads > 1`` splits every scan over that many
        row ranges.
        Raises ``IndexFormatError`` for a damaged or foreign file.
        """

    def search(
        self,
        query: NDArray[np.float32],
        k: int | None = 10,
        *,
        threshold: float | None = None,
        flags: Iterable[int] | None = None,
        allow: Iterable[int] | None = None,
        deny: Iterable[int] | None = None,
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """The best ``k`` eligible rows for ``query`` as ``(rows, scores)``, best first
        (score descending, then row ascending). ``k=None`` returns every row passing
        ``threshold``; ``k`` larger than the index returns them all.

        Scores are cosine similarities (the query is normalised too). A row is eligible when
        every flag its mask requires is in ``flags`` (``None`` satisfies no flag), it is in
        ``allow`` (when given) and not in ``deny``. Raises ``InvalidInputError`` for a query
        of the wrong shape or dtype or holding NaN or infinity, ``k < 1``, or an unknown row.
        """

    def search_gated(
        self,
        query: NDArray[np.float32],
        k: int | None = 10,
        *,
        threshold: float | None = None,
        flags: Iterable[int] | None = None,
        allow: Iterable[int] | None = None,
        deny: Iterable[int] | None = None,
    ) -> SearchResult:
        """Like :meth:`search`, also reporting how many rows the gate kept out and the best
        few of them with their missing flags."""

    def search_batch(
        self,
        queries: NDArray[np.float32],
        k: int | None = 10,
        *,
        threshold: float | None = None,
        flags: Iterable[int] | None = None,
        allow: Iterable[int] | None = None,
        deny: Iterable[int] | None = None,
    ) -> list[tuple[NDArray[np.int64], NDArray[np.float32]]]:
        """:meth:`search` for each row of ``queries`` ((M, d) float32), reading the matrix
        from memory once for the whole batch."""

    def scores(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """Cosine of ``query`` against every row, at the storage precision: exact f32 for
        ``"f32"`` indexes, within the quantisation error for ``"int8"`` / ``"bf16"`` (use
        :meth:`rescore` on the rows you keep). :func:`route` ranks on these."""

    def vectors(self, rows: Iterable[int]) -> NDArray[np.float32]:
        """The stored (normalised) f32 vectors of ``rows``, as a (len(rows), d) copy."""

    def rescore(self, query: NDArray[np.float32], rows: Iterable[int]) -> NDArray[np.float32]:
        """Exact f32 cosine of ``query`` against ``rows``, in the order given."""

    def verify(self) -> None:
        """Reads the whole file and checks its payload checksum; raises ``IndexFormatError``
        if it is corrupted."""

    def required_flags(self, row: int) -> list[int]:
        """The flags ``row`` requires, ascending."""

    def __len__(self) -> int: ...
    @property
    def dim(self) -> int:
        """Vector dimension."""

    @property
    def dtype(self) -> _Dtype:
        """Storage type of the scanned matrix."""

    @property
    def model_id(self) -> str:
        """The model id stored at build time."""

    @property
    def path(self) -> Path:
        """The path the index was opened from."""

    @property
    def mask_words(self) -> int:
        """Words per gating mask (64 flags each); 0 when the index has no masks."""

    @property
    def threads(self) -> int:
        """Number of row ranges each scan is split into."""

    @property
    def ids(self) -> NDArray[np.uint64]:
        """The row ids stored at build time (a copy)."""

@final
class SearchResult:
    """What :meth:`Index.search_gated` found, and what the gate kept out.

    Iterating yields ``(row, score)`` pairs, best first.
    """

    @property
    def rows(self) -> NDArray[np.int64]:
        """Rows of the hits, best first."""

    @property
    def scores(self) -> NDArray[np.float32]:
        """Exact scores of the hits, best first."""

    @property
    def n_gated(self) -> int:
        """Rows in scope but kept out by missing flags."""

    @property
    def n_out_of_scope(self) -> int:
        """Rows outside ``allow`` or inside ``deny``."""

    @property
    def gated(self) -> list[GatedCandidate]:
        """The best (up to 5) rows kept out by missing flags that meet the threshold."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[tuple[int, float]]: ...
    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for logs and JSON."""

@final
class GatedCandidate:
    """A row the gate kept out, and the flags that would have let it through."""

    @property
    def row(self) -> int:
        """Row number."""

    @property
    def score(self) -> float:
        """Exact score."""

    @property
    def missing_flags(self) -> list[int]:
        """Required flags the caller did not satisfy, ascending."""

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for logs and JSON."""

@final
class Bm25:
    """A BM25 index over tool documents (name, description, parameter text, server).

    Build with ``Bm25.build(docs)``; row ``i`` of every result is ``docs[i]``.
    """

    @staticmethod
    def build(
        docs: Sequence[dict[str, str] | tuple[str, ...]],
        *,
        k1: float = 1.2,
        b: float = 0.75,
        field_weights: dict[str, float] | None = None,
        exposed_names: Iterable[tuple[int, str]] | None = None,
    ) -> Bm25:
        """Indexes ``docs``: dicts (``name`` required; ``description``, ``param_text``,
        ``server`` optional) or tuples ``(name, description, param_text, server)``.

        ``exposed_names`` are ``(row, name)`` pairs: the names the model sees where the
        catalog renamed a tool, which :meth:`rows_named` and :meth:`mentioned_names` then know
        too. They are the catalog's, not saved with the index: pass them to :meth:`load`."""

    @staticmethod
    def load(path: _Path, *, exposed_names: Iterable[tuple[int, str]] | None = None) -> Bm25:
        """Reads an index written by :meth:`save`, with ``exposed_names`` as for
        :meth:`build`."""

    def save(self, path: _Path) -> None:
        """Writes the index to ``path`` atomically."""

    def scores(self, query: str) -> NDArray[np.float32]:
        """BM25 score of every tool for ``query`` (0 where nothing matched)."""

    def name_has_term(self, term: str) -> NDArray[np.uint32]:
        """Rows (ascending) whose id ``server/name`` contains every term of ``term``."""

    def rows_named(self, name: str) -> list[int]:
        """Rows ``name`` names: the row whose exposed name equals it (else equals it ignoring
        case), else those whose tool name or ``server/name`` id does (else ignoring case)."""

    def mentioned_names(self, query: str) -> list[int]:
        """Rows whose compound name, id or exposed name the query mentions verbatim (ignoring
        case); any name, when it is the whole query."""

    @property
    def k1(self) -> float:
        """Term-frequency saturation."""

    @property
    def b(self) -> float:
        """Length normalisation."""

    @property
    def field_weights(self) -> dict[str, float]:
        """Field weights: ``name``, ``description``, ``params``, ``server``."""

    def __len__(self) -> int: ...

def fuse(
    dense: NDArray[np.float32],
    sparse: NDArray[np.float32],
    *,
    alpha: float,
    method: str = "minmax",
    top: int = 100,
    rrf_k: float = 60.0,
) -> NDArray[np.float32]:
    """Fuses dense (cosine) and BM25 scores into one float32 array.

    ``method``: ``"rrf"``, ``"minmax"``, ``"divmax"`` or ``"<dense>+<sparse>"`` with each side
    ``raw``, ``minmax`` or ``divmax``.
    """

def dense_signal(
    index: Index,
    cosine: NDArray[np.float32],
    clauses: NDArray[np.float32],
    clause_weight: float,
) -> NDArray[np.float32]:
    """The dense signal ``route`` fuses, from every row's whole-query cosine and the query's
    clause vectors ((m, d) float32): for the rows nearest the query, the cosine plus
    ``clause_weight`` times the best clause cosine; for the rest, ``1 + clause_weight`` times
    the cosine."""

@final
class RoutedRow:
    """One active row of a route and the evidence for it."""

    @property
    def row(self) -> int:
        """Row number in the index."""

    @property
    def fused(self) -> float:
        """Fused score."""

    @property
    def dense(self) -> float:
        """Whole-query cosine, at the index's storage precision."""

    @property
    def bm25(self) -> float:
        """BM25 score."""

    @property
    def copy_of(self) -> int | None:
        """The row placed above that this ranked row nearly copies, if it does."""

@final
class GatedRow:
    """A row the gate kept out of a route: the fused score it would have ranked with, and
    the flags it misses."""

    @property
    def row(self) -> int:
        """Row number in the index."""

    @property
    def fused(self) -> float:
        """Fused score."""

    @property
    def missing_flags(self) -> list[int]:
        """Required flags the caller did not satisfy, ascending."""

@final
class RouteOutcome:
    """What one :func:`route` or :func:`route_select` call chose, and what the gate kept out."""

    @property
    def forced(self) -> list[RoutedRow]:
        """Eligible forced rows: best fused score first from :func:`route`, in the order
        given from :func:`route_select`."""

    @property
    def ranked(self) -> list[RoutedRow]:
        """The best ``k`` other eligible rows, best first, near copies moved down."""

    @property
    def n_gated(self) -> int:
        """Rows in scope but gated out by missing flags."""

    @property
    def n_out_of_scope(self) -> int:
        """Rows outside ``allow`` or inside ``deny``."""

    @property
    def clauses(self) -> list[list[RoutedRow]]:
        """Each ranked clause's best ``clause_k`` rows, best first, with the clause's own
        scores (empty when no clause is ranked)."""

    @property
    def gated(self) -> list[GatedRow]:
        """The best few gated rows that would otherwise have been active, best first."""

def route(
    index: Index,
    bm25: Bm25,
    vector: NDArray[np.float32],
    text: str,
    *,
    alpha: float,
    method: str,
    top: int,
    k: int,
    threshold: float | None = None,
    flags: NDArray[np.uint32] | None = None,
    allow: NDArray[np.uint32] | None = None,
    deny: NDArray[np.uint32] | None = None,
    forced: NDArray[np.uint32] | None = None,
    rankable: NDArray[np.uint32] | None = None,
    clauses: NDArray[np.float32] | None = None,
    clause_weight: float = 0.0,
    clause_texts: Sequence[str] | None = None,
    clause_fusion: float = 0.0,
    clause_k: int = 0,
    lifted: NDArray[np.uint32] | None = None,
    near_copy_cosine: float | None = None,
    demoted: NDArray[np.uint32] | None = None,
    demote_weight: float = 1.0,
    name_weight: float = 0.0,
) -> RouteOutcome:
    """Dense scan, BM25, fusion, gating and top-k for one query, with the GIL released.

    Rows are ranked on :meth:`Index.scores`, at the index's storage precision: unlike
    :meth:`Index.search`, nothing is re-scored in f32, so on an int8 or bf16 index the rows,
    their order and the ``dense`` cosines are the compact copy's.

    ``forced`` rows are included whenever eligible, whatever their score. ``rankable`` (a
    ``+term`` filter) lists the only other rows that may be ranked; a row in scope outside it
    is left out of the outcome altogether, and ``n_out_of_scope`` counts ``allow`` and
    ``deny`` alone. ``clauses`` ((m, d) float32) are clause vectors of a multi-intent query:
    fusion reads each row's whole-query cosine plus ``clause_weight`` times its best clause
    cosine. ``clause_texts`` are their texts, aligned: with ``clause_fusion`` above 0, each
    clause of six words or more is fused on its own (its cosine over every row and its BM25)
    and each row's fused score gains ``clause_fusion`` times its best, when two such clauses
    or more remain. With ``clause_k`` above 0, each of the first 16 clauses is also ranked on
    its own, as a query of its vector and text alone would be (the same gate, scope, floor,
    forced and rankable rows, demotion and near copies), in the same call: its best
    ``clause_k`` rows are in ``clauses`` of the outcome. ``lifted`` rows (a learned lift) come
    back among ``forced`` whatever their score, for the caller to place, and each clause's
    ranking ranks them as any other row. ``near_copy_cosine``: a ranked row with the same
    tool name as a row placed above it, and whose stored vector has at least this cosine with
    that row's, is moved below the rows that are not copies and score at least half as well
    (the best ``2k`` are ranked, ``k`` kept). ``demoted`` rows (tools whose descriptions
    address the model) rank by their fused score times ``demote_weight`` (in [0, 1]); forced
    rows stay whatever it says. With ``name_weight`` above 0, the best ``2k`` rows are put in
    the order of ``fused + name_weight * coverage - 0.65 * ln(1 + place)`` (coverage: the share
    of the tool name's words that ``text`` holds; place: from 0, by fused score) before ``k``
    are kept; each row keeps its own fused score.
    """

def route_select(
    index: Index,
    bm25: Bm25,
    rows: NDArray[np.uint32],
    *,
    flags: NDArray[np.uint32] | None = None,
    allow: NDArray[np.uint32] | None = None,
    deny: NDArray[np.uint32] | None = None,
) -> RouteOutcome:
    """ToolSearch's ``select:``, the same core call as :func:`route` in another mode: the
    eligible ``rows`` alone, in the order given (each once), every score 0. Nothing is
    scanned; ``n_gated`` counts the gated ``rows``."""

@final
class SchemaCache:
    """A thread-safe LRU cache of schema JSON strings keyed by (tool id, catalog version)."""

    def __new__(cls, max_entries: int, max_bytes: int) -> SchemaCache: ...
    def get(self, tool_id: str, version: int) -> str | None:
        """The cached schema of ``tool_id`` at ``version``, or None."""

    def put(self, tool_id: str, version: int, schema: str) -> bool:
        """Caches ``schema``; False (caching nothing) if it alone exceeds ``max_bytes``."""

    def get_or_fetch(self, tool_id: str, version: int, fetch: Callable[[], str]) -> str:
        """The cached schema, or else ``fetch()`` (called without the cache's lock)."""

    def stats(self) -> dict[str, int]:
        """Counters and sizes: hits, misses, evictions, entries, bytes."""

    def clear(self) -> None:
        """Drops every entry; counters are kept."""

    def keys(self) -> list[tuple[str, int]]:
        """``(tool_id, version)`` of every entry, most recently used first."""

    @property
    def max_entries(self) -> int:
        """The entry-count bound."""

    @property
    def max_bytes(self) -> int:
        """The byte bound."""

    def __len__(self) -> int: ...

@final
class LearnedRows:
    """Stored query vectors (int8, one scale per row), each for one tool with a weight.

    ``LearnedRows(dim)`` holds none. Rows are appended with ``push``, dropped with ``retain``,
    and ``votes`` gives the vote of the stored rows nearest a query, grouped by tool.
    """

    def __new__(cls, dim: int) -> LearnedRows: ...
    def push(
        self,
        vectors: NDArray[np.float32],
        tools: NDArray[np.uint32],
        weights: NDArray[np.float32],
    ) -> None:
        """Appends one row per entry of ``tools`` ((n,) uint32): ``vectors`` ((n, dim) float32,
        L2-normalised) with ``weights`` ((n,) float32)."""

    def set_weight(self, row: int, weight: float) -> None:
        """Sets row ``row``'s weight."""

    def retain(self, keep: NDArray[np.bool_]) -> None:
        """Keeps the rows whose entry of ``keep`` ((len,) bool) is true, in order."""

    def scores(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """Every row's cosine with ``query`` ((dim,) float32), at int8 precision. A NaN or
        infinite value in ``query`` is an ``InvalidInputError``, here and in :meth:`votes`."""

    def votes(
        self, query: NDArray[np.float32], neighbours: int, floor: float
    ) -> tuple[NDArray[np.uint32], NDArray[np.float32], NDArray[np.float32]]:
        """The votes of the ``neighbours`` rows nearest ``query`` with a cosine of at least
        ``floor``, by tool, largest first: ``(tools, votes, best)`` arrays, where a vote is the
        sum of ``weight * cosine`` of the tool's rows among them and ``best`` its best cosine."""

    @property
    def tools(self) -> NDArray[np.uint32]:
        """The tool of each row, in order."""

    @property
    def weights(self) -> NDArray[np.float32]:
        """The weight of each row, in order."""

    @property
    def dim(self) -> int:
        """Values per row."""

    def __len__(self) -> int: ...

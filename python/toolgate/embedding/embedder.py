"""Sentence embeddings with all-MiniLM-L6-v2 through ONNX Runtime on the CPU.

>>> from toolgate import Embedder
>>> embedder = Embedder(precision="int8")  # doctest: +SKIP
>>> embedder.embed(["list open pull requests"]).shape  # doctest: +SKIP
(1, 384)

A single text runs unpadded (its exact length, no wasted positions); a batch is sorted by length
and cut into buckets padded only to their own longest member. Mean pooling over the attention mask
and L2 normalisation run inside the ONNX graph (see :mod:`toolgate.embedding.onnx_export`).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgate.arguments import file_path
from toolgate.embedding import long_texts, models, runtime
from toolgate.embedding.model_files import Precision, home_path
from toolgate.embedding.onnx_export import SENTENCE_OUTPUT, TOKEN_OUTPUT
from toolgate.errors import InvalidInputError, ModelError
from toolgate.forks import BoundToProcess, fork_safe_lock
from toolgate.unicode import well_formed

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

    from toolgate.embedding.cache import EmbeddingCache

__all__ = ["DIM", "MAX_TOKENS", "Embedder", "TokenStates", "resolve_cache"]

DIM = 384
# sentence-transformers' max_seq_length for this model: longer texts are truncated there too.
MAX_TOKENS = 256
# Texts above this count get a progress bar (when ``progress`` is left to decide).
_PROGRESS_THRESHOLD = 512


@dataclass(frozen=True)
class TokenStates:
    """One text's embedding with the model's last-layer state of each of its tokens.

    Attributes:
        vector: the text's embedding, as :meth:`Embedder.embed` returns it, shape (384,).
        states: one row per token, [CLS] first and [SEP] last, shape (tokens, 384), not
            normalised.
        offsets: each token's ``(start, end)`` character span in the text; ``(0, 0)`` for
            [CLS] and [SEP].
    """

    vector: np.ndarray
    states: np.ndarray
    offsets: tuple[tuple[int, int], ...]


class Embedder(BoundToProcess):
    """Embed texts into L2-normalised 384-dimensional float32 vectors.

    Args:
        precision: ``"fp32"`` (parity with sentence-transformers) or ``"int8"`` (dynamically
            quantized: faster and half the size; accuracy in ``models/README.md``). int8 runs
            one text per ONNX Runtime call so a vector never depends on its batch neighbours.
        threads: ONNX Runtime intra-op threads (and, for int8 batches, parallel workers). One
            is best for a server that already handles requests in parallel.
        batch_size: texts per ONNX Runtime call when embedding many with fp32.
        cache: an :class:`~toolgate.embedding.cache.EmbeddingCache`, a path for one, ``True`` for
            ``$TOOLGATE_HOME/embeddings.sqlite3``, or ``None`` for no persistent cache. A cache
            file that cannot be used only emits a :class:`~toolgate.embedding.cache.CacheWarning`:
            embedding goes on without it.
        progress: show a tqdm bar; ``None`` shows one for jobs of more than 512 texts.
        home: model cache root (default ``$TOOLGATE_HOME`` or ``~/.cache/toolgate``).

    Raises:
        ModelNotFoundError: the model has not been prepared (the message gives the command).
        ModelChecksumError: a cached model file does not match its recorded sha256.

    Safe to call from several threads at once.
    """

    _elsewhere = "make one there with Embedder(precision=...)"

    def __init__(
        self,
        precision: Precision = "fp32",
        *,
        threads: int = 1,
        batch_size: int = 32,
        cache: EmbeddingCache | str | os.PathLike[str] | bool | None = None,
        progress: bool | None = None,
        home: str | os.PathLike[str] | None = None,
    ) -> None:
        # ONNX Runtime takes a 32-bit thread count; far past any machine's cores is a mistake.
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 4096:
            raise InvalidInputError(f"threads must be an integer in [1, 4096], got {threads!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
        if precision not in ("fp32", "int8"):
            raise InvalidInputError(f"precision must be 'fp32' or 'int8', got {precision!r}")
        # A Path from here on: the docs show ``home=`` untyped, and callers pass str paths.
        home = None if home is None else home_path(home)
        self._cache = resolve_cache(cache, home)
        loaded = models.load(precision, home=home, verify=False)
        # Checksum, session and tokenizer are built side by side (hashlib and ONNX Runtime
        # release the GIL), so cold start pays for the slowest of them, not their sum. Nothing
        # is embedded before the checksum has passed.
        with ThreadPoolExecutor(max_workers=2) as pool:
            verified = pool.submit(loaded.verify)
            session = pool.submit(_make_session, loaded.onnx_bytes, threads)
            self._tokenizer = _make_tokenizer(loaded.tokenizer_json)
            verified.result()
            self._session: Any = session.result()  # None: to build (a forked child's)
        self._home = home
        self._lock = fork_safe_lock()  # released in a forked child, whoever held it
        self._serial: Any = None
        self.precision: Precision = precision
        self.threads = threads
        self.batch_size = batch_size
        self.progress = progress
        self._model_id = loaded.model_id
        _EMBEDDERS.add(self)

    def __repr__(self) -> str:
        return (
            f"Embedder(precision={self.precision!r}, threads={self.threads}, cache={self._cache!r})"
        )

    @property
    def model_id(self) -> str:
        """Identifies model, precision and artifact bytes; changes whenever vectors could."""
        return self._model_id

    @property
    def dim(self) -> int:
        """Length of every embedding (384)."""
        return DIM

    @property
    def cache(self) -> EmbeddingCache | None:
        """The persistent embedding cache in use, if any."""
        return self._cache

    def embed(self, texts: Sequence[str] | str) -> np.ndarray:
        """Return an (n, 384) float32 array of L2-normalised rows, one per text, in order.

        A single ``str`` is treated as a list of one text. Texts longer than 256 tokens are
        truncated, as sentence-transformers does; a long text is tokenized only as far as
        those tokens need (:mod:`toolgate.embedding.long_texts`).
        """
        batch = _validate_texts(texts)
        if self._cache is None:
            return self._embed_uncached(batch)
        return self._cache.embed_through(self._model_id, batch, self._embed_uncached)

    def embed_tokens(self, text: str) -> TokenStates:
        """Embed one ``text`` and return its token states too, from the same model run.

        Never cached: the states are for pooling parts of a query
        (:mod:`toolgate.embedding.clauses`).
        """
        encoding = long_texts.encode(self._tokenizer, _validate_texts([text])[0])
        vectors, states = self._run_single(encoding, [SENTENCE_OUTPUT, TOKEN_OUTPUT])
        return TokenStates(
            vector=vectors[0],
            states=states[0],
            offsets=tuple((int(start), int(end)) for start, end in encoding.offsets),
        )

    def token_ids(self, text: str) -> list[int]:
        """The WordPiece ids the model sees for ``text`` ([CLS] ... [SEP], truncated to 256)."""
        return list(long_texts.encode(self._tokenizer, _validate_texts([text])[0]).ids)

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, DIM), dtype=np.float32)
        if len(texts) == 1:
            return self._run_one(long_texts.encode(self._tokenizer, texts[0]))
        encodings = long_texts.encode_all(self._tokenizer, texts)
        if self.precision == "int8":
            return self._embed_each(encodings)
        return self._embed_buckets(encodings)

    def _embed_buckets(self, encodings: list[Encoding]) -> np.ndarray:
        # Sorting by length makes each bucket's padding (and so wasted work) small.
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(encodings), DIM), dtype=np.float32)
        with _progress_bar(len(encodings), self.progress) as bar:
            for start in range(0, len(order), self.batch_size):
                bucket = order[start : start + self.batch_size]
                ids, mask = _pad([encodings[i] for i in bucket])
                out[bucket] = self._run(ids, mask)
                bar.update(len(bucket))
        return out

    def _embed_each(self, encodings: list[Encoding]) -> np.ndarray:
        # The int8 graph quantizes activations with one scale per tensor, computed at run time:
        # in a padded batch, every text's scale would depend on its neighbours. One text per run
        # keeps a vector a function of its text only, which the embedding cache and
        # query/catalog agreement rely on.
        out = np.empty((len(encodings), DIM), dtype=np.float32)
        with _progress_bar(len(encodings), self.progress) as bar:
            if self.threads == 1:
                for row, encoding in enumerate(encodings):
                    out[row] = self._run_one(encoding)[0]
                    bar.update(1)
                return out
            # Parallel single-text runs (ONNX Runtime releases the GIL) on a session without
            # an intra-op pool: workers sharing a pooled session spin against each other.
            session = self._serial_session()

            def embed_row(row: int) -> None:
                out[row] = self._run_one(encodings[row], session)[0]
                bar.update(1)

            with ThreadPoolExecutor(max_workers=self.threads) as pool:
                list(pool.map(embed_row, range(len(encodings))))
        return out

    def _serial_session(self) -> Any:
        """A one-thread session of the same model, built (and verified) on first need."""
        with self._lock:
            if self._serial is None:
                self._serial = self._fresh_session(threads=1)
            return self._serial

    def _main_session(self) -> Any:
        """The session of ``threads`` threads; built afresh in a forked child (:meth:`_forked`)."""
        session = self._session
        if session is not None:
            return session
        with self._lock:
            if self._session is None:
                self._session = self._fresh_session(self.threads)
            return self._session

    def _fresh_session(self, threads: int) -> Any:
        """A new session of this embedder's model, checked to be the file it loaded."""
        loaded = models.load(self.precision, home=self._home)
        if loaded.onnx_sha256[:16] not in self._model_id:
            raise ModelError(f"{loaded.path} changed since this Embedder loaded it")
        return _make_session(loaded.onnx_bytes, threads)

    def _forked(self) -> None:
        """In a forked child (a pre-forking server's worker): a session with an intra-op pool
        (``threads`` > 1) is left to the parent, whose pool threads the child does not have;
        the child builds its own on first use. A one-thread session has no threads: it stays,
        its memory shared with the parent."""
        if self.threads > 1 and self._session is not None:
            _abandon(self._session)
            self._session = None

    def _run_one(self, encoding: Encoding, session: Any = None) -> np.ndarray:
        (vectors,) = self._run_single(encoding, [SENTENCE_OUTPUT], session)
        return vectors

    def _run_single(
        self, encoding: Encoding, outputs: list[str], session: Any = None
    ) -> list[np.ndarray]:
        """The named graph outputs for one unpadded text, as float32 arrays."""
        ids = np.asarray(encoding.ids, dtype=np.int32)[None, :]
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        session = session or self._main_session()
        with runtime.call_under_way():
            found = session.run(outputs, feed)
        return [np.asarray(out, np.float32) for out in found]

    def _run(self, ids: np.ndarray, mask: np.ndarray, session: Any = None) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        session = session or self._main_session()
        with runtime.call_under_way():
            (vectors,) = session.run([SENTENCE_OUTPUT], feed)
        return np.asarray(vectors, dtype=np.float32)


# Every embedder alive, for the hook that runs in a forked child.
_EMBEDDERS: weakref.WeakSet[Embedder] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for embedder in list(_EMBEDDERS):
        embedder._forked()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _abandon(session: Any) -> None:
    """Keep ``session`` from ever being freed in this process: in a forked child its
    destructor would wait for ever on the parent's pool threads (``pthread_cond_destroy``)."""
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(session))


def _validate_texts(texts: Sequence[str] | str) -> list[str]:
    """``texts`` as a list of well-formed strings (see :func:`toolgate.unicode.well_formed`)."""
    if isinstance(texts, str):
        return [well_formed(texts)]
    if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Sequence):
        raise InvalidInputError(
            f"texts must be a str or a sequence of str, got {type(texts).__name__}"
        )
    batch = list(texts)
    for index, text in enumerate(batch):
        if not isinstance(text, str):
            raise InvalidInputError(f"texts[{index}] is {type(text).__name__}, expected str")
    return [well_formed(text) for text in batch]


def _pad(encodings: list[Encoding]) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(encoding.ids) for encoding in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int32)
    mask = np.zeros((len(encodings), width), dtype=np.int32)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    return ids, mask


def _make_tokenizer(tokenizer_json: str) -> Tokenizer:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    # The shipped tokenizer.json pads every text to 128 and truncates at 128; the model was
    # trained and is evaluated (sentence-transformers) unpadded with truncation at 256.
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    return tokenizer


def _make_session(onnx_bytes: bytes, threads: int) -> Any:
    ort = runtime.onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    # Idle pool threads would otherwise spin for a while after every run, burning a core that
    # the host application (an agent gateway, other sessions) needs.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with runtime.call_under_way():  # its refusal at exit is no fault of the model's
        try:
            return ort.InferenceSession(
                onnx_bytes, sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # ORT raises its own untyped exception classes.
            raise ModelError(f"ONNX Runtime cannot load the model: {exc}") from exc


def resolve_cache(
    cache: EmbeddingCache | str | os.PathLike[str] | bool | None,
    home: str | os.PathLike[str] | None,
) -> EmbeddingCache | None:
    """An :class:`EmbeddingCache` from the forms ``Embedder(cache=...)`` accepts, or ``None``.

    A file that cannot be opened (read-only folder, damaged or foreign file) still yields a
    cache: an empty one, after a :class:`~toolgate.embedding.cache.CacheWarning`.
    """
    if cache is None or cache is False:
        return None
    # sqlite3 is imported only by callers that want the persistent cache.
    from toolgate.embedding.cache import EmbeddingCache

    if isinstance(cache, EmbeddingCache):
        if cache.dim != DIM:
            raise InvalidInputError(f"cache stores {cache.dim}-d vectors, the model makes {DIM}")
        return cache
    if cache is True:
        return EmbeddingCache(home_path(home) / "embeddings.sqlite3", dim=DIM)
    if isinstance(cache, (str, os.PathLike)):
        return EmbeddingCache(file_path("cache", cache), dim=DIM)
    raise InvalidInputError(
        f"cache must be an EmbeddingCache, a path, a bool or None, got {type(cache).__name__}"
    )


class _NoBar:
    def update(self, n: int) -> None:
        """Ignore progress."""
        del n

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _progress_bar(total: int, progress: bool | None) -> Any:
    show = progress if progress is not None else total > _PROGRESS_THRESHOLD
    if not show:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc="embedding", unit="text", leave=False)

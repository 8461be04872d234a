"""A persistent, multi-process embedding cache keyed by sha256(model id, text).

Re-indexing a catalog then embeds only the tools whose summaries changed. The store is one SQLite
file in WAL mode: any number of processes may read and write it at once (writers queue on SQLite's
lock with a busy timeout), and a crash mid-write leaves the previous state intact.

The cache only saves time, so it never stops an embedding: a stored vector that is not a finite
unit vector of the right size reads as a miss (and is overwritten when re-embedded), and any SQLite
failure (a damaged or foreign file, a lock held past the timeout, a read-only folder) raises one
:class:`CacheWarning` naming the file and the error, after which the instance stores nothing.

>>> from toolgate.embedding.cache import EmbeddingCache
>>> cache = EmbeddingCache("/tmp/toolgate-embeddings.sqlite3")  # doctest: +SKIP
>>> cache.get_many("model-a", ["hello"])  # doctest: +SKIP
[None]
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from toolgate.arguments import check_seconds, file_path
from toolgate.forks import BoundToProcess, fork_safe_lock
from toolgate.sqlite_files import SharedConnection, open_shared_sqlite

__all__ = ["BUSY_TIMEOUT_S", "CacheWarning", "EmbeddingCache", "cache_key"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    key BLOB PRIMARY KEY,
    vector BLOB NOT NULL
) WITHOUT ROWID
"""
# SQLite caps the number of bound parameters per statement (999 on old builds).
_CHUNK = 500
# How long a reader or writer waits on another process's lock before the cache steps aside.
BUSY_TIMEOUT_S = 30.0
# Stored rows are L2-normalised float32; their squared norms sit within ~1e-6 of 1.
_NORM_TOLERANCE = 1e-3


class CacheWarning(UserWarning):
    """The embedding cache is damaged or unusable; embedding goes on without (part of) it."""


def cache_key(model_id: str, text: str) -> bytes:
    """sha256 over the model id and the text, separated so ("ab", "c") != ("a", "bc")."""
    digest = hashlib.sha256(model_id.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.digest()


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    """A boolean per row of ``vectors``: True where it is finite with an L2 norm of 1."""
    finite = np.isfinite(vectors).all(axis=1)
    wide = np.where(finite[:, None], vectors, 0.0).astype(np.float64)
    squared = np.einsum("ij,ij->i", wide, wide)
    result: np.ndarray = finite & (np.abs(squared - 1.0) <= _NORM_TOLERANCE)
    return result


class EmbeddingCache(BoundToProcess):
    """L2-normalised embeddings of (model id, text) pairs stored in a SQLite file.

    Rows are float32 unit vectors of a fixed dimension. A row of the wrong size, with a NaN or
    infinity, or not of unit length (a damaged file) reads as a miss, counted in one
    :class:`CacheWarning`, and is overwritten on the next :meth:`put_many`. A SQLite error while
    opening, reading or writing warns once and turns the instance into a cache that is always
    empty, so callers carry on embedding directly. ``timeout_s`` (default
    :data:`BUSY_TIMEOUT_S`) bounds each wait on another process's lock.
    One instance may be used from several threads, and in the workers a server forks: each
    process uses a connection of its own (:class:`~toolgate.sqlite_files.SharedConnection`).
    """

    _elsewhere = "open the file there with EmbeddingCache(path)"

    def __init__(
        self, path: str | os.PathLike[str], *, dim: int = 384, timeout_s: float | None = None
    ) -> None:
        self.path = file_path("path", path)
        self.dim = dim
        self._lock = fork_safe_lock()
        self._db: SharedConnection | None = None  # None: unusable, or closed
        timeout = BUSY_TIMEOUT_S if timeout_s is None else timeout_s
        check_seconds("timeout_s", timeout)
        try:
            self._db = SharedConnection(self.path, lambda: _connect(self.path, timeout), self._lock)
        except (sqlite3.Error, OSError) as exc:
            self._give_up("open", exc)

    def __repr__(self) -> str:
        state = "" if self.active else ", unusable"
        return f"EmbeddingCache({str(self.path)!r}, dim={self.dim}{state})"

    def __len__(self) -> int:
        with self._lock:
            if self._db is None:
                return 0
            try:
                (count,) = self._db.get().execute("SELECT COUNT(*) FROM embeddings").fetchone()
            except (sqlite3.Error, OSError) as exc:  # OSError: a forked child's open
                self._give_up("read", exc)
                return 0
        return int(count)

    @property
    def active(self) -> bool:
        """False once a SQLite error has made this instance stop using its file."""
        return self._db is not None

    def get_many(self, model_id: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The cached vector for each text, or None where there is none (or it is damaged)."""
        keys = [cache_key(model_id, text) for text in texts]
        with self._lock:
            found = self._select(keys)
        blobs = [found.get(key) for key in keys]
        # A file written by something else may hold blobs of any size, or not blobs at all.
        sized = [
            (i, blob)
            for i, blob in enumerate(blobs)
            if isinstance(blob, bytes) and len(blob) == self.dim * 4
        ]
        joined = b"".join(blob for _, blob in sized)
        matrix = np.frombuffer(joined, dtype="<f4").reshape(len(sized), self.dim)
        out: list[np.ndarray | None] = [None] * len(keys)
        for (i, _), row, sound in zip(sized, matrix, _unit_rows(matrix), strict=True):
            if sound:
                out[i] = row
        damaged = sum(blob is not None for blob in blobs) - sum(row is not None for row in out)
        if damaged:
            warnings.warn(
                f"embedding cache {self.path}: {damaged} of {len(keys)} stored vectors are "
                f"damaged (wrong size, not finite or not unit length); they count as misses "
                f"and are embedded again",
                CacheWarning,
                stacklevel=2,
            )
        return out

    def put_many(self, model_id: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store one row of ``vectors`` (shape (len(texts), dim), finite unit rows) per text."""
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(f"vectors must be ({len(texts)}, {self.dim}), got {vectors.shape}")
        bad = np.flatnonzero(~_unit_rows(vectors))
        if bad.size:
            raise ValueError(
                f"vectors must be finite unit rows; row {int(bad[0])} ({texts[bad[0]]!r}) is not"
            )
        self._store(model_id, texts, vectors)

    def _store(self, model_id: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Write rows already known to be finite unit vectors of the right width."""
        rows = [
            (cache_key(model_id, text), np.ascontiguousarray(row, dtype="<f4").tobytes())
            for text, row in zip(texts, vectors, strict=True)
        ]
        with self._lock:
            if self._db is None or not rows:
                return
            try:
                db = self._db.get()
                with _transaction(db):
                    db.executemany(
                        "INSERT OR REPLACE INTO embeddings (key, vector) VALUES (?, ?)", rows
                    )
            except (sqlite3.Error, OSError) as exc:  # OSError: a forked child's open
                self._give_up("write", exc)

    def embed_through(
        self, model_id: str, texts: Sequence[str], embed: Callable[[list[str]], np.ndarray]
    ) -> np.ndarray:
        """Vectors for ``texts``: cached ones read back, the rest made by ``embed`` and stored."""
        cached = self.get_many(model_id, texts)
        missing = [i for i, row in enumerate(cached) if row is None]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, row in enumerate(cached):
            if row is not None:
                out[i] = row
        if missing:
            fresh = embed([texts[i] for i in missing])
            out[missing] = fresh
            # Whatever the model returned is the answer; only rows a read would accept are kept.
            keep = np.flatnonzero(_unit_rows(fresh))
            self._store(model_id, [texts[missing[k]] for k in keep], fresh[keep])
        return out

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _select(self, keys: list[bytes]) -> dict[bytes, object]:
        """Stored blobs by key; empty (after one warning) if the file cannot be read."""
        found: dict[bytes, object] = {}
        if self._db is None:
            return found
        try:
            db = self._db.get()
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update(rows)
        except (sqlite3.Error, OSError) as exc:  # OSError: a forked child's open
            self._give_up("read", exc)
            return {}
        return found

    def _give_up(self, action: str, exc: BaseException) -> None:
        """Warn once and stop using the file: the cache only saves time, it must not fail."""
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        warnings.warn(
            f"embedding cache {self.path}: cannot {action} it ({type(exc).__name__}: {exc}); "
            f"embedding without it from now on",
            CacheWarning,
            stacklevel=3,
        )


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    """Open (creating if needed) the cache file and check it holds the expected table."""
    db = open_shared_sqlite(path, timeout_s=timeout, schema=[_SCHEMA])
    try:
        # WAL + NORMAL is durable against application crashes, which is all a cache needs.
        db.execute("PRAGMA synchronous=NORMAL")
        # A file made by something else may have an `embeddings` table of another shape.
        db.execute("SELECT key, vector FROM embeddings LIMIT 0").fetchall()
    except BaseException:
        db.close()
        raise
    return db


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back if the body or the commit fails."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise

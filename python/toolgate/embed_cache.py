"""A persistent, multi-process embedding cache keyed by sha256(model id, text).

Re-indexing a catalog then embeds only the tools whose summaries changed. The store is one SQLite
file in WAL mode: any number of processes may read and write it at once (writers queue on SQLite's
lock with a busy timeout), and a crash mid-write leaves the previous state intact.

>>> from toolgate.embed_cache import EmbeddingCache
>>> cache = EmbeddingCache("/tmp/toolgate-embeddings.sqlite3")  # doctest: +SKIP
>>> cache.get_many("model-a", ["hello"])  # doctest: +SKIP
[None]
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from toolgate.errors import ModelError

__all__ = ["EmbeddingCache", "cache_key"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    key BLOB PRIMARY KEY,
    vector BLOB NOT NULL
) WITHOUT ROWID
"""
# SQLite caps the number of bound parameters per statement (999 on old builds).
_CHUNK = 500


def cache_key(model_id: str, text: str) -> bytes:
    """sha256 over the model id and the text, separated so ("ab", "c") != ("a", "bc")."""
    digest = hashlib.sha256(model_id.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.digest()


class EmbeddingCache:
    """Embeddings of (model id, text) pairs stored in a SQLite file.

    Rows are float32 vectors of a fixed dimension; a row of the wrong size (a file shared with
    another model, or damaged) reads as a miss and is overwritten on the next :meth:`put_many`.
    One instance may be used from several threads; each process opens its own instance.
    """

    def __init__(self, path: str | Path, *, dim: int = 384, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.dim = dim
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=timeout_s, check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL is durable against application crashes, which is all a cache needs.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
        except sqlite3.Error as exc:
            raise ModelError(f"embedding cache {self.path}: cannot open ({exc})") from exc

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path)!r}, dim={self.dim})"

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()
        return int(count)

    def get_many(self, model_id: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The cached vector for each text, or None where there is none."""
        keys = [cache_key(model_id, text) for text in texts]
        found: dict[bytes, bytes] = {}
        with self._lock:
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update(rows)
        expected_bytes = self.dim * 4
        out: list[np.ndarray | None] = []
        for key in keys:
            blob = found.get(key)
            if blob is None or len(blob) != expected_bytes:
                out.append(None)
            else:
                out.append(np.frombuffer(blob, dtype="<f4"))
        return out

    def put_many(self, model_id: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store one row of ``vectors`` (shape (len(texts), dim), float32) per text."""
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(f"vectors must be ({len(texts)}, {self.dim}), got {vectors.shape}")
        rows = [
            (cache_key(model_id, text), np.ascontiguousarray(row, dtype="<f4").tobytes())
            for text, row in zip(texts, vectors, strict=True)
        ]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings (key, vector) VALUES (?, ?)", rows
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

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
            self.put_many(model_id, [texts[i] for i in missing], fresh)
        return out

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

"""A route's query vectors: the query embedded, blended with earlier turns, and its clauses.

Recent queries and history turns recur turn after turn, and embedding is most of a route's
time, so each text's vectors are memoised (read-only) for the life of the router.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import TYPE_CHECKING

import numpy as np

from toolgate.embedding.clauses import clauses as clauses_of
from toolgate.embedding.normalise import normalised
from toolgate.errors import IndexIncompatibleError
from toolgate.lazy import Lazy
from toolgate.routing.config import RouterConfig
from toolgate.routing.history import HistoryTurn, blend_history, history_texts

if TYPE_CHECKING:
    from toolgate.embedding.embedder import Embedder

__all__ = ["MEMO_CHARS", "QueryVectors", "wants_clauses"]

_CACHE_SIZE = 1024
# Longest text memoised. The memo keeps each text it holds (its key, and its clauses' texts):
# 1024 long prompts or tool results, per router, would hold gigabytes. A longer text is
# embedded again when it recurs, which reads only its first 256 tokens, unless it is one of
# the last few (a route's query and history turns).
MEMO_CHARS = 8192
_LONG_TEXTS = 4


class QueryVectors:
    """Embeds route queries with the embedder an index was built with."""

    def __init__(
        self,
        embedder: Embedder | Callable[[], Embedder],
        config: RouterConfig,
        *,
        model_id: str,
        index_path: object,
    ) -> None:
        """``embedder`` or a loader of it, called on first use; either is checked against the
        index's ``model_id`` (``index_path`` names the index in the error): queries embedded
        by another model than the rows would rank without meaning."""
        self._config = config
        if hasattr(embedder, "embed"):
            given: Embedder = embedder  # type: ignore[assignment]
            self._embedder: Lazy[Embedder] = Lazy(self._checked(given, model_id, index_path))
        else:
            load: Callable[[], Embedder] = embedder
            checked = QueryVectors._checked
            self._embedder = Lazy(None, lambda: checked(load(), model_id, index_path))
        # The memo calls a function of the embedder and config, not a method: a bound method
        # held by its own object is a reference cycle, which would keep a dropped router's
        # memo (up to 1024 texts' vectors) until the cyclic GC ran.
        self._embed_text = _Memo(self._embedder, config)

    @staticmethod
    def _checked(embedder: Embedder, model_id: str, index_path: object) -> Embedder:
        if embedder.model_id != model_id:
            raise IndexIncompatibleError(
                f"{index_path}: embedded with {model_id!r}, "
                f"but the embedder is {embedder.model_id!r}; rebuild with 'toolgate index'"
            )
        return embedder

    @property
    def embedder(self) -> Embedder:
        """The embedder (loaded on first use)."""
        return self._embedder.get()

    def with_config(self, config: RouterConfig) -> QueryVectors:
        """These query vectors under ``config``: the same embedder and, where ``config``
        reads clauses as this one does, the same memo."""
        view = copy.copy(self)
        view._config = config
        if (
            wants_clauses(config) != wants_clauses(self._config)
            or config.clause_vectors != self._config.clause_vectors
        ):
            # The memo holds clause vectors made as the old config said.
            view._embed_text = _Memo(view._embedder, config)
        return view

    def __call__(
        self, text: str, history: Sequence[HistoryTurn] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The query vector, blended with ``history``, and the clause vectors of ``text``."""
        vector, clauses, _ = self._embed_text(text)
        texts = history_texts(history, self._config.history_turns)
        if texts:
            vector = blend_history(vector, texts, self._embed_texts, self._config.history_decay)
        return np.ascontiguousarray(vector, dtype=np.float32), clauses

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._embed_text(text)[0] for text in texts])

    def forget(self) -> None:
        """Drop every memoised text: the next route of each embeds it again (a measurement
        that routes the same queries twice times the model in both passes)."""
        self._embed_text.cache_clear()

    def clause_texts(self, text: str) -> tuple[str, ...]:
        """The texts of ``text``'s clauses, aligned with its clause vectors."""
        return self._embed_text(text)[2]


_Embedded = tuple[np.ndarray, np.ndarray, tuple[str, ...]]


class _Memo:
    """:func:`_embed_one` under ``config``, memoised for the last 1024 texts of at most
    :data:`MEMO_CHARS` characters and the last :data:`_LONG_TEXTS` longer ones (a route
    reads its query twice, its vectors then its clauses' texts, with its history between)."""

    def __init__(self, embedder: Lazy[Embedder], config: RouterConfig) -> None:
        embed = partial(_embed_one, embedder, config)
        self._short = lru_cache(maxsize=_CACHE_SIZE)(embed)
        self._long = lru_cache(maxsize=_LONG_TEXTS)(embed)

    def __call__(self, text: str) -> _Embedded:
        return self._short(text) if len(text) <= MEMO_CHARS else self._long(text)

    def cache_clear(self) -> None:
        """Drop every memoised text."""
        self._short.cache_clear()
        self._long.cache_clear()


def _embed_one(embedder: Lazy[Embedder], config: RouterConfig, text: str) -> _Embedded:
    """``text``'s vector, its clause vectors (see :mod:`toolgate.embedding.clauses`),
    read-only, and the clauses' texts.

    Clause vectors need the token states of :meth:`Embedder.embed_tokens`; an embedder
    without that method gets none, and routes on the whole-query vector alone.
    """
    model = embedder.get()
    if wants_clauses(config) and hasattr(model, "embed_tokens"):
        tokens = model.embed_tokens(text)
        vector, (clauses, texts) = tokens.vector, clauses_of(tokens, text)
        if config.clause_vectors == "embedded" and len(texts) > 1:
            clauses = _with_own(clauses, model.embed(list(texts)))
    else:
        vector = np.asarray(model.embed([text])[0], dtype=np.float32)
        clauses, texts = np.empty((0, len(vector)), dtype=np.float32), ()
    vector.setflags(write=False)
    clauses.setflags(write=False)
    return vector, clauses, texts


def wants_clauses(config: RouterConfig) -> bool:
    """Whether routing under ``config`` reads a query's clauses (to rank or to select)."""
    return (
        config.clause_weight > 0
        or config.clause_fusion > 0
        or config.clause_tools > 0
        or config.clause_slots > 0
    )


def _with_own(pooled: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Each clause's pooled vector plus its own embedding, both unit length, made unit. The
    pooled one reads the clause within its sentence, which draws it towards the other
    intents' tools; its own embedding reads it apart, and a short clause ("and also its
    price") needs the sentence to mean anything."""
    return normalised(normalised(pooled) + normalised(own))

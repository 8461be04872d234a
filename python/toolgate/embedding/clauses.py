"""Clause vectors of a multi-intent query, pooled from the query's own token states.

"Find flights to Paris and book a hotel near the Louvre" asks for two tools. Its one embedding
is the average of both intents and sits close to neither tool; each clause alone sits close to
its own. Re-embedding every clause would cost a model run each (most of a route's time), so
instead each clause's vector is the mean of the last-layer states of its tokens, taken from the
single run that embeds the whole query
(:meth:`toolgate.embedding.embedder.Embedder.embed_tokens`). The router adds each tool's best
cosine against these clause vectors to its whole-query cosine (``RouterConfig.clause_weight``),
for the 200 tools nearest the whole query (``CLAUSE_CANDIDATES`` in ``rust/route.rs``, which
says why that is enough).

A clause boundary is sentence or clause punctuation (ASCII before a space or the end, CJK
anywhere) or the words "and", "then" and "also"; a boundary token starts the next clause.
Clauses of fewer than :data:`MIN_CLAUSE_TOKENS` word tokens (argument fragments such as "and
5", or ", release date" after "get the film's details": punctuation is no word) are dropped,
and a query with fewer than two clauses left has no clause vectors: its single clause is the
query itself.

>>> text = "Convert 5 USD to EUR, then email the result to Bob."
>>> [text[start:end] for start, end in clause_spans(text)]
['Convert 5 USD to EUR', ', ', 'then email the result to Bob', '.']
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from toolgate.embedding.embedder import TokenStates

__all__ = ["MIN_CLAUSE_TOKENS", "clause_spans", "clause_vectors", "clauses"]

#: Fewest word tokens (holding a letter or digit) a clause needs to get a vector of its own.
MIN_CLAUSE_TOKENS = 3

# ASCII sentence and clause punctuation before a space or the end (not the dot of
# "report.txt" or "3.5", nor the comma of "1,000"), full-width (CJK) punctuation anywhere, or
# a joining word.
_BOUNDARY = re.compile(
    r"[.?!;,](?=\s|$)|[\u3002\uff1f\uff01\uff1b\uff0c]|\b(?:and|then|also)\b",
    re.IGNORECASE,
)


def clause_spans(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` character spans that cut ``text`` into clauses, in order.

    The spans cover the whole text; a span may hold only punctuation or spaces.
    """
    cuts = sorted({match.start() for match in _BOUNDARY.finditer(text)} - {0})
    bounds = [0, *cuts, len(text)]
    return [(start, end) for start, end in pairwise(bounds) if end > start]


def clause_vectors(
    tokens: TokenStates, text: str, min_tokens: int = MIN_CLAUSE_TOKENS
) -> np.ndarray:
    """The L2-normalised mean token state of each clause of ``text`` with at least
    ``min_tokens`` word tokens, shape (clauses, dim); (0, dim) when fewer than two clauses
    qualify.

    ``tokens`` must come from embedding ``text`` itself: its offsets index into ``text``.
    [CLS], [SEP] and other zero-width tokens belong to no clause.
    """
    return clauses(tokens, text, min_tokens)[0]


def clauses(
    tokens: TokenStates, text: str, min_tokens: int = MIN_CLAUSE_TOKENS
) -> tuple[np.ndarray, tuple[str, ...]]:
    """:func:`clause_vectors` and the text of each clause, aligned (for ranking each clause
    by its words as well as by its vector)."""
    dim = tokens.states.shape[1]
    none = (np.empty((0, dim), dtype=np.float32), ())
    # Past its last token the model read nothing of the text (a long one is truncated): no
    # clause reaches there, and a 10 MB text is not cut into clauses for its first tokens.
    text = text[: max((end for _, end in tokens.offsets), default=0)]
    spans = clause_spans(text)
    if len(spans) < 2:  # most queries: nothing to pool
        return none
    read = [(i, start, end) for i, (start, end) in enumerate(tokens.offsets) if end > start]
    rows = np.array([i for i, _, _ in read], dtype=np.int64)
    starts = np.array([start for _, start, _ in read], dtype=np.int64)
    # A clause's boundary token opens it (", I am"): counted as a word, such fragments of one
    # request took a tool slot of their own, displacing what the whole request ranked second.
    words = np.array([any(c.isalnum() for c in text[s:e]) for _, s, e in read], dtype=bool)
    vectors, texts = [], []
    for start, end in spans:
        inside = (starts >= start) & (starts < end)
        members = rows[inside]
        if np.count_nonzero(inside & words) >= min_tokens:
            mean = tokens.states[members].mean(axis=0)
            norm = float(np.linalg.norm(mean))
            if norm > 0.0:
                vectors.append(mean / norm)
                texts.append(text[start:end])
    if len(vectors) < 2:
        return none
    return np.asarray(vectors, dtype=np.float32), tuple(texts)

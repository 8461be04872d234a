"""The plain baselines the tables set toolgate against: one signal, top k, nothing else.

* :class:`PlainCosine` is B3 as issue 17 defines it, "plain MiniLM top-10 on 'name:
  description'": each tool's ``name: description`` embedded once by the MiniLM embedder the
  router uses, the query embedded, cosine, top k. Tool Attention retrieves the same way, with
  its cosine floor. None of toolgate's ranking steps (the router's two-view rows with parameter
  and server text, centring, clause bonus and fusion, names the query mentions put first, near
  copies, look-alikes, "no tool needed") touch it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.tool import Tool
from toolgate.routing.build import embed_tools, open_cache


def cosine_text(tool: Tool) -> str:
    """The text B3 embeds for ``tool``."""
    return f"{tool.name}: {tool.description}"


class PlainCosine:
    """MiniLM cosine between the query and each tool's :func:`cosine_text`, best first.

    ``embedder`` is a :class:`toolgate.embedding.embedder.Embedder` (or one like it);
    ``cache`` keeps the tools' vectors across runs, as ``Router.from_catalog``'s does (vectors
    only: the ranking is the same without it).
    """

    def __init__(self, catalog: Catalog, embedder: Any, *, cache: bool = True) -> None:
        self.catalog = catalog
        self._ids = catalog.ids
        self._embedder = embedder
        texts = [(cosine_text(tool),) for tool in catalog]
        self._rows = embed_tools(embedder, texts, open_cache(cache or None))
        self._last: tuple[str, np.ndarray] | None = None

    def scores(self, query: str) -> np.ndarray:
        """The cosine of ``query`` with every tool, in catalog order."""
        if self._last is None or self._last[0] != query:
            # Kept for the next call: one query's B3 and Tool Attention read the same scores.
            self._last = (query, self._rows @ self._embedder.embed([query])[0])
        return self._last[1]

    def top(self, query: str, k: int, threshold: float | None = None) -> list[str]:
        """The ids of the ``k`` tools of highest cosine (ties in catalog order), those below
        ``threshold`` left out."""
        scores = self.scores(query)
        order = np.argsort(-scores, kind="stable")[:k]
        return [self._ids[i] for i in order if threshold is None or scores[i] >= threshold]

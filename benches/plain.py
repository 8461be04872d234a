"""The plain baselines the tables set toolgate against: one signal, top k, nothing else.

* :class:`PlainCosine` is B3 as issue 17 defines it, "plain MiniLM top-10 on 'name:
  description'": each tool's ``name: description`` embedded once by the MiniLM embedder the
  router uses, the query embedded, cosine, top k. Tool Attention retrieves the same way, with
  its cosine floor, and it is the quality tables' "dense alone".
* :class:`PlainBm25` is their "BM25 alone": BM25 over each tool's name, description,
  parameter text and server, with the router's BM25 settings (``bm25_k1``, ``bm25_b``,
  ``bm25_weights``), the tools that match a query word, best first.

None of toolgate's ranking steps touch either: the router's two-view rows, centring, the
clause bonus and clause fusion, names the query mentions put first, near copies, look-alikes,
addressing text, "no tool needed". ``route`` takes what
:func:`toolgate.evaluation.evaluate.evaluate` passes, so both evaluate as a router does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolgate._toolgate import Bm25
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.tool import Tool
from toolgate.errors import InvalidInputError
from toolgate.routing.build import embed_tools, open_cache
from toolgate.routing.config import RouterConfig

#: Tools a route shows when the caller gives no ``top_k`` (B3's k).
TOP_K = 10


@dataclass(frozen=True)
class PlainRoute:
    """A plain ranking's answer, read as ``evaluate`` reads a :class:`RouteResult`."""

    ids: tuple[str, ...]
    no_tool: bool = False


class PlainRanking:
    """Ranks a catalog's tools by :meth:`scores` alone, best first, ties in catalog order."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._ids = catalog.ids

    def scores(self, query: str) -> np.ndarray:
        """Every tool's score for ``query``, in catalog order."""
        raise NotImplementedError

    def ranks(self, score: float) -> bool:
        """Whether a tool scoring ``score`` is ranked at all."""
        return True

    def top(self, query: str, k: int, threshold: float | None = None) -> list[str]:
        """The ids of the ``k`` best tools, those scoring below ``threshold`` left out."""
        scores = self.scores(query)
        order = np.argsort(-scores, kind="stable")[:k]
        return [
            self._ids[i]
            for i in order
            if self.ranks(float(scores[i])) and (threshold is None or scores[i] >= threshold)
        ]

    def route(
        self,
        query: str,
        *,
        top_k: int | None = None,
        adaptive: bool | None = None,
        history: Sequence[Any] | None = None,
    ) -> PlainRoute:
        """The ``top_k`` best tools (default :data:`TOP_K`); ``adaptive`` changes nothing."""
        if history:
            raise InvalidInputError(
                f"{type(self).__name__} ranks the query alone; it was given a history"
            )
        return PlainRoute(tuple(self.top(query, TOP_K if top_k is None else top_k)))


def cosine_text(tool: Tool) -> str:
    """The text B3 embeds for ``tool``."""
    return f"{tool.name}: {tool.description}"


class PlainCosine(PlainRanking):
    """MiniLM cosine between the query and each tool's :func:`cosine_text`.

    ``embedder`` is a :class:`toolgate.embedding.embedder.Embedder` (or one like it);
    ``cache`` keeps the tools' vectors across runs, as ``Router.from_catalog``'s does (vectors
    only: the ranking is the same without it).
    """

    def __init__(self, catalog: Catalog, embedder: Any, *, cache: bool = True) -> None:
        super().__init__(catalog)
        self._embedder = embedder
        texts = [(cosine_text(tool),) for tool in catalog]
        self._rows = embed_tools(embedder, texts, open_cache(cache or None))
        self._last: tuple[str, np.ndarray] | None = None

    def scores(self, query: str) -> np.ndarray:
        """The cosine of ``query`` with every tool."""
        if self._last is None or self._last[0] != query:
            # Kept for the next call: one query's B3 and Tool Attention read the same scores.
            self._last = (query, self._rows @ self._embedder.embed([query])[0])
        return self._last[1]


def bm25_fields(tool: Tool) -> dict[str, str]:
    """The fields :class:`PlainBm25` indexes for ``tool``, as the tool gives them."""
    return {
        "name": tool.name,
        "description": tool.description,
        "param_text": tool.param_text,
        "server": tool.server,
    }


class PlainBm25(PlainRanking):
    """BM25 (toolgate's BM25F core with the router's settings) over :func:`bm25_fields`; a
    tool no query word matches is not ranked."""

    def __init__(self, catalog: Catalog, config: RouterConfig | None = None) -> None:
        super().__init__(catalog)
        config = config or RouterConfig()
        name, description, params, server = config.bm25_weights
        self._bm25 = Bm25.build(
            [bm25_fields(tool) for tool in catalog],
            k1=config.bm25_k1,
            b=config.bm25_b,
            field_weights={"name": name, "description": description, "params": params,
                           "server": server},
        )  # fmt: skip

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every tool (0: no query word in it)."""
        return self._bm25.scores(query)

    def ranks(self, score: float) -> bool:
        """Only tools that match a query word."""
        return score > 0.0

"""The text each tool is known by: what its embedding row encodes and what BM25 indexes."""

from __future__ import annotations

from collections.abc import Mapping

from toolgate.catalog.addressing import (
    addressing_sentences,
    described_text,
    description_sentences,
)
from toolgate.catalog.boilerplate import boilerplate
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.names import name_words
from toolgate.catalog.summary import derive_summary
from toolgate.catalog.tool import Tool

__all__ = [
    "TEXT_VERSION",
    "bm25_document",
    "bm25_documents",
    "embedding_text",
    "embedding_texts",
    "embedding_views",
    "humanize",
]

#: Version of what :func:`embedding_views` produces for a tool; bump it when that changes, so a
#: saved router's stored vectors (embedded from the old text) are not reused as if current.
#: 2: parameters' allowed values added. 3: sentences addressing the model left out, descriptions
#: cut (:func:`~toolgate.catalog.addressing.described_text`). 4: sentences that override other
#: tools or claim authority left out too. 5: HTML and Markdown marks left out, a heading is
#: not the summary (:mod:`~toolgate.catalog.markup`). 6: a server's boilerplate sentences left
#: out (:mod:`~toolgate.catalog.boilerplate`). 7: comparisons and names with "__" kept, a
#: preamble under a title or longer than a summary left out. 8: a line of one "#" before a
#: lower-case word ("# of items") is prose, not a heading. 9: boilerplate and addressing
#: sentences end where a summary's does (:mod:`~toolgate.catalog.sentences`: not at "e.g.").
#: 10: a word ending like an abbreviation ("movie.", "casino.") ends its sentence. 11: a
#: name's acronym ends before a capitalised word (``getVRGame`` -> ``get VR Game``,
#: :func:`~toolgate.catalog.names.name_words`). 12: a name splits at the capitals of any
#: script (``getÜbersicht`` -> ``get Übersicht``), as the BM25 analyser does.
TEXT_VERSION = 12


def humanize(name: str) -> str:
    """``get_issueComments`` -> ``get issue Comments``: names read as words to the encoder."""
    return " ".join(name_words(name, keep_case=True))


def embedding_text(
    tool: Tool, *, with_server: bool = True, shared: frozenset[str] = frozenset()
) -> str:
    """What the matrix row of ``tool`` embeds: server, name in words, summary, parameters.

    A summary that addresses the model, or is one of the server's ``shared`` boilerplate
    sentences, is taken from the rest of the description instead.

    Parameters (see :attr:`Tool.embedded_param_text`) say what a tool acts on, which its
    summary often leaves out. The server name tells servers apart, so it is left out of a
    single-server catalog, where it would be the same noise in every row. Measurements:
    docs/design.md, "What a tool's row embeds".
    """
    summary = tool.summary
    if addressing_sentences(summary) or _is_shared(summary, shared):
        summary = derive_summary(tool.name, described_text(tool.description, shared))
    text = f"{humanize(tool.name)}: {summary}"
    if with_server:
        text = f"{tool.server}: {text}"
    params = tool.embedded_param_text
    return f"{text} Parameters: {params}" if params else text


def _is_shared(summary: str, shared: frozenset[str]) -> bool:
    """Whether ``summary`` is one of the ``shared`` sentences, or one cut short: a preamble
    sentence longer than :data:`~toolgate.catalog.summary.SUMMARY_MAX_TOKENS` ends in "…"."""
    if any(sentence in shared for sentence in description_sentences(summary)):
        return True
    cut = summary.removesuffix("…")
    return cut != summary and any(" ".join(s.split()).startswith(cut) for s in shared)


def embedding_texts(
    catalog: Catalog, shared: Mapping[str, frozenset[str]] | None = None
) -> list[str]:
    """:func:`embedding_text` of every tool, with the server only if there are several;
    ``shared``: each server's :func:`~toolgate.catalog.boilerplate.boilerplate`, if the
    caller has it already."""
    with_server = len(catalog.servers) > 1
    shared = boilerplate(catalog) if shared is None else shared
    return [
        embedding_text(tool, with_server=with_server, shared=shared.get(tool.server, frozenset()))
        for tool in catalog
    ]


def embedding_views(catalog: Catalog) -> list[tuple[str, ...]]:
    """The texts whose embeddings are summed into each tool's row.

    Two views: :func:`embedding_text` (name, summary, parameters) and the description as
    :func:`~toolgate.catalog.addressing.described_text` keeps it, which says more than its
    first sentence; the row is their normalised sum. A tool without one has the first view
    only.
    """
    views: list[tuple[str, ...]] = []
    shared = boilerplate(catalog)
    for text, tool in zip(embedding_texts(catalog, shared), catalog, strict=True):
        described = described_text(tool.description, shared.get(tool.server, frozenset()))
        views.append((text, described) if described else (text,))
    return views


def bm25_document(tool: Tool, shared: frozenset[str] = frozenset()) -> dict[str, str]:
    """The fields BM25 indexes for ``tool``: its description as
    :func:`~toolgate.catalog.addressing.described_text` keeps it (without the server's
    ``shared`` boilerplate)."""
    return {
        "name": tool.name,
        "description": described_text(tool.description, shared),
        "param_text": tool.param_text,
        "server": tool.server,
    }


def bm25_documents(catalog: Catalog) -> list[dict[str, str]]:
    """:func:`bm25_document` of every tool, its server's boilerplate left out."""
    shared = boilerplate(catalog)
    return [bm25_document(tool, shared.get(tool.server, frozenset())) for tool in catalog]

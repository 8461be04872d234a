"""What routing needs of a catalog without loading it: ids in row order, pinned rows, the
version, and the few per-row facts (exposed names, slashed servers, addressing, schema tokens)
that a manifest records so that a router reopens without parsing the full catalog."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toolgate.catalog.addressing import addressing_sentences, described_text
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.keyword_lists import stuffed_keywords
from toolgate.catalog.text import TEXT_VERSION
from toolgate.catalog.tool import Tool
from toolgate.formats.tokens import count_text

__all__ = [
    "CatalogOutline",
    "TokenKey",
    "addressing_rows",
    "renamed_rows",
    "reusable_tokens",
    "schema_token_rows",
    "slashed_server_rows",
    "tool_schema_tokens",
]

#: What a tool's compact OpenAI definition is made of: its content and its exposed name.
TokenKey = tuple[str, str]


@dataclass(frozen=True)
class CatalogOutline:
    """What routing needs of a catalog: ids in row order, pinned rows, and the version.

    ``exposed`` lists the rows whose exposed name (what the model sees and repeats) differs
    from the tool's name, with that name, so a query that mentions it names the tool; None
    when a manifest written before it was recorded does not say.

    ``overrides_digest`` is the :func:`saved_overrides` digest of the catalog's load-time
    overrides as a manifest recorded it, checked when the saved catalog loads; None when the
    outline was not read from a manifest, or from one written before overrides were saved.

    ``slashed_servers`` lists the rows whose server holds a ``/`` (an npm scope,
    ``@org/server``), with that server, so that :meth:`names` can split every id exactly;
    None when a manifest written before it was recorded does not say.

    ``text_version`` is the :data:`~toolgate.catalog.text.TEXT_VERSION` of the texts the stored
    vectors were embedded from; None when a manifest written before it was recorded does not
    say, and then no stored vector is taken for current.

    ``file_digest`` is the sha256 of the saved catalog file as its manifest recorded it,
    checked when that file loads; None when the outline was not read from a manifest, or from
    one written before it was recorded.

    ``addressing`` lists the rows whose description or summary addresses the model
    (:func:`~toolgate.catalog.addressing.addressing_sentences`), which routing weighs down.

    ``schema_tokens`` holds each row's :func:`schema_token_rows` count, which adaptive
    selection weighs; None when a manifest written before it was recorded does not say.
    """

    ids: tuple[str, ...]
    pinned: tuple[int, ...]
    version: str
    exposed: tuple[tuple[int, str], ...] | None = ()
    overrides_digest: str | None = None
    slashed_servers: tuple[tuple[int, str], ...] | None = ()
    text_version: int | None = TEXT_VERSION
    file_digest: str | None = None
    addressing: tuple[int, ...] = ()
    schema_tokens: tuple[int, ...] | None = None

    @classmethod
    def of(cls, catalog: Catalog, *, reuse: Mapping[TokenKey, int] | None = None) -> CatalogOutline:
        """The outline of a loaded catalog; ``reuse`` as :func:`schema_token_rows`."""
        pinned = tuple(row for row, tool in enumerate(catalog) if tool.pinned)
        return cls(
            tuple(catalog.ids),
            pinned,
            catalog.version,
            renamed_rows(catalog),
            slashed_servers=slashed_server_rows(catalog),
            addressing=addressing_rows(catalog),
            schema_tokens=schema_token_rows(catalog, reuse),
        )

    def names(self) -> tuple[str, ...]:
        """Each row's tool name, as the catalog has it.

        An id is ``server/name`` and both parts may hold a ``/``; the rows whose server does
        are listed, every other id splits at its first ``/``. Without the list (None), that
        split can misread an id with two ``/``: ask the catalog instead.
        """
        slashed = dict(self.slashed_servers or ())
        return tuple(
            tool_id[len(slashed[row]) + 1 :] if row in slashed else tool_id.partition("/")[2]
            for row, tool_id in enumerate(self.ids)
        )


def addressing_rows(catalog: Catalog) -> tuple[int, ...]:
    """Rows of ``catalog`` whose description or summary addresses the model, or whose
    indexed description is keyword-stuffed (:mod:`toolgate.catalog.keyword_lists`)."""
    return tuple(
        row
        for row, tool in enumerate(catalog)
        if addressing_sentences(tool.description)
        or addressing_sentences(tool.summary)
        or stuffed_keywords(described_text(tool.description))
    )


def slashed_server_rows(catalog: Catalog) -> tuple[tuple[int, str], ...]:
    """Rows of ``catalog`` whose server holds a ``/``, with the server."""
    return tuple((row, tool.server) for row, tool in enumerate(catalog) if "/" in tool.server)


def renamed_rows(catalog: Catalog) -> tuple[tuple[int, str], ...]:
    """Rows of ``catalog`` whose exposed name differs from the tool name, with that name."""
    return tuple(
        (row, tool.exposed_name)
        for row, tool in enumerate(catalog)
        if tool.exposed_name != tool.name
    )


def _token_key(tool: Tool) -> TokenKey:
    return tool.fingerprint, tool.exposed_name


def tool_schema_tokens(tool: Tool) -> int:
    """``tool``'s tokens as a compact OpenAI definition (cl100k_base), counted without
    keeping that definition on the tool: a build counts every tool of the catalog."""
    return count_text(tool.definition_json("openai", compact=True, keep=False), "cl100k_base")


def schema_token_rows(
    catalog: Catalog, reuse: Mapping[TokenKey, int] | None = None
) -> tuple[int, ...]:
    """Each row's tokens as a compact OpenAI definition (cl100k_base), the measure of adaptive
    selection's ``floor_tokens``; a tool whose content and exposed name are keys of ``reuse``
    (:func:`reusable_tokens` of an older version) takes that count instead of a new one."""
    reuse = reuse or {}
    counts = []
    for tool in catalog:
        known = reuse.get(_token_key(tool))
        counts.append(tool_schema_tokens(tool) if known is None else known)
    return tuple(counts)


def reusable_tokens(catalog: Catalog, outline: CatalogOutline) -> dict[TokenKey, int]:
    """The schema token counts ``outline`` holds for ``catalog``'s tools, by what they were
    counted from (empty when the outline holds none), for :func:`schema_token_rows`."""
    if outline.schema_tokens is None:
        return {}
    return {
        _token_key(tool): count for tool, count in zip(catalog, outline.schema_tokens, strict=True)
    }

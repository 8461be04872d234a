"""A router's catalog in figures: its size, what it gates, and what sending every schema costs.

For ``toolgate stats`` and whoever sizes a deployment: the tokens of the full catalog, per
provider, are what routing saves a turn from sending.
"""

from __future__ import annotations

from typing import Any

from toolgate import _toolgate
from toolgate.catalog.catalog import Catalog
from toolgate.formats.tokens import count_tools
from toolgate.routing.state import FlagVocabulary

__all__ = ["catalog_stats"]

_PROVIDERS = ("openai", "anthropic", "gemini", "mcp")


def catalog_stats(
    catalog: Catalog, index: _toolgate.Index, vocabulary: FlagVocabulary, encoding: str
) -> dict[str, Any]:
    """The figures of ``catalog`` as indexed in ``index`` with ``vocabulary``'s flags; tokens
    counted with the tiktoken ``encoding``."""
    return {
        "tools": len(catalog),
        "servers": len(catalog.servers),
        "pinned": sum(1 for tool in catalog if tool.pinned),
        "gated_tools": sum(
            1
            for tool in catalog
            if tool.requires_scopes or tool.requires_tools or tool.requires_milestones
        ),
        "flags": len(vocabulary.keys),
        "index_dtype": index.dtype,
        "model_id": str(index.model_id),
        "catalog_version": catalog.version,
        "full_schema_tokens": {
            provider: count_tools(catalog.to_provider(provider), provider, encoding)
            for provider in _PROVIDERS
        },
    }

"""toolgate: per-turn tool routing for LLM agents.

Decide which few tools the model sees in full on each turn, and check it only calls those.

>>> from toolgate import Router
>>> router = Router.from_tools(tools)  # doctest: +SKIP
>>> router.route("open an issue about the crash", top_k=5).ids  # doctest: +SKIP

Everything but the extension and the exceptions loads on first use (ONNX Runtime, tiktoken,
jsonschema are heavy), so ``import toolgate`` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from toolgate._toolgate import GatedCandidate, Index, SearchResult, __version__
from toolgate.errors import (
    CatalogError,
    EncodingUnavailableError,
    IndexFormatError,
    InvalidInputError,
    ModelChecksumError,
    ModelError,
    ModelNotFoundError,
    ToolgateError,
)

if TYPE_CHECKING:
    from toolgate.budget import Budget
    from toolgate.catalog import (
        Catalog,
        CatalogDiff,
        CatalogWarning,
        InvalidToolsError,
        UnknownToolError,
    )
    from toolgate.config import DEFAULT, RouterConfig
    from toolgate.embed import Embedder
    from toolgate.embed_cache import CacheWarning
    from toolgate.gateway import ToolFilter
    from toolgate.promote import Promotion, promote_tools
    from toolgate.route_result import RouteResult
    from toolgate.router import Router
    from toolgate.state import State
    from toolgate.telemetry import Telemetry, UsageStats
    from toolgate.tool import Tool
    from toolgate.verify import Verdict, verify_call

# Public name -> the module that defines it, imported on first attribute access.
_LAZY = {
    "Budget": "toolgate.budget",
    "CacheWarning": "toolgate.embed_cache",
    "Catalog": "toolgate.catalog",
    "CatalogDiff": "toolgate.catalog",
    "CatalogWarning": "toolgate.catalog",
    "DEFAULT": "toolgate.config",
    "InvalidToolsError": "toolgate.catalog",
    "UnknownToolError": "toolgate.catalog",
    "Embedder": "toolgate.embed",
    "Promotion": "toolgate.promote",
    "RouteResult": "toolgate.route_result",
    "Router": "toolgate.router",
    "RouterConfig": "toolgate.config",
    "State": "toolgate.state",
    "Telemetry": "toolgate.telemetry",
    "Tool": "toolgate.tool",
    "ToolFilter": "toolgate.gateway",
    "UsageStats": "toolgate.telemetry",
    "Verdict": "toolgate.verify",
    "promote_tools": "toolgate.promote",
    "verify_call": "toolgate.verify",
}

__all__ = [
    "DEFAULT",
    "Budget",
    "CacheWarning",
    "Catalog",
    "CatalogDiff",
    "CatalogError",
    "CatalogWarning",
    "Embedder",
    "EncodingUnavailableError",
    "GatedCandidate",
    "Index",
    "IndexFormatError",
    "InvalidInputError",
    "InvalidToolsError",
    "ModelChecksumError",
    "ModelError",
    "ModelNotFoundError",
    "Promotion",
    "RouteResult",
    "Router",
    "RouterConfig",
    "SearchResult",
    "State",
    "Telemetry",
    "Tool",
    "ToolFilter",
    "ToolgateError",
    "UnknownToolError",
    "UsageStats",
    "Verdict",
    "__version__",
    "promote_tools",
    "verify_call",
]


def __getattr__(name: str) -> object:
    """Import the module behind a public name only when the name is first used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolgate' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value

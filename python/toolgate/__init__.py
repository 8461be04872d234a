"""toolgate: per-turn tool routing for LLM agents.

Decide which few tools the model sees in full on each turn, and check it only calls those.

>>> from toolgate import Router
>>> router = Router.from_tools(tools)  # doctest: +SKIP
>>> router.route("open an issue about the crash", top_k=5).ids  # doctest: +SKIP

Everything but the extension and the exceptions loads on first use (ONNX Runtime, tiktoken,
jsonschema are heavy), so ``import toolgate`` stays fast.
"""

import typing as _typing
from importlib import import_module as _import_module

from toolgate._toolgate import GatedCandidate, Index, SearchResult, __version__
from toolgate.errors import (
    CatalogError,
    CatalogWarning,
    EncodingUnavailableError,
    IndexFormatError,
    IndexIncompatibleError,
    InvalidInputError,
    InvalidToolsError,
    ModelChecksumError,
    ModelError,
    ModelNotFoundError,
    StorageError,
    ToolgateError,
    UnknownToolError,
)
from toolgate.forks import refuse_copies as _refuse_copies

if _typing.TYPE_CHECKING:
    from toolgate.catalog.catalog import Catalog, CatalogDiff
    from toolgate.catalog.tool import Tool
    from toolgate.embedding.cache import CacheWarning
    from toolgate.embedding.embedder import Embedder
    from toolgate.gateway.filter import ToolFilter
    from toolgate.gateway.filtered import FilteredRequest
    from toolgate.promotion.budget import Budget, BudgetDecision
    from toolgate.promotion.promote import Promotion, promote_tools
    from toolgate.routing.config import DEFAULT, RouterConfig
    from toolgate.routing.near_duplicates import DuplicateGroup
    from toolgate.routing.result import GatedOut, RoutedTool, RouteResult
    from toolgate.routing.router import Router
    from toolgate.routing.state import State
    from toolgate.telemetry.recorder import Telemetry
    from toolgate.telemetry.usage import UsageStats
    from toolgate.verify import Verdict, verify_call

# Public name -> the module that defines it, imported on first attribute access.
# An index maps its file into this process: another process opens the file itself.
_refuse_copies(Index, lambda index: f"open it there with Index.open({str(index.path)!r})")

_LAZY = {
    "Budget": "toolgate.promotion.budget",
    "BudgetDecision": "toolgate.promotion.budget",
    "CacheWarning": "toolgate.embedding.cache",
    "Catalog": "toolgate.catalog.catalog",
    "CatalogDiff": "toolgate.catalog.catalog",
    "DEFAULT": "toolgate.routing.config",
    "DuplicateGroup": "toolgate.routing.near_duplicates",
    "Embedder": "toolgate.embedding.embedder",
    "FilteredRequest": "toolgate.gateway.filtered",
    "GatedOut": "toolgate.routing.result",
    "Promotion": "toolgate.promotion.promote",
    "RouteResult": "toolgate.routing.result",
    "RoutedTool": "toolgate.routing.result",
    "Router": "toolgate.routing.router",
    "RouterConfig": "toolgate.routing.config",
    "State": "toolgate.routing.state",
    "Telemetry": "toolgate.telemetry.recorder",
    "Tool": "toolgate.catalog.tool",
    "ToolFilter": "toolgate.gateway.filter",
    "UsageStats": "toolgate.telemetry.usage",
    "Verdict": "toolgate.verify",
    "promote_tools": "toolgate.promotion.promote",
    "verify_call": "toolgate.verify",
}

__all__ = [
    "DEFAULT",
    "Budget",
    "BudgetDecision",
    "CacheWarning",
    "Catalog",
    "CatalogDiff",
    "CatalogError",
    "CatalogWarning",
    "DuplicateGroup",
    "Embedder",
    "EncodingUnavailableError",
    "FilteredRequest",
    "GatedCandidate",
    "GatedOut",
    "Index",
    "IndexFormatError",
    "IndexIncompatibleError",
    "InvalidInputError",
    "InvalidToolsError",
    "ModelChecksumError",
    "ModelError",
    "ModelNotFoundError",
    "Promotion",
    "RouteResult",
    "RoutedTool",
    "Router",
    "RouterConfig",
    "SearchResult",
    "State",
    "StorageError",
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


# Hidden from type checkers, which read a module __getattr__ as "any other name exists": they
# see the names above instead, and a misspelt one stays an error there as it is here.
if not _typing.TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """Import the module behind a public name only when the name is first used."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'toolgate' has no attribute {name!r}")
        value = getattr(_import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public names, loaded or not, for completion in editors and REPLs."""
    return sorted(__all__)

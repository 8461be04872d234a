"""toolgate: per-turn tool routing for LLM agents.

Decide which few tools the model sees in full on each turn, and check it only calls those.
Heavy dependencies (ONNX Runtime, tiktoken) load on first use, so ``import toolgate`` is fast.
"""

from __future__ import annotations

from toolgate._toolgate import __version__
from toolgate.errors import (
    CatalogError,
    IndexFormatError,
    InvalidInputError,
    ModelChecksumError,
    ModelError,
    ModelNotFoundError,
    ToolgateError,
)

__all__ = [
    "CatalogError",
    "IndexFormatError",
    "InvalidInputError",
    "ModelChecksumError",
    "ModelError",
    "ModelNotFoundError",
    "ToolgateError",
    "__version__",
]

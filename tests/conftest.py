"""Fixtures shared across test modules."""

from __future__ import annotations

import pytest

from toolgate.embedding.embedder import Embedder


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The bundled int8 model, loaded once for every module that does not load its own."""
    return Embedder(precision="int8")

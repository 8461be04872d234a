"""Fixtures shared across test modules."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolgate.embedding.embedder import Embedder


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The bundled int8 model, loaded once for every module that does not load its own."""
    return Embedder(precision="int8")


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most systems give users (022: new files readable by all), for the test."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def file_mode(path: Path) -> str:
    """``path``'s permissions as ``ls`` shows them (``-rw-------``)."""
    return stat.filemode(path.stat().st_mode)

"""Fixtures shared across test modules."""

from __future__ import annotations

import os
import shutil
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


def without_root_override(command: list[str]) -> list[str]:
    """``command`` run without root's power to ignore file permissions (``CAP_DAC_OVERRIDE``,
    ``CAP_DAC_READ_SEARCH``) when this process is root, as CI's is: a test of a file this
    user may not read or write then runs there instead of being skipped. Skips where ``setpriv``
    (util-linux) is missing."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("root ignores file permissions, and setpriv is missing to drop that")
    drop = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", "--", *command]

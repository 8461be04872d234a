"""Fixtures shared across test modules."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
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
    (util-linux) is missing, or cannot drop it (a root without ``CAP_SETPCAP``)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("root ignores file permissions, and setpriv is missing to drop that")
    if not _drops_override():
        pytest.skip("root ignores file permissions, and setpriv cannot drop that (no CAP_SETPCAP)")
    return [*_WITHOUT_OVERRIDE, *command]


_DROP = "-dac_override,-dac_read_search"
_WITHOUT_OVERRIDE = ["setpriv", f"--inh-caps={_DROP}", f"--bounding-set={_DROP}", "--"]


@functools.cache
def _drops_override() -> bool:
    """Whether :data:`_WITHOUT_OVERRIDE` takes root's override away here: without
    ``CAP_SETPCAP`` setpriv leaves the bounding set whole and exits 0 all the same."""
    run = subprocess.run(
        [*_WITHOUT_OVERRIDE, "cat", "/proc/self/status"], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    effective = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("CapEff:")]
    # CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH are bits 1 and 2.
    return run.returncode == 0 and len(effective) == 1 and int(effective[0], 16) & 0b110 == 0

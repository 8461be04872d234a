"""The conftest helper that makes root heed file permissions in a test's child process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]

# Asks the helper for a command printing the capabilities it runs with: "skipped" if the
# helper skipped, else the hex mask of the effective ones.
_EFFECTIVE = """
import subprocess, pytest
from tests.conftest import without_root_override

try:
    command = without_root_override(["grep", "CapEff", "/proc/self/status"])
except pytest.skip.Exception:
    print("skipped")
else:
    print(subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()[1])
"""
# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, bits 1 and 2.
_OVERRIDES = 0b110


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="root's override is dropped with setpriv, as root",
)
def test_root_without_setpcap_skips_rather_than_keep_its_override() -> None:
    # setpriv cannot shrink the bounding set without CAP_SETPCAP (a hardened container's
    # root), and says nothing: the child kept root's override, and each test built on it
    # failed an assertion about a refusal that could never come.
    drop = "-setpcap"
    run = subprocess.run(
        ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", "--",
         sys.executable, "-c", _EFFECTIVE],
        capture_output=True, text=True, timeout=60, check=True, cwd=REPO,
    )  # fmt: skip
    said = run.stdout.strip()
    assert said == "skipped" or int(said, 16) & _OVERRIDES == 0, said


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="root's override is dropped with setpriv, as root",
)
def test_root_with_setpcap_runs_the_command_without_its_override() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _EFFECTIVE], capture_output=True, text=True, timeout=60,
        check=True, cwd=REPO,
    )  # fmt: skip
    said = run.stdout.strip()
    if said == "skipped":
        pytest.skip("this root has no CAP_SETPCAP")
    assert int(said, 16) & _OVERRIDES == 0

"""Bounded fuzz campaigns over the file readers, each in a child process.

A child that dies (SIGBUS, abort) fails the test naming the case it was on; an exception
outside ``ToolgateError`` or a case slower than 5 s fails it listing every such case. The seed
is fixed, so a run is repeatable; ``TOOLGATE_FUZZ_SCALE`` multiplies the number of bit flips
for a longer campaign by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCALE = int(os.environ.get("TOOLGATE_FUZZ_SCALE", "1"))


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory where there is one: the campaigns write a file per case, which
    costs milliseconds on a disk and microseconds on tmpfs."""
    memory = Path("/dev/shm")
    if not (memory.is_dir() and os.access(memory, os.W_OK)):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="toolgate-fuzz-", dir=memory))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_campaign(name: str, directory: Path, flips: int, seed: int = 20) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.file_worker", name, str(directory), str(seed),
         str(flips * SCALE)],
        cwd=ROOT, capture_output=True, text=True, timeout=300 * SCALE,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        last = next((line for line in reversed(lines) if line.startswith("case ")), "no case")
        pytest.fail(
            f"the {name} campaign died with {done.returncode} at {last!r}:\n{done.stderr[-3000:]}"
        )
    summary: dict[str, object] = json.loads(lines[-1])
    print(f"{name}: {summary['cases']} cases, outcomes {summary['outcomes']}")
    assert summary["findings"] == [], "\n".join(map(str, summary["findings"]))
    return summary


@pytest.mark.parametrize(
    ("name", "flips", "least"), [("matrix", 600, 10_000), ("bm25", 1500, 3_000)]
)
def test_mutated_index_files_are_refused_or_read(
    scratch: Path, name: str, flips: int, least: int
) -> None:
    summary = run_campaign(name, scratch, flips)
    assert int(summary["cases"]) >= least  # type: ignore[call-overload]


def test_mutated_router_directories_are_refused_or_read(scratch: Path) -> None:
    summary = run_campaign("router", scratch, 300)
    assert int(summary["cases"]) >= 2_000  # type: ignore[call-overload]

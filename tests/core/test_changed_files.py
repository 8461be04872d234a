"""Files changed under a live index, and arguments no conversion takes: errors, never a crash.

Each case that could crash runs in a child process, so a SIGBUS fails the test instead of
killing the run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from toolgate import Index, IndexFormatError, InvalidInputError, StorageError, ToolgateError
from toolgate._toolgate import Bm25

CHILD = """
import os, sys
import numpy as np
from toolgate import Index, IndexFormatError
path = sys.argv[1]
index = Index.open(path)
query = np.ones(index.dim, np.float32)
index.search(query, 3)
{change}
try:
    index.search(query, 3)
except IndexFormatError as exc:
    print("refused:", exc)
"""


def _run_child(path: Path, change: str) -> subprocess.CompletedProcess[str]:
    code = CHILD.format(change=textwrap.dedent(change))
    return subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def index_path(tmp_path: Path) -> Path:
    path = tmp_path / "m.tgm"
    vectors = np.random.default_rng(0).standard_normal((20_000, 64)).astype(np.float32)
    Index.build(path, vectors, dtype="int8")
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # What `cp new.tgm live.tgm` does first: truncate the mapped file.
        ("os.truncate(path, 0)", "cut or grown in place from"),
        ("os.truncate(path, os.path.getsize(path) // 2)", "cut or grown in place"),
        # A same-size rewrite: no fault, but other rows under the old header.
        (
            "import time; time.sleep(0.02); data = bytearray(open(path, 'rb').read()); "
            "data[-1] ^= 1; open(path, 'r+b').write(data)",
            "rewritten in place",
        ),
    ],
)
def test_an_index_changed_in_place_is_refused_not_a_crash(
    index_path: Path, change: str, message: str
) -> None:
    done = _run_child(index_path, change)
    assert done.returncode == 0, f"child died with {done.returncode}: {done.stderr[-2000:]}"
    assert "refused:" in done.stdout, done.stdout + done.stderr
    assert message in done.stdout


def test_an_index_replaced_by_rename_keeps_serving_the_open_one(index_path: Path) -> None:
    change = """
    import numpy as np
    Index.build(path, np.eye(8, 64, dtype=np.float32))  # atomic: a new inode
    rows, _ = index.search(query, 3)
    print("served", len(rows), Index.open(path).dim)
    """
    done = _run_child(index_path, change)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "served 3 64" in done.stdout, done.stdout
    assert "refused" not in done.stdout


def test_special_files_and_missing_paths_are_toolgate_errors(tmp_path: Path) -> None:
    for opener in (Index.open, Bm25.load):
        with pytest.raises(IndexFormatError, match="not a regular file"):
            opener(tmp_path)
        with pytest.raises(IndexFormatError, match="not a regular file"):
            opener("/dev/zero")  # was read until memory ran out
        with pytest.raises(StorageError, match="No such file") as raised:
            opener(tmp_path / "absent")
        assert isinstance(raised.value, OSError)
        assert isinstance(raised.value, ToolgateError)
        assert raised.value.filename == str(tmp_path / "absent")
        assert isinstance(raised.value, FileNotFoundError) is False  # one class, errno kept
        assert raised.value.errno == 2


def test_arguments_no_conversion_takes_are_invalid_input(tmp_path: Path) -> None:
    vectors = np.eye(4, dtype=np.float32)
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        Index.build(tmp_path / "a.tgm", vectors, model_id="\ud800")
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        Index.build(tmp_path / "\ud800.tgm", vectors)
    index = Index.build(tmp_path / "b.tgm", vectors)
    query = np.ones(4, np.float32)
    rows, _ = index.search(query, k=2**70)  # a k past 64 bits is just "all"
    assert len(rows) == 4
    with pytest.raises(InvalidInputError, match="k must be a positive integer"):
        index.search(query, k=-(2**70))
    with pytest.raises(InvalidInputError, match="expected an integer"):
        index.search(query, k="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="threads must be a positive integer"):
        Index.open(tmp_path / "b.tgm", threads=-(2**80))

"""Temporary folders: one kept for its caller to remove, one removed on leaving its block."""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path

import pytest

from toolgate.errors import StorageError
from toolgate.temporary_folders import new_temporary_folder, scratch_folder


@pytest.fixture
def no_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only root file system with no /tmp mounted: every candidate is a file."""
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path / "a-file")])


def test_a_new_temporary_folder_is_the_users_own_and_kept(tmp_path: Path) -> None:
    folder = new_temporary_folder("toolgate-test-")
    try:
        assert folder.is_dir()
        assert folder.name.startswith("toolgate-test-")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        folder.rmdir()


def _fill_and_fail(folder: Path) -> None:
    (folder / "sub").mkdir()
    (folder / "sub" / "file").write_text("x")
    raise RuntimeError("inside")


def test_a_scratch_folder_is_removed_with_its_files_on_leaving() -> None:
    with scratch_folder("toolgate-test-") as folder:
        (folder / "file").write_text("x")
    assert not folder.exists()
    # On an error inside too.
    with pytest.raises(RuntimeError, match="inside"), scratch_folder("toolgate-test-") as folder:
        _fill_and_fail(folder)
    assert not folder.exists()


@pytest.mark.usefixtures("no_temporary_folder")
def test_no_temporary_folder_is_a_storage_error_naming_the_variables() -> None:
    with pytest.raises(StorageError, match=r"set TMPDIR \(or OTHER_DIR\) to a folder"):
        new_temporary_folder("toolgate-test-", or_set="OTHER_DIR")
    scratch = scratch_folder("toolgate-test-")
    with pytest.raises(StorageError, match="set TMPDIR to a folder this user can write"):
        scratch.__enter__()

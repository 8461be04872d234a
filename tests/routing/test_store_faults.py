"""Saving a router when the disk fails: the error names the file, and the router saved there
before survives."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from toolgate import StorageError
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.routing.router import Router

TOOLS = {
    "weather": {
        "tools": [
            {"name": "get_forecast", "description": "Weather forecast for a city."},
            {"name": "get_alerts", "description": "Storm and heat alerts for a region."},
        ]
    },
}


@pytest.fixture(scope="module")
def router(embedder: Embedder) -> Router:
    return Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, cache=None)


def _disk_full(*_: object) -> None:
    # As a full disk's write or fsync fails: an OSError that names no file.
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_names_the_file_being_saved(
    router: Router, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", _disk_full)
    with pytest.raises(StorageError) as raised:
        router.save(tmp_path / "r")
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename is not None
    assert Path(raised.value.filename).parent == tmp_path / "r"
    assert str(tmp_path / "r") in str(raised.value)


def test_a_directory_in_a_files_place_is_named_not_the_temporary_file(
    router: Router, tmp_path: Path
) -> None:
    (tmp_path / "matrix.tgm").mkdir()
    with pytest.raises(StorageError) as raised:
        router.save(tmp_path)
    assert raised.value.errno == errno.EISDIR
    assert raised.value.filename == str(tmp_path / "matrix.tgm")


def test_a_temporary_file_that_cannot_be_made_is_named_by_its_target(
    router: Router, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def read_only(path: str | os.PathLike[str], flags: int, *args: object) -> int:
        if flags & os.O_CREAT:  # as on a read-only file system: the path named as given
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(StorageError) as raised:
        router.save(tmp_path)
    assert raised.value.errno == errno.EROFS
    assert raised.value.filename == str(tmp_path / "matrix.tgm")

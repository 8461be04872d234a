"""Saving a router when the disk fails: the error names the file, and the router saved there
before survives."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from toolgate import IndexFormatError, StorageError
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.routing import atomic_files, store
from toolgate.routing.router import Router
from toolgate.routing.store import CATALOG, MANIFEST

TOOLS = {
    "weather": {
        "tools": [
            {"name": "get_forecast", "description": "Weather forecast for a city."},
            {"name": "get_alerts", "description": "Storm and heat alerts for a region."},
        ]
    },
}


MAIL = {
    "mail": {
        "tools": [
            {"name": "send_email", "description": "Send an email to a recipient."},
            {"name": "list_inbox", "description": "List the messages in the inbox."},
            {"name": "delete_email", "description": "Delete an email from the inbox."},
        ]
    },
}


@pytest.fixture(scope="module")
def router(embedder: Embedder) -> Router:
    return Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, cache=None)


def _full_disk_at(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make creating the temporary file of ``name`` (the save's, or the core's beside it)
    fail as a full disk does."""
    real_open = os.open

    def full(path: str | os.PathLike[str], flags: int, *args: object) -> int:
        if flags & os.O_CREAT and Path(path).name.startswith(f".{name}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", full)


def _fail_at(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name != "bm25.tgb":
        _full_disk_at(name, monkeypatch)
        return
    # The core writes the BM25 file itself, out of os.open's reach: reading it back to
    # fingerprint it fails instead.
    real_fingerprint = store.fingerprint

    def unreadable(path: Path) -> str:
        if path.name.startswith(".bm25.tgb."):
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real_fingerprint(path)

    monkeypatch.setattr(store, "fingerprint", unreadable)


def _saves(embedder: Embedder) -> dict[str, Callable[[Path], object]]:
    """The two ways to write a router over a directory: save one, or build one there."""
    mail = Catalog.load(MAIL)
    built = Router.from_catalog(mail, embedder=embedder, cache=None)
    return {
        "save": built.save,
        "build": lambda path: Router.from_catalog(mail, embedder=embedder, cache=None, path=path),
    }


# A build's matrix is the core's to write, out of os.open's reach: its other files fail.
@pytest.mark.parametrize(
    ("how", "name"),
    [("save", "matrix.tgm")]
    + [(how, name) for how in ("save", "build") for name in ("bm25.tgb", CATALOG, MANIFEST)],
)
def test_a_save_that_fails_leaves_the_router_saved_before_whole(
    router: Router,
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    how: str,
) -> None:
    router.save(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    save = _saves(embedder)[how]
    _fail_at(name, monkeypatch)
    with pytest.raises(StorageError):
        save(tmp_path)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    reopened = Router.open(tmp_path, embedder=embedder)
    assert {t.id for t in reopened.route("weather in Oslo").tools} <= {t.id for t in router.catalog}
    assert len(reopened.catalog) == len(router.catalog)


@pytest.mark.parametrize("how", ["save", "build"])
def test_a_save_over_a_router_replaces_it_whole(
    router: Router, embedder: Embedder, tmp_path: Path, how: str
) -> None:
    router.save(tmp_path)
    _saves(embedder)[how](tmp_path)
    reopened = Router.open(tmp_path, embedder=embedder)
    assert [t.id for t in reopened.catalog] == [t.id for t in Catalog.load(MAIL)]
    assert reopened.route("send an email").tools[0].id == "mail/send_email"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(store.ROUTER_FILES)


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

    def unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        # A read-only file system refuses to remove even a file that is not there.
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

    monkeypatch.setattr(os, "open", read_only)
    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(StorageError) as raised:
        router.save(tmp_path)
    assert raised.value.errno == errno.EROFS
    assert raised.value.filename == str(tmp_path / "matrix.tgm")


def test_a_matrix_the_core_cannot_build_is_named_by_its_target(
    embedder: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A folder where the build's temporary matrix goes: the core's rename onto it fails.
    monkeypatch.setattr(
        atomic_files, "temporary_name", lambda path: path.with_name(f".{path.name}.x.tmp")
    )
    (tmp_path / ".matrix.tgm.x.tmp" / "in-the-way").mkdir(parents=True)
    with pytest.raises(StorageError) as raised:
        Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, cache=None, path=tmp_path)
    assert raised.value.filename == str(tmp_path / "matrix.tgm")


def test_a_link_to_no_folder_is_named_as_such(router: Router, tmp_path: Path) -> None:
    (tmp_path / "live").symlink_to(tmp_path / "gone")
    with pytest.raises(StorageError, match="symbolic link to a folder that does not exist"):
        router.save(tmp_path / "live")
    assert not (tmp_path / "gone").exists()


def test_a_save_removes_what_saves_killed_long_ago_left(router: Router, tmp_path: Path) -> None:
    router.save(tmp_path)
    # A killed save's temporary files (its own, and the core's beside one), and one of a
    # save that may still be running.
    stale = [
        tmp_path / f".matrix.tgm.{'0' * 32}.tmp",
        tmp_path / f"..bm25.tgb.{'1' * 32}.tmp.tmp-7-0",
    ]
    # Left while the clock read a year ahead (set right since): kept for a year as fresh.
    ahead = tmp_path / f".router.json.{'3' * 32}.tmp"
    fresh = tmp_path / f".catalog.json.{'2' * 32}.tmp"
    for path in [*stale, ahead, fresh]:
        path.write_bytes(b"part of a save")
    long_ago, year_on = time.time() - 2 * 24 * 3600, time.time() + 365 * 24 * 3600
    for path in stale:
        os.utime(path, (long_ago, long_ago))
    os.utime(ahead, (year_on, year_on))
    router.save(tmp_path)
    assert not any(path.exists() for path in [*stale, ahead])
    assert fresh.exists()


def test_a_save_removes_only_the_names_saves_give(router: Router, tmp_path: Path) -> None:
    # A day-old hidden file of the user's beside the router, named like a temporary one but
    # not as any save names it, is theirs: a template, a backup.
    router.save(tmp_path)
    theirs = [
        tmp_path / ".catalog.json.tmpl",
        tmp_path / ".router.json.tmp.bak",
        tmp_path / ".catalog.json.backup.tmp",
    ]
    killed = [
        tmp_path / f".router.json.{'a' * 32}.tmp",
        tmp_path / ".catalog.json.k2x_9qwe.tmp",  # mkstemp's, as saves once named them
        tmp_path / ".matrix.tgm.tmp-41-3",  # the core's, beside the file it wrote
    ]
    long_ago = time.time() - 2 * 24 * 3600
    for path in [*theirs, *killed]:
        path.write_bytes(b"a file")
        os.utime(path, (long_ago, long_ago))
    router.save(tmp_path)
    assert [path.name for path in theirs if not path.exists()] == []
    assert [path.name for path in killed if path.exists()] == []


def test_a_router_whose_matrix_was_replaced_is_not_saved_with_another(
    embedder: Embedder, tmp_path: Path
) -> None:
    # A long-running process keeps a router opened from a folder that a rebuild then
    # replaced: its matrix is no longer the file at that path, so a save of it must not pair
    # its tool ids with the rebuild's rows (it reopened and routed by the wrong vectors).
    live = tmp_path / "live"
    Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, cache=None, path=live)
    opened = Router.open(live, embedder=embedder)
    assert len(opened.catalog) == 2  # loaded, as such a process has it
    Router.from_catalog(Catalog.load(MAIL), embedder=embedder, cache=None, path=live)
    for target in (live, tmp_path / "elsewhere"):
        with pytest.raises(IndexFormatError, match="replaced since this router opened it"):
            opened.save(target)
    rebuilt = Router.open(live, embedder=embedder)
    assert [t.id for t in rebuilt.catalog] == [t.id for t in Catalog.load(MAIL)]
    assert not (tmp_path / "elsewhere" / MANIFEST).exists()


def test_no_temporary_folder_to_index_in_is_a_storage_error_naming_tmpdir(
    embedder: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container with a read-only root file system and no /tmp mounted: building a router
    without a path raised tempfile's FileNotFoundError, outside toolgate's errors."""
    import tempfile

    # Every candidate unusable, as there: a file where the temporary folder should be.
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path / "a-file")])
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(StorageError, match="set TMPDIR to a folder this user can write"):
        Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, cache=None)
    router = Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, path=tmp_path / "r")
    assert router.route("storm warning").ids[0] == "weather/get_alerts"

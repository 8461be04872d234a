"""The folder of saved routers a ToolFilter's processes share: bounded to the most recently
used, never deleting a router a process uses."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.test_filter import chat_request, chat_tools
from toolgate import IndexFormatError, IndexIncompatibleError, InvalidInputError, StorageError
from toolgate.embedding.embedder import Embedder
from toolgate.gateway import indexes, router_store
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import load_config
from toolgate.gateway.filter import ToolFilter
from toolgate.gateway.router_store import RouterStore, StoredRouter, default_max_stored
from toolgate.routing.manifest import FORMAT_VERSION
from toolgate.routing.router import Router
from toolgate.routing.store import MANIFEST


def _name(n: int) -> str:
    return hashlib.sha1(str(n).encode()).hexdigest()


def _build(folder: Path) -> None:
    (folder / MANIFEST).write_text("{}")


# The embedding model the stand-in routers are built with.
_MODEL = "test-model"


def _open(store: RouterStore, n: int) -> StoredRouter:
    """Router ``n`` of ``store`` (a stand-in: its directory), built if missing."""
    return store.router(_name(n), _build, lambda directory: directory, model_id=_MODEL)  # type: ignore[arg-type,return-value]


def _routers(root: Path) -> set[str]:
    return {entry.name for entry in root.iterdir() if not entry.name.startswith(".")}


def _locks(root: Path) -> set[str]:
    return {entry.name for entry in root.iterdir() if entry.name.endswith(".lock")}


def _used_at(root: Path, n: int, seconds_ago: float) -> None:
    at = time.time() - seconds_ago
    os.utime(root / _name(n), (at, at))


def test_the_least_recently_used_routers_past_the_bound_are_deleted(tmp_path: Path) -> None:
    store = RouterStore(tmp_path, max_stored=2)
    for n in range(3):
        _open(store, n).release()
        _used_at(tmp_path, n, seconds_ago=100.0 - n)
    _open(store, 0).release()  # used again: the most recent now
    _open(store, 3).release()
    assert _routers(tmp_path) == {_name(0), _name(3)}
    assert _locks(tmp_path) == {f".{_name(0)}.lock", f".{_name(3)}.lock"}


def test_routers_used_while_the_clock_read_far_ahead_go_first(tmp_path: Path) -> None:
    # Used while the clock read a year ahead (set right since): ranked by that time they
    # stayed the most recent for a year, and with max_stored of them every router used
    # since was deleted as soon as it was let go.
    store = RouterStore(tmp_path, max_stored=2)
    for n in range(2):
        _open(store, n).release()
        _used_at(tmp_path, n, seconds_ago=-365 * 86_400.0)
    _open(store, 2).release()
    _open(store, 3).release()
    assert _routers(tmp_path) == {_name(2), _name(3)}


def test_a_router_a_process_holds_or_builds_is_not_deleted(tmp_path: Path) -> None:
    store = RouterStore(tmp_path, max_stored=1)
    held = _open(store, 0)  # this process routes with it
    _open(store, 1).release()
    with open(tmp_path / f".{_name(1)}.lock", "rb") as other:  # another process reads it
        fcntl.flock(other, fcntl.LOCK_SH)
        _open(store, 2).release()
        assert _routers(tmp_path) == {_name(0), _name(1), _name(2)}
    held.release()
    _open(store, 3).release()
    assert _routers(tmp_path) == {_name(3)}


def test_a_lock_left_without_its_router_and_a_half_deleted_router_go(tmp_path: Path) -> None:
    store = RouterStore(tmp_path, max_stored=4)
    (tmp_path / f".{_name(7)}.lock").touch()  # a build that failed
    (tmp_path / ".prune-leftover").mkdir()  # a prune cut short
    (tmp_path / ".prune-leftover" / MANIFEST).write_text("{}")
    _open(store, 0).release()
    assert set(os.listdir(tmp_path)) == {_name(0), f".{_name(0)}.lock"}


def test_a_build_left_by_a_crash_goes_but_not_one_under_way(tmp_path: Path) -> None:
    store = RouterStore(tmp_path, max_stored=4)
    for n in (7, 8):
        (tmp_path / f".build-{_name(n)}-x1y2z3").mkdir()  # a process killed while indexing
        (tmp_path / f".build-{_name(n)}-x1y2z3" / "index.bin").write_bytes(b"half")
    with open(tmp_path / f".{_name(8)}.lock", "a+b") as other:  # another process builds 8
        fcntl.flock(other, fcntl.LOCK_EX)
        _open(store, 0).release()
        assert set(os.listdir(tmp_path)) == {
            _name(0), f".{_name(0)}.lock", f".build-{_name(8)}-x1y2z3", f".{_name(8)}.lock"
        }  # fmt: skip


def test_a_router_is_built_in_a_folder_named_for_it(tmp_path: Path) -> None:
    store = RouterStore(tmp_path, max_stored=4)
    folders: list[str] = []

    def build(folder: Path) -> None:
        folders.append(folder.name)
        _build(folder)

    store.router(_name(0), build, lambda directory: directory, model_id=_MODEL).release()  # type: ignore[arg-type,return-value]
    assert folders[0].startswith(f".build-{_name(0)}-")


def test_without_flock_a_router_another_process_built_meanwhile_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where there is no flock (Windows) nothing keeps two workers from building one router
    at once: the second one's rename onto the first one's directory was an OSError ("Directory
    not empty"; on Windows "Access is denied"), failing its request."""
    monkeypatch.setattr(router_store, "fcntl", None)
    store = RouterStore(tmp_path, max_stored=4)
    theirs = tmp_path / _name(0)

    def build_beaten(folder: Path) -> None:
        theirs.mkdir()  # the other worker, done first
        _build(theirs)
        _build(folder)

    stored = store.router(_name(0), build_beaten, lambda d: d, model_id=_MODEL)  # type: ignore[arg-type]
    assert stored.router == theirs  # type: ignore[comparison-overlap]
    assert sorted(entry.name for entry in tmp_path.iterdir()) == [f".{_name(0)}.lock", _name(0)]
    stored.release()


def test_a_failed_open_releases_the_router(tmp_path: Path) -> None:
    store = RouterStore(tmp_path, max_stored=1)

    def broken(directory: Path) -> Any:
        raise OSError(f"{directory}: cannot read")

    with pytest.raises(OSError, match="cannot read"):
        store.router(_name(0), _build, broken, model_id=_MODEL)
    _open(store, 1).release()
    assert _routers(tmp_path) == {_name(1)}


def test_a_damaged_router_is_set_aside_and_built_again(
    embedder: Embedder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(_request(0), top_k=1)
    (name,) = _routers(tmp_path)
    matrix = tmp_path / name / "matrix.tgm"
    with open(matrix, "r+b") as file:  # cut short, as a full disk may leave it
        file.truncate(matrix.stat().st_size // 2)
    with caplog.at_level(logging.WARNING, logger="toolgate.gateway"):
        filtered = ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(
            _request(0), top_k=1
        )
    assert filtered.kept == ("get_weather",)
    assert _routers(tmp_path) == {name}
    assert not [entry for entry in os.listdir(tmp_path) if entry.startswith(".prune-")]
    (warning,) = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert str(tmp_path / name) in warning
    assert "matrix.tgm" in warning


def test_a_router_that_does_not_open_once_built_again_fails(tmp_path: Path) -> None:
    store = RouterStore(tmp_path, max_stored=4)
    _open(store, 0).release()
    opens: list[Path] = []

    def unreadable(directory: Path) -> Any:
        opens.append(directory)
        raise IndexFormatError(f"{directory}: unreadable")

    with pytest.raises(IndexFormatError, match="unreadable"):
        store.router(_name(0), _build, unreadable, model_id=_MODEL)
    assert len(opens) == 2  # the damaged one, then the one built in its place
    reopened = _open(store, 0)  # the lock was let go
    assert reopened.router == tmp_path / _name(0)
    reopened.release()


def test_a_damaged_router_another_process_holds_is_not_set_aside(tmp_path: Path) -> None:
    store = RouterStore(tmp_path, max_stored=4)
    _open(store, 0).release()

    def unreadable(directory: Path) -> Any:
        raise IndexFormatError(f"{directory}: unreadable")

    with open(tmp_path / f".{_name(0)}.lock", "rb") as other:  # another process reads it
        fcntl.flock(other, fcntl.LOCK_SH)
        with pytest.raises(IndexFormatError, match="unreadable"):
            store.router(_name(0), _build, unreadable, model_id=_MODEL)
        assert _routers(tmp_path) == {_name(0)}


def test_a_store_this_process_may_not_write_still_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RouterStore(tmp_path, max_stored=1)
    _open(store, 0).release()

    def read_only(path: Path, *, shared: bool) -> Any:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(router_store, "_locked", read_only)
    assert _open(store, 0).router == tmp_path / _name(0)
    with pytest.raises(PermissionError):
        _open(store, 1)


def test_a_store_is_made_and_written_to_before_use(tmp_path: Path) -> None:
    RouterStore(tmp_path / "new" / "store", max_stored=1).check(_MODEL)
    assert list((tmp_path / "new" / "store").iterdir()) == []  # the probe is gone
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        InvalidInputError, match=f"router store {tmp_path / 'file'}: exists and is not a folder"
    ):
        RouterStore(tmp_path / "file", max_stored=1).check(_MODEL)


def _no_new_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on no file can be made: the store is mounted read-only."""
    real_open = os.open

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)


def test_a_read_only_store_is_refused_unless_it_holds_routers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = RouterStore(tmp_path, max_stored=1)
    with monkeypatch.context() as patch:
        _no_new_files(patch)
        with pytest.raises(InvalidInputError, match=f"router store {tmp_path}: cannot write"):
            store.check(_MODEL)
    _open(store, 0).release()  # a store shipped read-only with its routers still serves
    _no_new_files(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="toolgate.gateway"):
        store.check(_MODEL)
    assert "read-only" in caplog.text


def test_a_read_only_store_of_another_toolgate_or_model_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its routers' names cover the version and the model that built them: no request of
    # another one would ever open them, and it can build none, so every request would fail.
    store = RouterStore(tmp_path, max_stored=4)
    _open(store, 0).release()
    (tmp_path / _name(1)).mkdir()  # built by a toolgate from before stamps
    _build(tmp_path / _name(1))
    _no_new_files(monkeypatch)
    with pytest.raises(InvalidInputError, match="model other-model") as refused:
        store.check("other-model")
    version = router_store.__version__
    built = f"toolgate {version} with model {_MODEL} (files: {router_store.FORMATS})"
    assert f"built by an older toolgate, {built}," in str(refused.value)
    assert "rebuild it" in str(refused.value)
    monkeypatch.setattr(router_store, "__version__", "999.0.0")
    upgraded = re.escape(f"none by toolgate 999.0.0 with model {_MODEL}")
    with pytest.raises(InvalidInputError, match=upgraded):
        store.check(_MODEL)


def test_a_read_only_store_shipped_by_the_gateway_serves_only_its_own_version(
    embedder: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(_request(0), top_k=1)
    (name,) = _routers(tmp_path)
    assert json.loads((tmp_path / name / router_store.STAMP).read_text()) == {
        "toolgate": router_store.__version__,
        "model_id": embedder.model_id,
        "formats": router_store.FORMATS,
    }

    def read_only(path: Path, *, shared: bool) -> Any:
        raise PermissionError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(router_store, "_locked", read_only)
    _no_new_files(monkeypatch)
    store = RouterStore(tmp_path, max_stored=1)
    store.check(embedder.model_id)  # the version and model that built it: it serves
    filtered = ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(
        _request(0), top_k=1
    )
    assert filtered.kept == ("get_weather",)
    with monkeypatch.context() as patch:  # a build of other file formats, the same version
        patch.setattr(router_store, "FORMATS", "matrix 1 bm25 7 router 2")
        with pytest.raises(InvalidInputError, match=re.escape("(files: matrix 1 bm25 7")):
            store.check(embedder.model_id)
    for module in (indexes, router_store):  # the next release, started on the same store
        monkeypatch.setattr(module, "__version__", "999.0.0")
    with pytest.raises(InvalidInputError, match=re.escape("none by toolgate 999.0.0")):
        store.check(embedder.model_id)


def _request(n: int) -> dict[str, Any]:
    """A request whose tools array is the ``n``-th of several."""
    return {**chat_request(), "tools": chat_tools()[n : n + 3]}


class _OtherModel:
    """``embedder`` under another model id: what a filter with another model passes."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    @property
    def model_id(self) -> str:
        return "other-model"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


def test_a_router_of_another_model_is_not_set_aside(embedder: Embedder, tmp_path: Path) -> None:
    # Sound, only not for this embedder: setting it aside would destroy the router of the
    # process that uses it (and that one would destroy this one's in turn).
    ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(_request(0), top_k=1)
    (name,) = _routers(tmp_path)
    seen = os.stat(tmp_path / name / "matrix.tgm")
    other: Any = _OtherModel(embedder)
    with pytest.raises(IndexIncompatibleError, match="embedded with"):
        RouterStore(tmp_path, max_stored=4).router(
            name, _build, lambda directory: Router.open(directory, embedder=other), model_id=_MODEL
        )
    assert os.path.samestat(os.stat(tmp_path / name / "matrix.tgm"), seen)


def test_filters_of_different_models_keep_their_routers_apart(
    embedder: Embedder, tmp_path: Path
) -> None:
    ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(_request(0), top_k=1)
    (name,) = _routers(tmp_path)
    seen = os.stat(tmp_path / name / "matrix.tgm")
    other: Any = _OtherModel(embedder)
    filtered = ToolFilter(embedder=other, cache=None, store=tmp_path).filter(_request(0), top_k=1)
    assert filtered.kept == ("get_weather",)
    assert len(_routers(tmp_path)) == 2
    assert name in _routers(tmp_path)  # the first model's router, untouched
    assert os.path.samestat(os.stat(tmp_path / name / "matrix.tgm"), seen)


def test_a_router_of_a_newer_toolgate_is_not_set_aside(embedder: Embedder, tmp_path: Path) -> None:
    # A rolling upgrade: a newer worker wrote it, an older one cannot read it.
    ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(_request(0), top_k=1)
    (name,) = _routers(tmp_path)
    manifest = tmp_path / name / MANIFEST
    newer = {**json.loads(manifest.read_text()), "format": FORMAT_VERSION + 1}
    manifest.write_text(json.dumps(newer))
    gate = ToolFilter(embedder=embedder, cache=None, store=tmp_path)
    with pytest.raises(StorageError, match=f"router format {FORMAT_VERSION + 1}"):
        gate.filter(_request(0), top_k=1)
    assert _routers(tmp_path) == {name}
    assert json.loads(manifest.read_text()) == newer


@pytest.mark.parametrize(
    ("attribute", "other"),
    [("__version__", "999.0.0"), ("FORMATS", "matrix 1 bm25 5 router 2")],
    ids=["version", "formats"],
)
def test_workers_of_another_build_keep_their_routers_apart(
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    attribute: str,
    other: str,
) -> None:
    # A rolling upgrade: the old workers keep routing on their routers while the new ones
    # build their own, rather than failing on (or setting aside) each other's. A build whose
    # BM25 files changed but whose version number did not is another build too: each side
    # refused the other's files, so every request the other held failed.
    ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(_request(0), top_k=1)
    (name,) = _routers(tmp_path)
    seen = [os.stat(tmp_path / name / file) for file in ("matrix.tgm", "bm25.tgb")]
    monkeypatch.setattr(indexes, attribute, other)
    filtered = ToolFilter(embedder=embedder, cache=None, store=tmp_path).filter(
        _request(0), top_k=1
    )
    assert filtered.kept == ("get_weather",)
    assert len(_routers(tmp_path)) == 2
    for file, before in zip(("matrix.tgm", "bm25.tgb"), seen, strict=True):
        assert os.path.samestat(os.stat(tmp_path / name / file), before)


def test_a_filter_keeps_its_store_to_the_bound(embedder: Embedder, tmp_path: Path) -> None:
    gate = ToolFilter(embedder=embedder, cache=None, store=tmp_path, max_catalogs=1, max_stored=2)
    for n in range(4):
        gate.filter(_request(n), top_k=1)
    assert len(_routers(tmp_path)) == 2
    assert len(_locks(tmp_path)) == 2


def test_a_filtered_request_keeps_its_router_past_the_lru(
    embedder: Embedder, tmp_path: Path
) -> None:
    gate = ToolFilter(embedder=embedder, cache=None, store=tmp_path, max_catalogs=1, max_stored=1)
    filtered = gate.filter(_request(0), top_k=1)
    first = _routers(tmp_path)
    for n in (1, 2):
        gate.filter(_request(n), top_k=1)
    assert first <= _routers(tmp_path)
    assert filtered.kept == ("get_weather",)
    function = {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}
    call = {"id": "1", "type": "function", "function": function}
    assert gate.verify(call, filtered).ok
    del filtered
    gate.filter(_request(3), top_k=1)
    assert not first & _routers(tmp_path)


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_max_stored_must_be_a_positive_integer(value: Any) -> None:
    with pytest.raises(InvalidInputError, match="max_stored must be an integer >= 1"):
        ToolFilter(max_stored=value)


def test_the_default_bound_is_several_times_what_a_process_holds() -> None:
    assert (default_max_stored(1), default_max_stored(64)) == (64, 256)


def test_the_gateway_config_bounds_its_store(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('max_stored = 3\nstore = "routers"\n[upstreams.openai]\norigin = "http://x"\n')
    gateway = Gateway(load_config(path))
    store = gateway.filter._indexes._store
    assert store is not None
    assert (store.root, store.max_stored) == (tmp_path / "routers", 3)

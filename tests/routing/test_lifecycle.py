"""A router's resources over its life: its temporary directory, across fork and collection."""

from __future__ import annotations

import atexit
import copy
import errno
import gc
import os
import pickle
import re
import weakref
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolgate import Index
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.cache import EmbeddingCache
from toolgate.embedding.embedder import Embedder
from toolgate.routing.router import Router

TOOLS = {
    "weather": {"tools": [{"name": "get_forecast", "description": "Weather forecast."}]},
    "mail": {"tools": [{"name": "send_email", "description": "Send an email."}]},
}


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """Only reference counting frees objects in the test: what the cyclic GC would free, it
    frees at a time of its own (with a large heap, seldom)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _temporary_router(embedder: Embedder) -> Router:
    return Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, cache=None)


def _in_a_cycle(*objects: object) -> None:
    """Hold ``objects``, in this order, in a cycle only the cyclic GC frees: it finalizes a
    cycle's objects in the order its list holds them (an agent's object, a traceback's
    frame holding a router)."""
    holder: dict[str, Any] = {"objects": list(objects)}
    holder["self"] = holder


def _view(router: Router, top_k: int) -> Router:
    return router.with_config(router.config.with_settings({"top_k": top_k}))


def _exit_as_a_worker() -> None:
    """What a forked worker's normal exit (``sys.exit`` in a gunicorn worker) runs in Python,
    its ``atexit`` handlers, then out without the C runtime's exit handlers."""
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit(0)


# Python 3.12 warns that forking a threaded process may deadlock: what pre-forking servers do.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_exiting_leaves_its_parent_the_temporary_index(
    embedder: Embedder, tmp_path: Path
) -> None:
    router = _temporary_router(embedder)
    pid = os.fork()
    if pid == 0:
        _exit_as_a_worker()
    os.waitpid(pid, 0)
    router.save(tmp_path / "saved")  # reads the index files from the temporary directory
    assert (tmp_path / "saved" / "router.json").is_file()


@pytest.mark.usefixtures("no_cyclic_gc")
def test_a_dropped_router_lets_go_of_its_files_at_once(embedder: Embedder, tmp_path: Path) -> None:
    router = _temporary_router(embedder)
    router.route("weather in Oslo", allow=["weather/*"], deny=["mail/send_*"])
    router.route("select:send_email")
    router.learn(tmp_path / "learned.sqlite3")
    router.feedback("mail bob", used=["mail/send_email"])
    workdir, pipeline = router._parts.workdir, router._pipeline
    held = {
        "index (the matrix's descriptor and mapping)": weakref.ref(pipeline),
        "BM25 index": weakref.ref(pipeline._rows),
        "memo of query vectors": weakref.ref(pipeline.query_vectors),
        "store's connection": weakref.ref(pipeline.learning.memory),
    }
    del router, pipeline
    assert workdir is not None
    assert not workdir.exists()
    assert [what for what, holder in held.items() if holder() is not None] == []


def _mapped_files() -> set[str]:
    """The files this process has mapped (Linux's /proc)."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return {line.split(maxsplit=5)[5] for line in lines if len(line.split(maxsplit=5)) == 6}


@pytest.fixture
def mapped_files_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows refuses to delete a file that is mapped: emulated, a mapped file (per
    /proc/self/maps) is not unlinked."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc")
    real_unlink = os.unlink

    def unlink(path: Any, *, dir_fd: int | None = None) -> None:
        full = os.fspath(path)
        if dir_fd is not None:
            full = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), full)
        if full in _mapped_files():
            raise PermissionError(errno.EACCES, "a user-mapped section is open", full)
        real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", unlink)


@pytest.mark.usefixtures("no_cyclic_gc", "mapped_files_stay")
def test_a_dropped_router_unmaps_its_index_before_removing_its_files(embedder: Embedder) -> None:
    """The router's finalizer removed its temporary directory while the router still held
    the index: on Windows each router built without a path left its matrix file in the
    temporary folder."""
    router = _temporary_router(embedder)
    router.route("weather in Oslo")
    workdir = router._parts.workdir
    del router
    assert workdir is not None
    assert not workdir.exists()


@pytest.mark.usefixtures("mapped_files_stay")
def test_a_router_the_cyclic_gc_frees_removes_its_files_once_unmapped(embedder: Embedder) -> None:
    """The cyclic GC runs weak references' callbacks (the router's finalizer) before
    ``__del__``: a router held in a cycle (an agent's object, a frame in a traceback) had its
    directory removed while its index was still mapped, and on Windows left it for good."""
    router = _temporary_router(embedder)
    router.route("weather in Oslo")
    workdir = router._parts.workdir
    _in_a_cycle(router)
    del router
    gc.collect()
    assert workdir is not None
    assert not workdir.exists()


@pytest.mark.usefixtures("mapped_files_stay")
@pytest.mark.parametrize("first", ["router", "view"])
def test_a_router_freed_in_a_cycle_with_its_view_removes_its_files(
    embedder: Embedder, first: str
) -> None:
    """The GC runs the finalizers of a cycle in no set order: when the router's ran before
    its with_config view's, the view still mapped the index, and the directory (on Windows)
    stayed for good, since only the router that made it removed it."""
    router = _temporary_router(embedder)
    view = _view(router, 2)
    view.route("weather in Oslo")
    workdir = router._parts.workdir
    _in_a_cycle(*([router, view] if first == "router" else [view, router]))
    del router, view
    gc.collect()
    assert workdir is not None
    assert not workdir.exists()


@pytest.mark.parametrize("windows", [False, True])
def test_a_shallow_copy_keeps_its_original_s_files_till_both_are_freed(
    embedder: Embedder, tmp_path: Path, request: pytest.FixtureRequest, windows: bool
) -> None:
    """``copy.copy(router)`` shared the original's index but not its life: once the original
    was freed, its finalizer removed the temporary directory the copy still read, and the
    copy's save failed on the unlinked matrix; on Windows, which keeps a mapped file, the
    directory was left for good, since no one removed it once the copy let go."""
    if windows:
        request.getfixturevalue("mapped_files_stay")
    router = _temporary_router(embedder)
    copied = copy.copy(router)
    workdir = router._parts.workdir
    del router
    gc.collect()
    assert copied.route("weather in Oslo").ids[0] == "weather/get_forecast"
    copied.save(tmp_path / "saved")  # reads every index file from the temporary directory
    assert Router.open(tmp_path / "saved").route("send an email").ids[0] == "mail/send_email"
    del copied
    gc.collect()
    assert workdir is not None
    assert not workdir.exists()


@pytest.mark.parametrize("first", ["view", "view of the view"])
def test_views_freed_in_a_cycle_leave_the_live_router_its_files(
    embedder: Embedder, tmp_path: Path, first: str
) -> None:
    """A view of a view (calibrate's no-tool probe is one) read its own base, the first
    view, as the router: when the GC freed the two views together (a frame in a traceback)
    and the first one's __del__ ran first, the second removed the directory of the router
    that made it, still alive and in use."""
    router = _temporary_router(embedder)
    view = _view(router, 2)
    again = _view(view, 1)
    again.route("weather in Oslo")
    workdir = router._parts.workdir
    _in_a_cycle(*([view, again] if first == "view" else [again, view]))
    del view, again
    gc.collect()
    assert workdir is not None
    assert workdir.exists()
    router.save(tmp_path / "saved")  # reads the index files from the temporary directory
    assert (tmp_path / "saved" / "router.json").is_file()


@pytest.mark.usefixtures("mapped_files_stay")
def test_a_router_freed_in_a_cycle_with_a_view_of_its_view_removes_its_files(
    embedder: Embedder,
) -> None:
    """Whichever of a router and its views the GC finalizes last removes the directory."""
    for order in ([0, 1, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]):
        router = _temporary_router(embedder)
        view = _view(router, 2)
        again = _view(view, 1)
        again.route("weather in Oslo")
        workdir = router._parts.workdir
        objects = [router, view, again]
        _in_a_cycle(*[objects[k] for k in order])
        del router, view, again, objects
        gc.collect()
        assert workdir is not None
        assert not workdir.exists(), order


@pytest.mark.usefixtures("no_cyclic_gc")
def test_a_router_replaced_by_its_refresh_lets_go_of_its_files(embedder: Embedder) -> None:
    router = _temporary_router(embedder)
    router.route("weather in Oslo")
    workdir = router._parts.workdir
    router = router.refresh({"mail": TOOLS["mail"]})
    router.route("mail bob")
    assert workdir is not None
    assert not workdir.exists()


def test_what_is_bound_to_its_process_refuses_pickling_saying_what_to_do(
    embedder: Embedder, tmp_path: Path
) -> None:
    """A spawn pool, Celery or Ray pickles its task's arguments: a router refused with
    "cannot pickle 'toolgate._toolgate.Index' object", a store or cache with "cannot pickle
    '_thread.lock' object", neither saying what to do instead."""
    router = Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, path=tmp_path / "r")
    memory = router.learn(tmp_path / "learned.sqlite3")
    cache = EmbeddingCache(tmp_path / "embeddings.sqlite3")
    # The core's, which takes no Python mixin: refused as "cannot pickle 'toolgate._toolgate.
    # Index' object", naming no remedy.
    index = Index.build(tmp_path / "vectors.tgi", np.eye(3, dtype=np.float32))
    for bound, hint in [
        (index, f"Index.open({str(index.path)!r})"),
        (router, "Router.open"),
        (embedder, "Embedder("),
        (memory, "router.learn"),
        (memory.store, "store's path or address"),
        (cache, "EmbeddingCache(path)"),
    ]:
        name = type(bound).__name__
        said = rf"^cannot pickle or deep-copy a toolgate {name}: .*{re.escape(hint)}"
        for copied in (pickle.dumps, copy.deepcopy):
            with pytest.raises(TypeError, match=said):
                copied(bound)
    # A shallow copy stays what it was: a view sharing the original's parts.
    view = router.with_config(replace(router.config, top_k=1))
    assert view.route("send an email").ids == ["mail/send_email"]
    assert copy.copy(cache).path == cache.path

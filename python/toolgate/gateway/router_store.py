"""The folder a :class:`~toolgate.gateway.filter.ToolFilter` saves its routers in, shared by
processes (a gateway's workers), bounded to the most recently used.

Each tools array's router is a directory ``NAME`` with a lock file ``.NAME.lock`` beside it
(``flock``). A process holds the lock shared from before it opens the directory until it
releases the router, and exclusive while it builds the directory or deletes it: so a directory
is built once however many processes ask, and never deleted while a process reads it (the
catalog file loads on first need, long after the open) or writes it. Opening a directory
sets its modification time, which orders the directories by last use (one stamped over a day
ahead of the clock, by a clock set wrong, as the least recent). After each build, the
directories past the ``max_stored`` most recently used are deleted, each one only if its lock
is free at once; a lock file left without its directory (a build that failed) goes too, and
so does a build folder a process left when it died building (its router's lock free at once).
A directory that does not open because it is damaged on disk (a checksum or fingerprint that
does not match, a file unreadable, malformed or cut short) is moved aside and built again,
under its lock held exclusive and only if no other process holds it. One that is sound but
not for this process (:class:`~toolgate.errors.IndexIncompatibleError`: a newer toolgate's
format, during a rolling upgrade) is left alone and its error raised.
Each directory holds a stamp (``store.json``: the toolgate version, the embedding model and
the files' formats that built it), so that a store shipped read-only is refused at start-up
by a toolgate, a model or a build that could use none of its routers (their names cover all
three): it would fail every request.
Where there is no ``flock`` (Windows) nothing is locked or deleted, and of a router two
processes build at once, the first renamed into place serves both.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

from toolgate._toolgate import INDEX_FORMATS, __version__
from toolgate.errors import IndexFormatError, IndexIncompatibleError, InvalidInputError
from toolgate.routing.atomic_files import CLOCK_SLACK_S
from toolgate.routing.router import Router
from toolgate.routing.store import FORMAT_VERSION, MANIFEST

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["STAMP", "RouterStore", "StoredRouter", "default_max_stored"]

_log = logging.getLogger("toolgate.gateway")

# A router directory's name: a digest (see Indexes._stored).
_NAME = re.compile(r"[0-9a-f]{40}")
_LOCK = re.compile(r"\.([0-9a-f]{40})\.lock")
# What opening a lock file in a store this process may not write fails with.
_READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
# A directory being deleted is first renamed to this prefix, so no reader ever finds half of
# one under its own name; one left by a crash is deleted by the next prune.
_DOOMED = ".prune-"
# A router is built in a folder named for it (.build-NAME-RANDOM), under NAME's lock held
# exclusive: one left by a crash (a SIGKILL while indexing) is deleted by a prune that can
# take that lock at once, since no process builds NAME then.
_BUILD = re.compile(r"\.build-([0-9a-f]{40})-.+")
# The file in each router directory naming what built it (Router.open reads only the files
# its manifest lists, so it is never taken for part of the router).
STAMP = "store.json"
# The formats of the files a router's folder holds. A build may change them under the same
# version number (one built from the repository), so names and stamps cover them too.
FORMATS = f"{INDEX_FORMATS} router {FORMAT_VERSION}"
# What a directory without a readable stamp was built by: a toolgate from before stamps.
_UNSTAMPED = "an older toolgate"


def default_max_stored(max_catalogs: int) -> int:
    """How many routers a store keeps when not told: several times what one process holds in
    memory (other processes hold others), and never fewer than 64."""
    return max(4 * max_catalogs, 64)


class StoredRouter(NamedTuple):
    """A router opened from the store, and what releases its directory: until ``release()``
    no process deletes it (the router may read its catalog file at any time)."""

    router: Router
    release: Callable[[], None]


class RouterStore:
    """Routers saved under ``root``, at most ``max_stored`` of them kept (see the module)."""

    def __init__(self, root: Path, max_stored: int) -> None:
        self.root = root
        self.max_stored = max_stored

    def check(self, model_id: str) -> None:
        """Make the store's folder and write a file in it, or raise an
        :class:`InvalidInputError` naming it: a gateway checks before it listens, since a store
        it cannot use fails every request that needs an index. A store this process may not
        write is used as shipped (with a warning) if it holds routers built by this toolgate
        version with the embedding model ``model_id``, else refused: it can build none, and
        no other version's or model's router is ever opened."""
        if self.root.exists() and not self.root.is_dir():
            raise InvalidInputError(f"router store {self.root}: exists and is not a folder")
        probe = self.root / f".probe-{_token()}.tmp"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            probe.unlink()
        except OSError as exc:
            problem = f"router store {self.root}: cannot write in it: {exc.strerror or exc}"
            if exc.errno not in _READ_ONLY:
                raise InvalidInputError(problem) from None
            held, this = self._builders(), _builder(__version__, model_id, FORMATS)
            if this in held:
                _log.warning(
                    "router store %s is read-only: only the routers it holds are served", self.root
                )
                return
            if held:
                raise InvalidInputError(
                    f"{problem}; it holds only routers built by {', '.join(sorted(held))}, "
                    f"none by {this}, so every request would fail: "
                    "rebuild it with this toolgate and model"
                ) from None
            raise InvalidInputError(problem) from None

    def _builders(self) -> set[str]:
        """What built the routers the store holds (their stamps), as :func:`_builder` says."""
        builders: set[str] = set()
        with contextlib.suppress(OSError), os.scandir(self.root) as entries:
            for entry in entries:
                if _NAME.fullmatch(entry.name) and (Path(entry.path) / MANIFEST).exists():
                    builders.add(_read_stamp(Path(entry.path)))
        return builders

    def router(
        self,
        name: str,
        build: Callable[[Path], None],
        open_router: Callable[[Path], Router],
        *,
        model_id: str,
    ) -> StoredRouter:
        """The router saved as ``name``, opened by ``open_router(directory)``; built first,
        by ``build(folder)`` into a temporary folder renamed into place, if no process has,
        and stamped as built by this toolgate with the embedding model ``model_id``."""
        self.root.mkdir(parents=True, exist_ok=True)
        directory = self.root / name
        lock = self.root / f".{name}.lock"
        built = False
        while True:
            try:
                held = _locked(lock, shared=True)
            except OSError as exc:
                if exc.errno not in _READ_ONLY or not (directory / MANIFEST).exists():
                    raise
                # A store shipped read-only: no process can delete from it either.
                return StoredRouter(open_router(directory), _nothing)
            if (directory / MANIFEST).exists():
                try:
                    seen = os.stat(directory)
                    router = open_router(directory)
                    break
                except IndexFormatError as exc:
                    held.close()
                    # Built just now and still unreadable: no damage on disk to clear. Sound
                    # but not for this process (a newer toolgate's, another model's): another
                    # process may use it, so it stays.
                    if (
                        built
                        or isinstance(exc, IndexIncompatibleError)
                        or not self._set_aside(directory, lock, seen, exc)
                    ):
                        raise
                    continue
                except BaseException:
                    held.close()
                    raise
            held.close()
            with _locked(lock, shared=False):
                if not (directory / MANIFEST).exists():
                    self._build(directory, build, model_id)
                    built = True
        with contextlib.suppress(OSError):  # its last use, which pruning orders by
            os.utime(directory)
        if built:
            self.prune()
        return StoredRouter(router, held.close)

    def _set_aside(
        self, directory: Path, lock: Path, seen: os.stat_result, exc: IndexFormatError
    ) -> bool:
        """Move ``directory``, found damaged (``exc``), out of the way to be built again;
        whether it is gone. The store only caches what each request carries, so a damaged
        router is rebuilt, not a failure of every request with its tools for ever. Not while
        another process holds it (it opened it sound and routes with it): the request then
        fails, to be retried once that process lets go."""
        held = _lock(lock, shared=False, wait=False)
        if held is None:
            return False
        with held:
            try:
                current = os.stat(directory)
            except FileNotFoundError:
                return True  # another process set it aside first
            if os.path.samestat(current, seen):  # not yet rebuilt by another process
                os.replace(directory, self.root / f"{_DOOMED}{directory.name}-{_token()}")
                _log.warning("router store: %s is damaged, built again: %s", directory, exc)
        self.prune()  # the damaged folder goes with the prefix's leftovers
        return True

    def _build(self, directory: Path, build: Callable[[Path], None], model_id: str) -> None:
        """``build`` into a temporary folder, stamped, renamed to ``directory`` once whole."""
        building = Path(tempfile.mkdtemp(prefix=f".build-{directory.name}-", dir=self.root))
        try:
            build(building)
            stamp = {"toolgate": __version__, "model_id": model_id, "formats": FORMATS}
            (building / STAMP).write_text(json.dumps(stamp), encoding="utf-8")
            try:
                os.replace(building, directory)
            except OSError:
                # Without flock (Windows) another process may have built it meanwhile: a
                # folder is not renamed over another, and theirs serves as well as this one.
                if fcntl is not None or not (directory / MANIFEST).exists():
                    raise
        finally:
            shutil.rmtree(building, ignore_errors=True)

    def prune(self) -> list[str]:
        """Delete the directories past the ``max_stored`` most recently used that no process
        uses, and lock files left without a directory; returns the names deleted."""
        if fcntl is None:  # pragma: no cover - Windows: no way to tell a directory in use
            return []
        stored: list[tuple[float, str]] = []
        latest = time.time() + CLOCK_SLACK_S
        orphans: list[str] = []
        builds: list[tuple[str, str]] = []
        with os.scandir(self.root) as entries:
            for entry in entries:
                if _NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                    with contextlib.suppress(FileNotFoundError):  # another thread pruned it
                        used = entry.stat(follow_symlinks=False).st_mtime
                        stored.append((used if used <= latest else -math.inf, entry.name))
                elif (match := _LOCK.fullmatch(entry.name)) and not (
                    self.root / match.group(1)
                ).exists():
                    orphans.append(match.group(1))
                elif entry.name.startswith(_DOOMED):
                    shutil.rmtree(entry.path, ignore_errors=True)
                elif match := _BUILD.fullmatch(entry.name):
                    builds.append((match.group(1), entry.path))
        for name, folder in builds:
            self._delete_abandoned_build(name, folder)
        stored.sort(reverse=True)
        return [
            name for name in [n for _, n in stored[self.max_stored :]] + orphans
            if self._delete(name)
        ]  # fmt: skip

    def _delete_abandoned_build(self, name: str, folder: str) -> None:
        """Delete ``folder``, a build of ``name``, unless a process holds ``name``'s lock (it
        may be building there). A lock file made here, with no router beside it, goes too."""
        lock = self.root / f".{name}.lock"
        held = _lock(lock, shared=False, wait=False)
        if held is None:
            return
        with held:
            shutil.rmtree(folder, ignore_errors=True)
            if not (self.root / name).exists():
                lock.unlink(missing_ok=True)  # as _delete does: a waiter locks anew

    def _delete(self, name: str) -> bool:
        """Delete ``name``'s directory and lock file unless a process holds its lock."""
        lock = self.root / f".{name}.lock"
        held = _lock(lock, shared=False, wait=False)
        if held is None:
            return False
        with held:
            directory = self.root / name
            if directory.exists():
                doomed = self.root / f"{_DOOMED}{name}-{_token()}"
                os.replace(directory, doomed)
                shutil.rmtree(doomed, ignore_errors=True)
            # Unlinked while held: a process waiting on it finds it gone and locks anew.
            lock.unlink(missing_ok=True)
        return True


def _token() -> str:
    """A random suffix, so that two folders set aside under one name do not meet."""
    return secrets.token_hex(4)


def _builder(version: str, model_id: str, formats: str | None) -> str:
    """A toolgate version, an embedding model and the files' formats (``None``: a stamp from
    before they were named), as an error message names them."""
    files = "" if formats is None else f" (files: {formats})"
    return f"toolgate {version} with model {model_id}{files}"


def _read_stamp(directory: Path) -> str:
    """What built ``directory``, from its stamp (:func:`_builder`); a directory without a
    readable one was built by a toolgate from before stamps."""
    try:
        stamp = json.loads((directory / STAMP).read_text(encoding="utf-8"))
        version, model_id, formats = stamp["toolgate"], stamp["model_id"], stamp.get("formats")
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return _UNSTAMPED
    if not isinstance(version, str) or not isinstance(model_id, str):
        return _UNSTAMPED
    return _builder(version, model_id, formats if isinstance(formats, str) else None)


def _nothing() -> None:
    """Releases a router of a read-only store: nothing to release."""


def _locked(path: Path, *, shared: bool) -> BinaryIO:
    """``path`` opened (created if missing) and locked, shared or exclusive, once the other
    processes let it be."""
    handle = _lock(path, shared=shared, wait=True)
    assert handle is not None  # a waiting lock is never refused
    return handle


def _lock(path: Path, *, shared: bool, wait: bool) -> BinaryIO | None:
    """``path`` opened and locked; without ``wait``, ``None`` where another process holds
    it. A lock file deleted while this process waited on it locks nothing any more: it is
    then opened and locked again."""
    while True:
        handle = open(path, "a+b")  # noqa: SIM115 - closed by the caller
        if fcntl is None:  # pragma: no cover - Windows
            return handle
        operation = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(handle.fileno(), operation)
        except BlockingIOError:
            handle.close()
            return None
        except BaseException:
            handle.close()
            raise
        try:
            current = os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
        except FileNotFoundError:
            current = False
        if current:
            return handle
        handle.close()

"""Durable file writes for a router's directory: a file is written beside its target, fsync'd
and renamed over it, so a reader sees the old file or the new one, never half of one; any
``OSError`` on the way is a :class:`~toolgate.errors.StorageError`. Files that belong together
are all written first and renamed after (:func:`staging`), so a save that fails while writing
(a full disk) leaves the files it would replace as they were."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from toolgate.arguments import file_path
from toolgate.errors import InvalidInputError, StorageError, ToolgateError
from toolgate.sqlite_files import make_folder

__all__ = [
    "CLOCK_SLACK_S",
    "Staging",
    "directory_path",
    "naming",
    "prepare_directory",
    "staging",
    "storage_errors",
    "sync_directory",
    "temporary_name",
]

#: How far ahead of this host's clock a file's time (its modification time, or one written in
#: its name) may be and still be believed: hosts sharing a folder differ by far less. A time
#: further ahead was written while a clock read wrong (a year ahead, set right since); taken
#: as it is, the file would stay the newest that long.
CLOCK_SLACK_S = 86_400


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    """Raise an ``OSError`` from inside as a :class:`StorageError`, which is both an
    ``OSError`` (same errno and file name) and a :class:`ToolgateError`."""
    try:
        yield
    except ToolgateError:
        raise
    except OSError as exc:
        if exc.errno is None:
            raise StorageError(str(exc)) from exc
        raise StorageError(exc.errno, exc.strerror or str(exc), exc.filename) from exc


@contextlib.contextmanager
def naming(target: Path, tmp: Path) -> Iterator[None]:
    """Raise an ``OSError`` from writing ``tmp`` to become ``target`` as a
    :class:`StorageError` naming ``target``: the file the caller saves, not the temporary one
    beside it (whose name means nothing to them), nor none (a full disk's write or fsync
    names no file)."""
    try:
        yield
    except OSError as exc:
        named = exc.filename is not None and os.fsdecode(exc.filename) != str(tmp)
        if exc.errno is None or named:
            raise
        raise StorageError(exc.errno, exc.strerror or str(exc), str(target)) from exc


def directory_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a router directory's path; an empty one is refused, as ``Path("")`` is
    the current directory: a slip, not a choice (``"."`` says that)."""
    if isinstance(path, str) and not path:
        raise InvalidInputError("the router directory is an empty path; '.' is this directory")
    return file_path("the router directory", path)


def prepare_directory(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory to save a router in, created if needed."""
    directory = directory_path(path)
    with storage_errors():
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(path))
        make_folder(directory)  # a link to no folder said so
    return directory


class Staging:
    """Files written under temporary names beside their targets, renamed over them only by
    :meth:`commit`, once every one is written: until then no target has changed."""

    def __init__(self) -> None:
        self._files: list[tuple[Path, Path]] = []  # (temporary file, target), in order

    def path(self, target: Path) -> Path:
        """A temporary name for ``target``, for the caller to write (fsync'd) and
        :meth:`commit` to rename; removed with the staging if it is not committed."""
        tmp = temporary_name(target)
        self._files.append((tmp, target))
        return tmp

    def write(self, target: Path, write: Callable[[BinaryIO], object]) -> Path:
        """Stage ``target`` written by ``write``, fsync'd; the temporary file."""
        tmp = self.path(target)
        with naming(target, tmp), open(tmp, "xb", opener=_private) as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        return tmp

    def copy(self, source: Path, target: Path) -> Path | None:
        """Stage a copy of ``source`` as ``target``; the temporary file (``None``, nothing
        staged, if they are one file)."""
        with storage_errors():
            if source.resolve() == target.resolve():
                return None
            with source.open("rb") as src:
                return self.write(target, lambda out: shutil.copyfileobj(src, out, 1 << 20))

    def commit(self) -> None:
        """Rename every staged file over its target, in the order staged, and sync their
        folders. A reader that looks between two renames sees files of two saves: each
        file whole, and the manifest staged last says which belong together."""
        for tmp, target in self._files:
            with naming(target, tmp):
                os.replace(tmp, target)
        for folder in dict.fromkeys(target.parent for _, target in self._files):
            sync_directory(folder)

    def discard(self) -> None:
        """Remove the staged files that were not renamed, as far as it can: the error that
        stopped the save is the one to raise (a read-only file system refuses even to remove
        a file that is not there)."""
        for tmp, _ in self._files:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def staging() -> Iterator[Staging]:
    """A :class:`Staging` whose files not committed by the end of the block (an error, an
    interrupt) are removed; ``OSError`` s in it are :class:`StorageError` s."""
    stage = Staging()
    try:
        with storage_errors():
            yield stage
    finally:
        stage.discard()


def temporary_name(path: Path) -> Path:
    """A name beside ``path`` for a file to write and rename over it, unique to this call.

    128 random bits: two threads (or processes) saving at once never share one. Named before
    the file exists, so a clean-up in ``finally`` covers it from its creation on: with
    ``mkstemp``, a Ctrl-C just after it made the file left that behind, its name unknown.
    """
    return path.with_name(f".{path.name}.{secrets.token_hex(16)}.tmp")


def _private(path: str, flags: int) -> int:
    """Open ``path`` readable by its owner only, as ``mkstemp`` does."""
    return os.open(path, flags, 0o600)


def sync_directory(directory: Path) -> None:
    """fsync ``directory``, so a rename in it survives a crash (a no-op where unsupported)."""
    with contextlib.suppress(OSError):
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)

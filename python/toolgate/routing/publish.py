"""Publishing a router that processes have open: the new one is written to a directory of its
own, then a symbolic link is switched to it in one rename. Writing over the files of a live
router (``cp``) would change pages they have mapped."""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from toolgate.errors import InvalidInputError, StorageError
from toolgate.routing.atomic_files import (
    CLOCK_SLACK_S,
    directory_path,
    prepare_directory,
    storage_errors,
    sync_directory,
)
from toolgate.routing.manifest import MANIFEST

try:
    import fcntl
except ImportError:  # Windows: no flock, and a link to a folder is not renamed over another
    fcntl = None  # type: ignore[assignment]

__all__ = ["publish", "router_directory"]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (made if missing) while in the block."""
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing the descriptor releases the lock


def router_directory(path: str | os.PathLike[str]) -> Path:
    """The directory to open a router from: a link :func:`publish` made is followed once, so
    that a router keeps reading the version it opened (its catalog loads later) after the
    link moves on."""
    directory = directory_path(path)
    return directory.resolve() if directory.is_symlink() else directory


@storage_errors()
def publish(save: Callable[[Path], None], path: str | os.PathLike[str], *, keep: int) -> Path:
    """Write a router with ``save`` into a new directory beside ``path``, then point the
    symbolic link ``path`` at it in one rename; the new directory.

    A process that opens ``path`` gets the old router or the new one, whole; one that opened
    the old one keeps it. Publishers of one ``path`` take turns (a lock file beside it), so
    the link always points at a whole version. The ``keep`` newest whole versions stay on
    disk, older ones are removed (a process that still has one open routes on, but its catalog
    can no longer load). A save that fails or is interrupted removes its own directory.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise InvalidInputError(f"keep must be an integer >= 1, got {keep!r}")
    link = directory_path(path)
    if fcntl is None:
        raise StorageError(
            errno.ENOTSUP,
            "publish is POSIX only (Linux, macOS): it switches a symbolic link by rename "
            "under a flock, which Windows has not; save each version with router.save to a "
            "new directory and open that one instead",
            str(link),
        )
    if link.exists() and not link.is_symlink():
        raise InvalidInputError(
            f"{link} exists and is not a link that publish made: publish switches a symbolic "
            "link to each new version; publish to a new path, or move this one away first"
        )
    parent = prepare_directory(link.parent)
    prefix = f".{link.name}.v"
    # One publisher of a link at a time, across processes: another's clean-up must never
    # remove a version still being written, nor the one its link is about to point at.
    with _locked(parent / f".{link.name}.lock"):
        # The time first in the name: versions sort oldest first.
        version = Path(tempfile.mkdtemp(dir=parent, prefix=f"{prefix}{time.time_ns():016x}-"))
        try:
            save(version)
        except BaseException:  # Ctrl-C and a full disk too: no half-written version stays
            shutil.rmtree(version, ignore_errors=True)
            raise
        staged = parent / f".{link.name}.link-{os.getpid()}-{time.time_ns():x}"
        try:
            os.symlink(version.name, staged)  # relative: the parent may be moved
            os.replace(staged, link)
        finally:
            staged.unlink(missing_ok=True)
        sync_directory(parent)
        _remove_old_versions(parent, prefix, keep, keeping={version.resolve(), link.resolve()})
    return version


def _remove_old_versions(parent: Path, prefix: str, keep: int, keeping: set[Path]) -> None:
    """Remove all but the ``keep`` newest whole versions in ``parent`` (a manifest, written
    last, makes one whole), and every part-written one: called under the publishers' lock,
    so none is still being written (a publisher killed mid-save left it). Never one of
    ``keeping``: a part-written version must not count among the ``keep`` and push out one
    that processes have open."""
    latest = time.time_ns() + CLOCK_SLACK_S * 10**9

    def published(version: Path) -> tuple[int, str]:
        """When ``version`` was published, by its name (-1: ahead of any time believed)."""
        at = int(version.name[len(prefix) : len(prefix) + 16], 16)
        return (at if at <= latest else -1, version.name)

    # The whole name, not the prefix alone: ``.router.v`` also begins the versions of a link
    # ``router.v2`` beside it. mkdtemp's random part has no dot; theirs goes on with one.
    ours = re.compile(re.escape(prefix) + r"[0-9a-f]{16}-[^.]+")
    versions = sorted(
        (p for p in parent.iterdir() if ours.fullmatch(p.name) and p.is_dir()), key=published
    )
    whole = [p for p in versions if (p / MANIFEST).is_file()]
    unwanted = [p for p in versions if p not in whole] + whole[:-keep]
    for old in unwanted:
        if old.resolve() not in keeping:
            shutil.rmtree(old, ignore_errors=True)

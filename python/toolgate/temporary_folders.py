"""Temporary folders of this user's only, in the system's temporary folder: one kept for its
caller to remove (:func:`new_temporary_folder`, as ``mkdtemp``), or one removed with its
files on leaving a ``with`` block (:func:`scratch_folder`). None to be had (a container's
read-only root file system with no /tmp mounted) is a :class:`~toolgate.errors.StorageError`
saying to set ``TMPDIR``, not tempfile's bare ``FileNotFoundError``."""

from __future__ import annotations

import errno
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toolgate.errors import StorageError

__all__ = ["new_temporary_folder", "scratch_folder"]


def new_temporary_folder(prefix: str, *, or_set: str = "") -> Path:
    """A new folder of this user's only (``mkdtemp``), the caller's to remove. None to be had
    is a :class:`StorageError` saying to set ``TMPDIR`` (or ``or_set``, another variable
    that avoids the need)."""
    try:
        return Path(tempfile.mkdtemp(prefix=prefix))
    except OSError as exc:
        alternative = f" (or {or_set})" if or_set else ""
        raise StorageError(
            exc.errno or errno.EIO,
            f"cannot make a temporary folder: {exc.strerror or exc}; set TMPDIR{alternative} "
            "to a folder this user can write",
            exc.filename,
        ) from exc


@contextmanager
def scratch_folder(prefix: str, *, or_set: str = "") -> Iterator[Path]:
    """A :func:`new_temporary_folder`, removed with its files on leaving the block."""
    folder = new_temporary_folder(prefix, or_set=or_set)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)

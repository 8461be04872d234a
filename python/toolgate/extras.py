"""Naming the extra to install when a module's optional dependency is missing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["needs_extra"]


@contextlib.contextmanager
def needs_extra(extra: str, needed_by: str) -> Iterator[None]:
    """Around ``needed_by``'s imports of the packages of ``extra``: a package that is not
    installed is still a ``ModuleNotFoundError`` naming it, which now names the extra that
    brings it too (the package's plain name would get an untested version, or the wrong
    project)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "toolgate":
            raise
        raise ModuleNotFoundError(
            f'{exc}: {needed_by} needs pip install "toolgate-router[{extra}]"',
            name=exc.name,
            path=exc.path,
        ) from exc

"""What a forked child (a pre-forking server's worker) needs of the objects it inherits.

A child has only the thread that forked: a lock another thread of the parent held at the fork
stays held in the child for good, and the child's first use of it waits for ever. toolgate's
objects made before a fork serve in the child (docs/api.md, "Pre-forking servers"), so the
locks they hold across slow work (a store's write, a catalog or model load) are made here, and
made new in every forked child, as the standard library does for its own. A connection the
child inherits is the parent's: the child keeps it (:func:`keep_for_ever`) rather than free
it, and opens its own.
"""

from __future__ import annotations

import os
import threading
import weakref

__all__ = ["fork_safe_lock", "keep_for_ever"]

# Every lock made here that is still in use.
_LOCKS: weakref.WeakSet[threading.Lock] = weakref.WeakSet()
# What forked children inherited and must never free (see keep_for_ever).
_KEPT: list[object] = []


def fork_safe_lock() -> threading.Lock:
    """A new ``threading.Lock``, released in a forked child whatever its state at the fork."""
    lock = threading.Lock()
    _LOCKS.add(lock)
    return lock


def keep_for_ever(inherited: object) -> None:
    """Keep ``inherited`` (a connection a forked child has of its parent's) referenced for
    ever, so never closed: closing it would end or disturb the parent's session."""
    _KEPT.append(inherited)


def _release_in_child() -> None:
    for lock in list(_LOCKS):
        lock._at_fork_reinit()  # type: ignore[attr-defined]  # CPython's, used by its own modules


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_release_in_child)

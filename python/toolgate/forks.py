"""What a forked child (a pre-forking server's worker) needs of the objects it inherits.

A child has only the thread that forked: a lock another thread of the parent held at the fork
stays held in the child for good, and the child's first use of it waits for ever. toolgate's
objects made before a fork serve in the child (docs/api.md, "Pre-forking servers"), so the
locks they hold across slow work (a store's write, a catalog or model load) are made here, and
made new in every forked child, as the standard library does for its own. A connection the
child inherits is the parent's: the child keeps it (:func:`keep_for_ever`) rather than free
it, and opens its own. The threads of an object are the parent's too: the object starts
afresh in the child (:func:`on_fork_in_child`).
"""

from __future__ import annotations

import copy
import copyreg
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, NoReturn, SupportsIndex, TypeVar

__all__ = [
    "BoundToProcess",
    "CopiedUnderLock",
    "fork_safe_lock",
    "keep_for_ever",
    "on_fork_in_child",
    "refuse_copies",
]

_T = TypeVar("_T")

# Every lock made here that is still in use.
_LOCKS: weakref.WeakSet[threading.Lock] = weakref.WeakSet()
# What forked children inherited and must never free (see keep_for_ever).
_KEPT: list[object] = []
# What each live object (hashed by identity) does in a forked child (see on_fork_in_child).
_RESETS: weakref.WeakKeyDictionary[Any, Callable[[Any], object]] = weakref.WeakKeyDictionary()


def fork_safe_lock() -> threading.Lock:
    """A new ``threading.Lock``, released in a forked child whatever its state at the fork."""
    lock = threading.Lock()
    _LOCKS.add(lock)
    return lock


class CopiedUnderLock:
    """A mixin for plain data guarded by ``self._lock`` (a :func:`fork_safe_lock`): pickled
    and copied as a snapshot taken under that lock, and the copy given a lock of its own (a
    lock cannot be pickled, and a copy sharing its original's would wait on it)."""

    _lock: threading.Lock

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            # Each container copied while held: pickle reads the state after the lock is
            # let go, while other threads may go on adding to the original's.
            return {key: copy.copy(value) for key, value in vars(self).items() if key != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._lock = fork_safe_lock()


class BoundToProcess:
    """A mixin for objects bound to their process (mapped files, connections, a model
    session, threads): pickling or deep-copying one is a ``TypeError`` saying what to do in
    the other process instead (``_elsewhere``), not one naming whichever inner part refused
    first (a lock, the index). A spawn pool, Celery or Ray pickles what it hands a worker.
    A shallow copy shares the original's parts, as ever."""

    _elsewhere: ClassVar[str]

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise _bound(type(self).__name__, self._elsewhere)

    def __copy__(self) -> Any:
        clone = object.__new__(type(self))
        vars(clone).update(vars(self))
        return clone


def refuse_copies(kind: type[_T], elsewhere: Callable[[_T], str]) -> None:
    """Make pickling or copying a ``kind`` (a core type, which takes no mixin) the error
    :class:`BoundToProcess` raises, saying ``elsewhere(obj)`` (what to do in the other
    process) rather than PyO3's "cannot pickle 'toolgate._toolgate.Index' object". Through
    ``copyreg``, which pickle and the copy module both read; a shallow copy is refused too."""

    def refuse(obj: _T) -> NoReturn:
        raise _bound(kind.__name__, elsewhere(obj))

    copyreg.pickle(kind, refuse)


def _bound(kind: str, elsewhere: str) -> TypeError:
    return TypeError(
        f"cannot pickle or deep-copy a toolgate {kind}: it holds what only this process can "
        f"use; {elsewhere}"
    )


def keep_for_ever(inherited: object) -> None:
    """Keep ``inherited`` (a connection a forked child has of its parent's) referenced for
    ever, so never closed: closing it would end or disturb the parent's session."""
    _KEPT.append(inherited)


def on_fork_in_child(owner: _T, reset: Callable[[_T], object]) -> None:
    """Run ``reset(owner)`` in every forked child while ``owner`` lives, as the fork returns
    (the child's only thread then: ``reset`` needs no lock; the locks here are released)."""
    _RESETS[owner] = reset


def _in_child() -> None:
    for lock in list(_LOCKS):
        lock._at_fork_reinit()  # type: ignore[attr-defined]  # CPython's, used by its own modules
    for owner, reset in list(_RESETS.items()):
        reset(owner)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_in_child)

"""Router builds shared by the calls that ask for the same one.

A host's ``asyncio.timeout`` around :meth:`McpRouter.connect` (or a turn's refresh) cancels
the call, not the build: it runs on a worker thread, which asyncio's cancellation does not
stop (anyio shields the wait only from its own cancel scopes). A retry then started a second
build beside the first, and a retry loop whose timeout was shorter than a build piled them up
until none finished. :class:`Builds` lets a build asked for again join the one running, or
take the last one finished.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

__all__ = ["Builds"]

_T = TypeVar("_T")


class Builds(Generic[_T]):
    """Builds by key: one runs per key at a time, and the last one finished is kept."""

    def __init__(self) -> None:
        """See the class docstring."""
        self._lock = threading.Lock()
        self._running: dict[Hashable, Future[_T]] = {}
        self._last: tuple[Hashable, _T] | None = None

    def get(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """What ``build()`` makes for ``key``: the last build finished if it was for ``key``,
        else that of the build for it running (waited for), else ``build()``'s, in the
        caller's thread (a worker thread). A build that fails fails those waiting for it."""
        with self._lock:
            if self._last is not None and self._last[0] == key:
                return self._last[1]
            running = self._running.get(key)
            if running is None:
                mine: Future[_T] = Future()
                mine.set_running_or_notify_cancel()  # no waiter can cancel it
                self._running[key] = mine
        if running is not None:
            return running.result()
        try:
            built = build()
        except BaseException as exc:
            with self._lock:
                del self._running[key]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._running[key]
            self._last = (key, built)
        mine.set_result(built)
        return built

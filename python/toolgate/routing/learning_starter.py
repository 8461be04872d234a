"""Starting routers' learning into a learned store, best effort.

Learning from use is a bonus, never a condition of routing: a server (the HTTP gateway, the
MCP proxy) whose learned store fails while a router's memory is read (a database down, a
file locked past its timeout) routes without that memory, and tries the store again later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from toolgate.errors import ToolgateError
from toolgate.forks import fork_safe_lock
from toolgate.routing.learned_store import LearnedStore
from toolgate.routing.router import Router

__all__ = ["LEARN_RETRY_S", "LearningStarter"]

#: After the learned store fails, how long routers go without their memory before it is
#: tried again.
LEARN_RETRY_S = 30.0


class LearningStarter:
    """Starts routers learning into ``store``, best effort.

    A store that fails while a router's memory is read (its database down, rows the index
    refuses) is the server's trouble, not the request's: the router routes without its
    memory, the failure is logged once on ``log`` (not again until the store has answered),
    and the store is tried again for routers without a memory once ``retry_s`` seconds have
    passed since it last failed, so a store that stays down costs one attempt per
    ``retry_s``, not one per request. One thread tries at a time; a request arriving
    meanwhile routes without memory rather than wait its turn (a store that is down may take
    seconds to say so).
    """

    def __init__(
        self,
        store: LearnedStore,
        *,
        retry_s: float = LEARN_RETRY_S,
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger | None = None,
    ) -> None:
        """See the class docstring."""
        self.store = store
        self.retry_s = retry_s
        self._clock = clock
        self._log = log or logging.getLogger(__name__)
        self._failed_at: float | None = None  # the store's last failure, while it fails
        # Two threads starting one cached router's memory would each make one.
        self._starting = fork_safe_lock()

    def due(self, router: Router) -> bool:
        """Whether :meth:`start` would try the store for ``router``: it has no memory, and
        the store did not fail in the last ``retry_s`` seconds. Cheap: no store is asked."""
        if router.memory is not None:
            return False
        failed_at = self._failed_at
        return failed_at is None or self._clock() - failed_at >= self.retry_s

    def start(self, router: Router) -> None:
        """``router`` learning into the store, unless it does already, the store failed less
        than ``retry_s`` seconds ago, or another thread is trying it now. May wait on the
        store: call it off an event loop."""
        if not self.due(router):
            return
        # Not waiting: behind a store that is down, each request would try it in turn.
        if not self._starting.acquire(blocking=False):
            return
        try:
            # Checked again: the thread that held the lock may have just started this
            # router, or seen the store fail.
            if not self.due(router):
                return
            try:
                router.learn(self.store)
            # Not only StoreError: the store's rows may hold what the index refuses. The
            # store is the server's, not the caller's, so no error of it is a request's.
            except ToolgateError as exc:
                self._failed(exc)
                return
            if self._failed_at is not None:
                self._failed_at = None
                self._log.warning("the learned store answers again: routers learn again")
        finally:
            self._starting.release()

    def _failed(self, exc: ToolgateError) -> None:
        if self._failed_at is None:
            self._log.warning(
                "the learned store failed; requests are routed without what was learned, "
                "and the store is tried again every %g s: %s", self.retry_s, exc,
            )  # fmt: skip
        self._failed_at = self._clock()

"""Log lines told once each, with a bound on how many are remembered."""

from __future__ import annotations

import logging
from collections.abc import Iterator

__all__ = ["ToldOnce"]


class ToldOnce:
    """The keys whose line was logged, at most ``bound``: past them, new ones are not told,
    and the last one says so, lest a fault left out of the log pass for none.

    Not an LRU: keys that change with each event (ids, counts) would log one line per event
    for good.
    """

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._told: set[str] = set()

    def __iter__(self) -> Iterator[str]:
        return iter(self._told)

    def log(
        self, logger: logging.Logger, level: int, key: str, message: str, *args: object
    ) -> None:
        """Log ``message % args`` at ``level`` the first time of ``key``, while fewer than
        :attr:`bound` keys are remembered."""
        if key in self._told or len(self._told) >= self.bound:
            return
        self._told.add(key)
        if len(self._told) == self.bound:
            kind = logging.getLevelName(level).lower()
            message += f" ({self.bound} different {kind}s: no more are logged)"
        logger.log(level, message, *args)

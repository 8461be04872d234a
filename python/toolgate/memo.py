"""A small bounded memo shared safely between threads."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from toolgate.forks import fork_safe_lock

__all__ = ["Memo"]

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class Memo(Generic[_K, _V]):
    """At most ``size`` values by key, least recently used dropped first.

    ``make`` runs outside the lock: two threads missing the same key may both make it, and
    the values are equal, which is cheaper than serialising every miss.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: OrderedDict[_K, _V] = OrderedDict()
        self._lock = fork_safe_lock()

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        """Forget every value."""
        with self._lock:
            self._values.clear()

    def get(self, key: _K, make: Callable[[], _V]) -> _V:
        """The value for ``key``, made and kept on a miss."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self._size:
                self._values.popitem(last=False)
        return value

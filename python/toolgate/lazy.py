"""A value that is given up front or loaded once, on first use, from any thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from toolgate.forks import fork_safe_lock

__all__ = ["Lazy"]

_T = TypeVar("_T")


class Lazy(Generic[_T]):
    """A value given up front, or produced by a loader on first use (once, thread-safe)."""

    def __init__(self, value: _T | None, loader: Callable[[], _T] | None = None) -> None:
        self._lock = fork_safe_lock()  # held across the loader
        self._value = value
        self._loader = loader

    @property
    def loaded(self) -> bool:
        """Whether the value exists yet."""
        return self._value is not None

    def get(self) -> _T:
        """The value, loading it first if needed."""
        value = self._value
        if value is not None:
            return value
        with self._lock:
            if self._value is None:
                assert self._loader is not None, "a Lazy needs a value or a loader"
                self._value = self._loader()
            return self._value

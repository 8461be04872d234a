"""ONNX Runtime, imported in this one place with its telemetry off, and its calls held back
at exit.

Every import of ``onnxruntime`` in the package goes through here: the first import decides.
Its Linux wheels (1.31) start a telemetry thread at import, which writes
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/`` and queues events; a forked child that
exits normally (a pre-forking server's worker: gunicorn ``--preload``) then hangs for ever in
its exit handlers, destroying a condition variable the parent's thread waits on. A user who
sets ``ORT_DISABLE_TELEMETRY`` themselves keeps their value. The variable is set when
:mod:`toolgate.embedding` is imported (this module's package), not here: the first import of
``onnxruntime`` may happen on a worker thread, and changing the environment there races the
other threads reading it.

A daemon thread still in a call into ONNX Runtime (which releases the GIL) when the
interpreter shuts down returns to find it gone: CPython 3.11-3.13 end such a thread with
``pthread_exit``, whose unwinding through ONNX Runtime's C++ frames calls ``std::terminate``,
and the process aborts (SIGABRT, exit code 134, a core dump) instead of exiting. A learning
queue's worker embedding a lesson's query did it. So every call goes through
:func:`call_under_way`: at exit, the calls under way are waited for, and a daemon thread
making a new one waits instead, outside ONNX Runtime (the process ends around it); if
the process is still running an exit hook :data:`EXIT_WAIT_S` later (one waiting for that
thread), the call raises :class:`~toolgate.errors.ModelError` instead.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from toolgate.errors import ModelError
from toolgate.forks import on_fork_in_child

__all__ = ["EXIT_WAIT_S", "call_under_way", "onnxruntime", "quantization"]

#: How long exit waits for the calls under way (one run takes milliseconds; a batch of long
#: fp32 texts on a loaded machine, a second or two), and a daemon thread calling after it
#: waits before its call is refused.
EXIT_WAIT_S = 10.0


def onnxruntime() -> Any:
    """The ``onnxruntime`` module."""
    import onnxruntime as ort

    return ort


def quantization() -> Any:
    """The ``onnxruntime.quantization`` module (the int8 conversion)."""
    import onnxruntime.quantization as quantize

    return quantize


class _Calls:
    """The calls into ONNX Runtime under way in this process, and whether it is exiting."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._under_way = 0
        self._exiting = False
        self._refused_at: float | None = None  # when exit refuses daemon threads' calls
        on_fork_in_child(self, _Calls.__init__)  # the parent's callers are not the child's

    @contextlib.contextmanager
    def under_way(self) -> Iterator[None]:
        with self._changed:
            if self._exiting and threading.current_thread().daemon:
                # Held outside ONNX Runtime (a thread waiting on a lock holds no C++ frame
                # to unwind), but not for ever: an exit hook that runs after ours may wait
                # for this thread (a learning queue's close, a thread pool's join), and it
                # waited for ever too. Past the wait the process is still running that hook.
                # One wait for all calls: a refused thread goes on to its next (a learning
                # queue's next lesson), and a wait for each held the hook that long per call.
                if self._refused_at is None:
                    self._refused_at = time.monotonic() + EXIT_WAIT_S
                self._changed.wait_for(lambda: False, max(0.0, self._refused_at - time.monotonic()))
                raise ModelError("ONNX Runtime takes no new call: the process is exiting")
            self._under_way += 1
        try:
            yield
        finally:
            with self._changed:
                self._under_way -= 1
                self._changed.notify_all()

    def hold_back(self, timeout: float) -> None:
        """From now on a daemon thread makes no call; wait for those under way."""
        with self._changed:
            self._exiting = True
            self._changed.wait_for(lambda: self._under_way == 0, timeout)


_CALLS = _Calls()


def _at_exit() -> None:
    _CALLS.hold_back(EXIT_WAIT_S)  # read now: one wait for both, whatever set it since


atexit.register(_at_exit)


def call_under_way() -> contextlib.AbstractContextManager[None]:
    """Around every call into ONNX Runtime (a session made or run): see the module docstring."""
    return _CALLS.under_way()

"""Where events go: memory, the log, a JSON-lines file, OpenTelemetry."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import math
import os
import stat
import weakref
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from toolgate.arguments import file_path
from toolgate.errors import InvalidInputError
from toolgate.forks import BoundToProcess, CopiedUnderLock, fork_safe_lock
from toolgate.json_limits import JsonLimitError, open_regular
from toolgate.telemetry.events import Event

__all__ = [
    "JsonFileSink",
    "JsonLogSink",
    "MemorySink",
    "OpenTelemetrySink",
    "Sink",
    "default_sinks",
]


_log = logging.getLogger("toolgate.telemetry")


@runtime_checkable
class Sink(Protocol):
    """Receives events. Must be thread-safe; must not raise for a well-formed event."""

    def emit(self, event: Event) -> None:
        """Handle one event."""
        ...


class MemorySink(CopiedUnderLock):
    """Keeps every event in a list (for tests and notebooks)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = fork_safe_lock()

    def emit(self, event: Event) -> None:
        """Append the event."""
        with self._lock:
            self.events.append(event)

    def of_kind(self, kind: str) -> list[Event]:
        """The events of one kind (``route``, ``promote``, ``verify``)."""
        with self._lock:
            return [e for e in self.events if e.kind == kind]


class JsonLogSink:
    """Logs each event as one JSON line through :mod:`logging` (logger ``toolgate.telemetry``)."""

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self._logger = logger or _log
        self._level = level

    def emit(self, event: Event) -> None:
        """Log the event; the dict is also attached as ``record.toolgate_event``."""
        if self._logger.isEnabledFor(self._level):
            self._logger.log(
                self._level, event.to_json(), extra={"toolgate_event": event.to_dict()}
            )


def _otel_value(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return json.dumps(value, sort_keys=True)


class JsonFileSink(BoundToProcess):
    """Appends each event as one JSON line to a file, flushed at once, so another process
    (``toolgate stats --events FILE``) can read it while it grows. Several processes may
    append to one file: each line is written whole, in one ``write`` of an ``O_APPEND``
    file. A file created here is readable by its owner only (0600): events hold hashes of
    queries, and the queries themselves with ``record_queries``; a file that exists keeps its
    mode. A file that cannot be opened is an :class:`InvalidInputError` naming it. A line a
    full disk cut short is ended by the next write that succeeds, and a file that ends inside
    a line (its writer stopped there) gets its first event on a line of its own: an event
    never runs into another, which would cost both and stop ``toolgate stats`` at that line.
    A file moved or deleted (rotated by ``logrotate``) is opened again at ``path`` by the next
    event, so rotating by renaming needs no signal and no ``copytruncate``."""

    _elsewhere = "open the file there with JsonFileSink(path)"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open ``path`` for appending (created if missing)."""
        self.path = file_path("path", path)
        try:
            self._hold(self._open())
        except OSError as exc:
            raise InvalidInputError(f"cannot write events to {path}: {exc.strerror}") from None
        # What must go before the next line: the rest of a line cut short.
        self._rest = b"\n" if _ends_mid_line(self._fd, self.path) else b""
        self._lock = fork_safe_lock()
        # Events dropped since a write failed, or None while writes succeed: a full disk
        # fails every event, and is told of once, not once an event.
        self._dropped: int | None = None
        self._astray = False  # told that the path cannot be opened again

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _hold(self, fd: int) -> None:
        """Write to ``fd`` from now on, closed when this sink is let go unclosed: a raw
        descriptor has no destructor, and a sink made per tenant or request kept each one."""
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)

    def _follow_path(self) -> None:
        """Write on to the file at :attr:`path` when the one open is no longer there."""
        try:
            there = os.stat(self.path)
        except FileNotFoundError:
            there = None
        except OSError:
            return  # a folder on the way no longer searchable: the open file is all there is
        opened = os.fstat(self._fd)
        if there is not None and (there.st_dev, there.st_ino) == (opened.st_dev, opened.st_ino):
            return
        try:
            fd = self._open()
        except OSError as exc:
            if not self._astray:
                self._astray = True
                _log.warning(
                    "events go on into the file moved from %s, which cannot be opened again: "
                    "%s", self.path, exc.strerror,
                )  # fmt: skip
            return
        self._astray = False
        self._close_file()
        self._hold(fd)
        self._rest = b"\n" if _ends_mid_line(fd, self.path) else b""

    def _close_file(self) -> None:
        """Close the file open, ending first a line a full disk cut short if it can."""
        self._closer.detach()  # closed here, once
        with contextlib.suppress(OSError):  # the last chance to end that line
            if self._rest:
                os.write(self._fd, self._rest)
        os.close(self._fd)

    def emit(self, event: Event) -> None:
        """Append the event's line. A failed write (a full disk) is logged, never raised, once
        until writes succeed again; emitting to a closed sink is an :class:`InvalidInputError`."""
        line = (event.to_json() + "\n").encode()
        with self._lock:
            if self._fd < 0:
                # The number may name another file by now: never write through it.
                raise InvalidInputError(f"the event sink for {self.path} is closed")
            self._follow_path()
            data = self._rest + line
            try:
                written = os.write(self._fd, data)
            except OSError as exc:
                self._drop(exc.strerror)
                return
            # A short write (the disk filled up midway) leaves a rest only this writer knows:
            # it goes first next time. A line not even begun is dropped, so the rest stays
            # within one line.
            begun = written > len(self._rest)
            self._rest = data[written:] if begun else self._rest[written:]
            if not begun:
                self._drop("the disk took only part of a line")
            elif self._dropped is not None:
                dropped, path = self._dropped, self.path
                _log.warning("events written to %s again: %d were dropped", path, dropped)
                self._dropped = None

    def _drop(self, why: str | None) -> None:
        """Count an event not written; the first since writes succeeded is told of."""
        if self._dropped is None:
            self._dropped = 0
            _log.warning(
                "events not written to %s: %s; more are dropped, without a word, until "
                "writing works again", self.path, why,
            )  # fmt: skip
        self._dropped += 1

    def close(self) -> None:
        """Close the file; closing again does nothing."""
        with self._lock:
            if self._fd >= 0:
                try:
                    self._close_file()
                finally:
                    self._fd = -1


def _ends_mid_line(fd: int, path: Path) -> bool:
    """Whether the regular file open at ``fd`` (write-only) ends inside a line."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        return False  # a device or a pipe has no end to look at
    try:
        # Not os.pread nor os.O_NONBLOCK, which Windows lacks: a reader of its own, seeked.
        with open_regular(path) as reader:
            reader.seek(info.st_size - 1)
            return reader.read(1) != b"\n"
    except (OSError, JsonLimitError):  # one its writer may not read, or no longer a file
        return False


class OpenTelemetrySink:
    """Records each event as an OpenTelemetry span ``toolgate.<kind>``, fields as attributes.

    Needs ``opentelemetry-api``; without it the constructor raises :class:`InvalidInputError`.
    """

    def __init__(self, tracer: Any = None) -> None:
        try:
            # Imported by name so type checking does not need opentelemetry installed.
            trace = importlib.import_module("opentelemetry.trace")
        except ImportError:
            raise InvalidInputError(
                "OpenTelemetrySink needs opentelemetry-api: pip install opentelemetry-api"
            ) from None
        self._tracer = tracer or trace.get_tracer("toolgate")

    def emit(self, event: Event) -> None:
        """Start and end one span carrying the event's fields."""
        end_ns = int(event.timestamp * 1e9)
        # A latency not measured (NaN) has no length to give the span: int() would raise.
        latency = event.latency_ms if math.isfinite(event.latency_ms) else 0.0
        start_ns = end_ns - int(latency * 1e6)
        span = self._tracer.start_span(f"toolgate.{event.kind}", start_time=start_ns)
        for key, value in event.to_dict().items():
            if value is not None:
                span.set_attribute(f"toolgate.{key}", _otel_value(value))
        span.end(end_time=end_ns)


def default_sinks() -> list[Sink]:
    """JSON logging, plus OpenTelemetry when ``opentelemetry`` is importable."""
    sinks: list[Sink] = [JsonLogSink()]
    with contextlib.suppress(InvalidInputError):
        sinks.append(OpenTelemetrySink())
    return sinks

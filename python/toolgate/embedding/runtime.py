"""ONNX Runtime, imported in this one place with its telemetry off.

Every import of ``onnxruntime`` in the package goes through here: the first import decides.
Its Linux wheels (1.31) start a telemetry thread at import, which writes
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/`` and queues events; a forked child that
exits normally (a pre-forking server's worker: gunicorn ``--preload``) then hangs for ever in
its exit handlers, destroying a condition variable the parent's thread waits on. A user who
sets ``ORT_DISABLE_TELEMETRY`` themselves keeps their value. The variable is set when
:mod:`toolgate.embedding` is imported (this module's package), not here: the first import of
``onnxruntime`` may happen on a worker thread, and changing the environment there races the
other threads reading it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["onnxruntime", "quantization"]


def onnxruntime() -> Any:
    """The ``onnxruntime`` module."""
    import onnxruntime as ort

    return ort


def quantization() -> Any:
    """The ``onnxruntime.quantization`` module (the int8 conversion)."""
    import onnxruntime.quantization as quantize

    return quantize

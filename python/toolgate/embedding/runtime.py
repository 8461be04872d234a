"""ONNX Runtime, imported in this one place with its telemetry off.

Every import of ``onnxruntime`` in the package goes through here: the first import decides.
Its Linux wheels (1.31) start a telemetry thread at import, which writes
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/`` and queues events; a forked child that
exits normally (a pre-forking server's worker: gunicorn ``--preload``) then hangs for ever in
its exit handlers, destroying a condition variable the parent's thread waits on. A user who
sets ``ORT_DISABLE_TELEMETRY`` themselves keeps their value.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["onnxruntime", "quantization"]

_TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"


def onnxruntime() -> Any:
    """The ``onnxruntime`` module."""
    os.environ.setdefault(_TELEMETRY_ENV, "1")
    import onnxruntime as ort

    return ort


def quantization() -> Any:
    """The ``onnxruntime.quantization`` module (the int8 conversion)."""
    os.environ.setdefault(_TELEMETRY_ENV, "1")
    import onnxruntime.quantization as quantize

    return quantize

"""Type stubs for ``toolgate._toolgate._testing``: hooks for tests and benchmarks only (forcing
a kernel, raw scans, the BM25 analyser). Not part of toolgate's API."""

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "active_isa",
    "analyze_text",
    "available_isas",
    "dot",
    "force_isa",
    "i8_error_bound",
    "read_probe",
    "scan",
    "scan_batch",
]

def available_isas() -> list[str]:
    """Names of the instruction sets the running CPU can execute, best first."""

def active_isa() -> str:
    """Name of the instruction set the scans currently use."""

def force_isa(name: str | None) -> None:
    """Forces every later scan onto the named instruction set; ``None`` restores detection."""

def scan(
    query: NDArray[np.float32],
    rows: NDArray[Any],
    dtype: str = "f32",
    scales: NDArray[np.float32] | None = None,
    *,
    padded: bool = False,
) -> NDArray[np.float32]:
    """Scores of one query against every row (times ``scales`` for int8)."""

def scan_batch(
    queries: NDArray[np.float32],
    rows: NDArray[Any],
    dtype: str = "f32",
    scales: NDArray[np.float32] | None = None,
    *,
    padded: bool = False,
) -> NDArray[np.float32]:
    """Scores of several queries against every row, ``(n_queries, n_rows)``."""

def read_probe(rows: NDArray[np.float32]) -> float:
    """Sum of every value, read as fast as memory allows: the floor of a scan."""

def dot(a: NDArray[np.float32], b: NDArray[np.float32]) -> float:
    """Dot product of two float32 vectors of equal length."""

def i8_error_bound(query: NDArray[np.float32], scale: float) -> float:
    """Upper bound on ``|int8 score - f32 score|`` for a row with this scale."""

def analyze_text(text: str, *, keep_stop_words: bool = False) -> list[str]:
    """The terms BM25 indexes for ``text``."""

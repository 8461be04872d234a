"""Unit-length rows: cosine scores are plain dot products over them."""

from __future__ import annotations

import numpy as np

__all__ = ["normalised"]


def normalised(matrix: np.ndarray) -> np.ndarray:
    """Each row of ``matrix`` scaled to L2 norm 1 (a zero row stays zero), as a C-contiguous
    float32 array.

    >>> normalised(np.array([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.ascontiguousarray(rows / np.where(norms > 0, norms, 1.0), dtype=np.float32)

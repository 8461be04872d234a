"""Tool rows centred on their catalog: what every tool's text shares, taken out.

MiniLM puts every tool description in one narrow cone ("a tool that gets ...", "Parameters:
..."), so a request's cosine with any tool is largely the part all tools share, and the part
that tells two tools apart is small beside it. Each row is therefore the tool's embedding less
an *offset*, a share of the catalog's mean row, made unit length again; requests are embedded
as before. A row near the mean (a generic tool) loses more of its length than a distinct one,
so once made unit again its own part counts for more (measurements: docs/design.md, "Rows
centred on the catalog").

The mean of a few tools is mostly those tools themselves (of two near copies, it *is* them),
not what a catalog's texts share, so the share shrinks with the catalog:
``share * n / (n + SMALL_CATALOG)`` of the mean of ``n`` rows. The offset is saved with the
router, and :func:`uncentred` gives back the model's rows from the stored ones: a refresh
centres every row on the new catalog's mean (a catalog that grows server by server is not left
centred on its first server's), and ``Router.recentred`` centres a router anew, both without
embedding the tools they keep.

>>> rows = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
>>> offset = centring_offset(rows, 0.75)
>>> [round(float(x), 3) for x in offset]
[0.035, 0.018]
>>> [round(float(x), 3) for x in centred(rows, offset)[1]]
[0.585, 0.811]
"""

from __future__ import annotations

import numpy as np

from toolgate.embedding.normalise import normalised

__all__ = ["SMALL_CATALOG", "centred", "centring_offset", "offset_numbers", "uncentred"]

#: The catalog size at which the offset is half of ``share`` times the mean row.
SMALL_CATALOG = 32


def centring_offset(rows: np.ndarray, share: float) -> np.ndarray | None:
    """The offset to take from each of ``rows`` (unit tool embeddings, one per row), for
    ``RouterConfig.row_centring`` = ``share``; ``None`` when nothing is taken."""
    n = len(rows)
    if share == 0.0 or n == 0:
        return None
    mean = np.asarray(rows, dtype=np.float64).mean(axis=0)
    offset: np.ndarray = (share * n / (n + SMALL_CATALOG) * mean).astype(np.float32)
    return offset


def centred(rows: np.ndarray, offset: np.ndarray | None) -> np.ndarray:
    """``rows`` less ``offset``, each made unit length again (``rows`` as they are without an
    offset)."""
    if offset is None:
        return np.ascontiguousarray(rows, dtype=np.float32)
    return normalised(np.asarray(rows, dtype=np.float32) - offset)


def uncentred(rows: np.ndarray, offset: np.ndarray | None) -> np.ndarray:
    """The unit rows that :func:`centred` made ``rows`` (unit rows) from with ``offset``.

    A row ``c`` came from the unit row ``n * c + offset``, where ``n`` is the length it had
    before it was made unit again: the positive root of ``|n * c + offset| = 1``. The offset
    is shorter than 1 (a share of a mean of unit rows), so the root exists.
    """
    rows = np.asarray(rows, dtype=np.float64)
    if offset is None:
        return np.ascontiguousarray(rows, dtype=np.float32)
    offset64 = np.asarray(offset, dtype=np.float64)
    along = rows @ offset64
    length = -along + np.sqrt(along**2 - offset64 @ offset64 + 1.0)
    return normalised(length[:, None] * rows + offset64)


def offset_numbers(offset: np.ndarray) -> tuple[float, ...]:
    """``offset`` as the shortest numbers that read back as the same float32 values, for the
    manifest: there every digit counts, so its checksum catches a change to any of them."""
    return tuple(float(str(value)) for value in np.asarray(offset, dtype=np.float32))

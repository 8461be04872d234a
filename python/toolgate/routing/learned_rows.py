"""What the learned store keeps of one request: a keyed hash of its text, never the text, and
its vector as int8 codes with a scale (a quarter of float32's bytes)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolgate.arguments import finite_number
from toolgate.errors import InvalidInputError

__all__ = [
    "LEARN_SALT_ENV",
    "LearnedRow",
    "decode_vector",
    "encode_vector",
    "learned_row",
    "query_key",
    "salt_bytes",
]

#: The environment variable a store takes its salt from when it is given none.
LEARN_SALT_ENV = "TOOLGATE_LEARN_SALT"
# blake2b takes a key of at most this many bytes; a longer salt is hashed to it.
_MAX_KEY_BYTES = 64
# The largest finite float32, as a Python float (compared exactly with an int too).
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def query_key(text: str, salt: bytes = b"") -> bytes:
    """A 16-byte digest of a query's text: repeats of one query merge, the text is not kept.

    Keyed with ``salt`` (blake2b's keyed mode) when one is given; without one, anyone who can
    read the digests can test a guessed query, since the hash is the text's alone."""
    key = salt if len(salt) <= _MAX_KEY_BYTES else hashlib.blake2b(salt).digest()
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16, key=key).digest()


def salt_bytes(salt: str | bytes | None) -> bytes:
    """``salt`` as bytes; ``None``: ``$TOOLGATE_LEARN_SALT`` (unset or empty: no salt)."""
    if salt is None:
        return os.fsencode(os.environ.get(LEARN_SALT_ENV, ""))
    if isinstance(salt, bytes):
        return salt
    if not isinstance(salt, str):
        raise InvalidInputError(f"a store's salt is a str or bytes, got {type(salt).__name__}")
    try:
        return salt.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("a store's salt holds a lone surrogate") from None


@dataclass(frozen=True)
class LearnedRow:
    """One stored query vector and the tool it served."""

    seq: int
    tool: str
    server: str
    key: bytes
    vector: np.ndarray
    weight: float
    at: float


def encode_vector(vector: np.ndarray) -> tuple[bytes, float]:
    """``vector`` as int8 codes and their scale (``vector ~= scale * codes``)."""
    peak = float(np.max(np.abs(vector))) if vector.size else 0.0
    scale = peak / 127.0 if peak > 0 else 0.0
    codes = np.zeros(vector.shape, np.int8) if scale == 0 else np.round(vector / scale)
    return np.clip(codes, -127, 127).astype(np.int8).tobytes(), scale


def decode_vector(codes: bytes, scale: float) -> np.ndarray:
    """The float32 vector of :func:`encode_vector`'s codes and scale."""
    vector: np.ndarray = np.frombuffer(bytes(codes), dtype=np.int8).astype(np.float32)
    vector *= np.float32(scale)
    return vector


def learned_row(raw: tuple[Any, ...], dim: int | None) -> LearnedRow | None:
    """The row of a SELECT of the store's columns (``seq, tool, server, query_key, codes,
    scale, weight, at``), or ``None`` when it is damaged."""
    seq, tool, server, key, codes, scale, weight, at = raw
    blobs = (bytes, bytearray, memoryview)
    if not (isinstance(key, blobs) and isinstance(codes, blobs)):
        return None
    if dim is not None and len(codes) != dim:
        return None
    # The store keeps 64-bit floats, the index 32-bit ones: a weight of 1e39 is finite in
    # the one and infinite in the other, and the index would refuse every row read with it.
    if not (_finite_float32(scale) and _finite_float32(weight)):
        return None
    with np.errstate(over="ignore"):
        vector = decode_vector(bytes(codes), scale)
    if not np.isfinite(vector).all():  # codes times a scale near float32's largest
        return None
    return LearnedRow(int(seq), tool, server, bytes(key), vector, float(weight), at)


def _finite_float32(value: object) -> bool:
    """Whether ``value`` is a number that stays finite as a float32."""
    # The isinstance is finite_number's own check, repeated for the type checker.
    return isinstance(value, (int, float)) and finite_number(value) and abs(value) <= _FLOAT32_MAX

"""The persistent embedding cache: keys, round trips, damage, several processes at once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toolgate import models
from toolgate.embed import Embedder
from toolgate.embed_cache import EmbeddingCache, cache_key


def _unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_key_separates_model_and_text() -> None:
    assert cache_key("ab", "c") != cache_key("a", "bc")
    assert cache_key("m", "text") != cache_key("m2", "text")
    assert cache_key("m", "text") == cache_key("m", "text")
    assert len(cache_key("m", "\ud800 lone surrogate")) == 32


def test_round_trip_and_misses(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "e.sqlite3", dim=8)
    rows = _unit_rows(3, 8, seed=1)
    cache.put_many("model-a", ["x", "y", "z"], rows)
    got = cache.get_many("model-a", ["y", "missing", "x"])
    assert got[1] is None
    np.testing.assert_array_equal(got[0], rows[1])
    np.testing.assert_array_equal(got[2], rows[0])
    assert cache.get_many("model-b", ["x"]) == [None]
    assert len(cache) == 3


def test_many_keys_span_several_statements(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "e.sqlite3", dim=4)
    texts = [f"t{i}" for i in range(1203)]
    rows = _unit_rows(len(texts), 4, seed=2)
    cache.put_many("m", texts, rows)
    got = cache.get_many("m", texts)
    np.testing.assert_array_equal(np.vstack([g for g in got if g is not None]), rows)


def test_wrong_sized_row_reads_as_miss(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite3"
    cache = EmbeddingCache(path, dim=4)
    cache.put_many("m", ["t"], _unit_rows(1, 4, seed=3))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE embeddings SET vector = ?", (b"\x00" * 5,))
    assert cache.get_many("m", ["t"]) == [None]


def test_shape_mismatch_is_rejected(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "e.sqlite3", dim=4)
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        cache.put_many("m", ["a", "b"], _unit_rows(2, 5, seed=4))


_WRITER = """
import sys
import numpy as np
from toolgate.embed_cache import EmbeddingCache
cache = EmbeddingCache(sys.argv[1], dim=16)
worker = int(sys.argv[2])
for round_ in range(40):
    texts = [f"text-{(worker * 7 + round_ * 3 + k) % 60}" for k in range(5)]
    rows = np.stack([np.full(16, float(t.split("-")[1]), np.float32) for t in texts])
    cache.put_many("m", texts, rows)
    for text, row in zip(texts, cache.get_many("m", texts), strict=True):
        assert row is not None and row[0] == float(text.split("-")[1]), text
"""


def test_several_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    EmbeddingCache(path, dim=16)
    workers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)]) for w in range(4)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0, 0, 0]
    cache = EmbeddingCache(path, dim=16)
    texts = [f"text-{i}" for i in range(60)]
    for text, row in zip(texts, cache.get_many("m", texts), strict=True):
        if row is not None:
            assert np.all(row == float(text.split("-")[1]))


def test_embedder_embeds_only_what_the_cache_lacks(tmp_path: Path) -> None:
    models.ensure()
    plain = Embedder("fp32")
    cached = Embedder("fp32", cache=tmp_path / "e.sqlite3")
    seen: list[str] = []
    original = cached._embed_uncached

    def spy(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return original(texts)

    cached._embed_uncached = spy  # type: ignore[method-assign]
    first = cached.embed(["alpha tool", "beta tool"])
    second = cached.embed(["beta tool", "gamma tool", "alpha tool"])
    assert seen == ["alpha tool", "beta tool", "gamma tool"]
    np.testing.assert_allclose(
        second, plain.embed(["beta tool", "gamma tool", "alpha tool"]), atol=1e-6
    )
    np.testing.assert_array_equal(second[2], first[0])
    assert cached.cache is not None
    other = Embedder("int8", cache=cached.cache)
    seen.clear()
    other.embed(["alpha tool"])
    assert len(cached.cache) == 4  # a different model id never reuses fp32 rows

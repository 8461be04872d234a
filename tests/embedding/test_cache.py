"""The persistent embedding cache: keys, round trips, damage, several processes at once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from toolgate.embedding import cache as embed_cache
from toolgate.embedding import models
from toolgate.embedding.cache import CacheWarning, EmbeddingCache, cache_key
from toolgate.embedding.embedder import DIM, Embedder
from toolgate.errors import InvalidInputError
from toolgate.routing.router import Router

_TOOLS = [
    {"name": "get_weather", "description": "Current weather for a city."},
    {"name": "send_email", "description": "Send an email to a recipient."},
    {"name": "list_files", "description": "List the files in a directory."},
]


def _unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _fake_embed(
    dim: int, calls: list[list[str]] | None = None
) -> Callable[[list[str]], np.ndarray]:
    """A stand-in model: one fixed unit vector per text, recording what it was asked."""

    def embed(texts: list[str]) -> np.ndarray:
        if calls is not None:
            calls.append(list(texts))
        return np.vstack([_unit_rows(1, dim, seed=zlib.crc32(t.encode())) for t in texts])

    return embed


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
    with pytest.warns(CacheWarning, match="1 of 1 stored vectors are damaged"):
        assert cache.get_many("m", ["t"]) == [None]


@pytest.mark.parametrize("timeout_s", [float("nan"), -1.0, float("inf"), "30"])
def test_a_wait_that_is_no_seconds_is_refused(tmp_path: Path, timeout_s: object) -> None:
    # NaN waited for ever on a locked file (no deadline passes NaN), -1 read as no wait.
    with pytest.raises(InvalidInputError, match="timeout_s must be"):
        EmbeddingCache(tmp_path / "cache.sqlite3", timeout_s=timeout_s)  # type: ignore[arg-type]


def test_shape_mismatch_is_rejected(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "e.sqlite3", dim=4)
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        cache.put_many("m", ["a", "b"], _unit_rows(2, 5, seed=4))


@pytest.mark.parametrize(
    "blob",
    [
        np.full(4, np.nan, "<f4").tobytes(),
        np.array([np.inf, 0, 0, 0], "<f4").tobytes(),
        np.zeros(4, "<f4").tobytes(),
        np.full(4, 1.0, "<f4").tobytes(),  # norm 2
        "text, not a blob",
    ],
    ids=["nan", "inf", "zero", "not-unit", "text"],
)
def test_right_sized_garbage_reads_as_miss(tmp_path: Path, blob: object) -> None:
    path = tmp_path / "e.sqlite3"
    cache = EmbeddingCache(path, dim=4)
    rows = _unit_rows(3, 4, seed=5)
    cache.put_many("m", ["a", "b", "c"], rows)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE embeddings SET vector = ? WHERE key = ?", (blob, cache_key("m", "b")))
    with pytest.warns(CacheWarning) as caught:
        got = cache.get_many("m", ["a", "b", "c", "absent"])
    assert len(caught) == 1
    assert str(path) in str(caught[0].message)
    assert "1 of 4 stored vectors are damaged" in str(caught[0].message)
    assert got[1] is None
    assert got[3] is None
    np.testing.assert_array_equal(got[0], rows[0])
    np.testing.assert_array_equal(got[2], rows[2])


def test_damaged_rows_are_embedded_again_and_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite3"
    cache = EmbeddingCache(path, dim=8)
    texts = ["alpha", "beta", "gamma"]
    expected = cache.embed_through("m", texts, _fake_embed(8))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE embeddings SET vector = ?", (np.full(8, np.nan, "<f4").tobytes(),))
    calls: list[list[str]] = []
    with pytest.warns(CacheWarning, match="3 of 3 stored vectors are damaged"):
        got = cache.embed_through("m", texts, _fake_embed(8, calls))
    np.testing.assert_array_equal(got, expected)
    assert calls == [texts]
    calls.clear()
    np.testing.assert_array_equal(cache.embed_through("m", texts, _fake_embed(8, calls)), got)
    assert calls == []  # overwritten: read back without a warning or a model run


def test_rows_the_cache_would_reject_are_neither_stored_nor_lost(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "e.sqlite3", dim=4)
    with pytest.raises(ValueError, match=r"row 1 \('b'\)"):
        cache.put_many("m", ["a", "b"], np.vstack([_unit_rows(1, 4, 6), np.zeros((1, 4))]))
    fresh = np.vstack([_unit_rows(1, 4, 7), np.full((1, 4), np.nan, np.float32)])
    got = cache.embed_through("m", ["a", "b"], lambda _texts: fresh)
    np.testing.assert_array_equal(got, fresh)
    assert len(cache) == 1


def test_router_rebuilds_over_a_nan_filled_cache(fp32: Embedder, tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite3"
    first = Router.from_tools(_TOOLS, embedder=fp32, cache=path)
    expected = first._parts.index.vectors(range(len(_TOOLS)))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE embeddings SET vector = ?", (np.full(DIM, np.nan, "<f4").tobytes(),))
    with pytest.warns(CacheWarning, match="damaged"):
        second = Router.from_tools(_TOOLS, embedder=fp32, cache=path)
    np.testing.assert_allclose(second._parts.index.vectors(range(len(_TOOLS))), expected, atol=1e-6)
    assert second.route("email my boss", top_k=1).ids[0].endswith("/send_email")


def _filled(path: Path, dim: int, n: int) -> list[str]:
    """A cache file of ``n`` rows over many pages, closed so the WAL is folded in."""
    texts = [f"text {i}" for i in range(n)]
    cache = EmbeddingCache(path, dim=dim)
    cache.embed_through("m", texts, _fake_embed(dim))
    cache.close()
    return texts


def _embeds_despite(cache: EmbeddingCache, texts: list[str], fragment: str) -> None:
    """``embed_through`` gives the model's vectors with exactly one warning naming the file."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = cache.embed_through("m", texts, _fake_embed(cache.dim))
        again = cache.embed_through("m", texts, _fake_embed(cache.dim))
    assert [w.category for w in caught] == [CacheWarning], [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert str(cache.path) in message
    assert fragment in message, message
    np.testing.assert_array_equal(got, _fake_embed(cache.dim)(texts))
    np.testing.assert_array_equal(again, got)
    assert not cache.active


def test_damaged_pages_warn_and_embed_directly(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite3"
    texts = _filled(path, DIM, 200)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    data[2 * page :] = b"\xa5" * (len(data) - 2 * page)
    path.write_bytes(bytes(data))
    _embeds_despite(EmbeddingCache(path), texts, "malformed")


def test_a_file_that_is_not_a_database_warns_on_open(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite3"
    path.write_bytes(b"definitely not sqlite" * 500)
    with pytest.warns(CacheWarning, match="cannot open it .*not a database"):
        cache = EmbeddingCache(path, dim=4)
    assert not cache.active
    assert len(cache) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(
            cache.embed_through("m", ["a"], _fake_embed(4)), _fake_embed(4)(["a"])
        )


def test_a_foreign_table_warns_on_open(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE embeddings (k BLOB, v BLOB)")
    with pytest.warns(CacheWarning, match="no such column: key"):
        cache = EmbeddingCache(path, dim=4)
    assert cache.get_many("m", ["a"]) == [None]


def test_a_lock_held_past_the_timeout_warns_and_embeds_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embed_cache, "BUSY_TIMEOUT_S", 0.05)
    path = tmp_path / "e.sqlite3"
    cache = EmbeddingCache(path, dim=4)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        _embeds_despite(cache, ["a", "b"], "database is locked")
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_default_cache_that_cannot_be_opened_does_not_stop_the_router(
    fp32: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(models.HOME_ENV, str(tmp_path))
    (tmp_path / "embeddings.sqlite3").mkdir()  # as unopenable as a read-only folder
    with pytest.warns(CacheWarning, match="unable to open database file"):
        router = Router.from_tools(_TOOLS, embedder=fp32)
    assert router.route("email my boss", top_k=1).ids[0].endswith("/send_email")


def _can_create_in(folder: Path) -> bool:
    probe = folder / ".probe"
    try:
        probe.touch()
    except PermissionError:
        return False
    probe.unlink()
    return True


@pytest.mark.parametrize("prefilled", [False, True])
def test_read_only_folder_warns_and_embeds_directly(tmp_path: Path, prefilled: bool) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "e.sqlite3"
    texts = _filled(path, 4, 3) if prefilled else ["a", "b"]
    folder.chmod(0o555)
    try:
        if _can_create_in(folder):
            pytest.skip("this user ignores file permissions (root)")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = EmbeddingCache(path, dim=4)
            got = cache.embed_through("m", texts, _fake_embed(4))
    finally:
        folder.chmod(0o755)
    assert [w.category for w in caught] == [CacheWarning], [str(w.message) for w in caught]
    assert str(path) in str(caught[0].message)
    np.testing.assert_array_equal(got, _fake_embed(4)(texts))


_WRITER = """
import sys
import numpy as np
from toolgate.embedding.cache import EmbeddingCache
cache = EmbeddingCache(sys.argv[1], dim=64)
worker = int(sys.argv[2])
for round_ in range(40):
    texts = [f"text-{(worker * 7 + round_ * 3 + k) % 60}" for k in range(5)]
    rows = np.eye(64, dtype=np.float32)[[int(t.split("-")[1]) for t in texts]]
    cache.put_many("m", texts, rows)
    for text, row in zip(texts, cache.get_many("m", texts), strict=True):
        assert row is not None and row[int(text.split("-")[1])] == 1.0, text
"""


def test_several_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    EmbeddingCache(path, dim=64)
    workers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)]) for w in range(4)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0, 0, 0]
    cache = EmbeddingCache(path, dim=64)
    texts = [f"text-{i}" for i in range(60)]
    for text, row in zip(texts, cache.get_many("m", texts), strict=True):
        if row is not None:
            np.testing.assert_array_equal(row, np.eye(64)[int(text.split("-")[1])])


@pytest.fixture(scope="module")
def fp32() -> Embedder:
    models.ensure()
    return Embedder("fp32")


def test_embedder_embeds_only_what_the_cache_lacks(fp32: Embedder, tmp_path: Path) -> None:
    plain = fp32
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

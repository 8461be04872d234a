"""The LRU schema cache: eviction order, bounds, version keying, counters, fetch, threads."""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from functools import partial

import pytest

from toolgate._toolgate import SchemaCache
from toolgate.errors import InvalidInputError


class ModelLru:
    """A plain-Python LRU with the documented rules, to compare the cache against."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.entries: OrderedDict[tuple[str, int], str] = OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def size(self) -> int:
        return sum(len(k[0].encode()) + len(v.encode()) for k, v in self.entries.items())

    def get(self, tool_id: str, version: int) -> str | None:
        key = (tool_id, version)
        if key in self.entries:
            self.hits += 1
            self.entries.move_to_end(key, last=False)
            return self.entries[key]
        self.misses += 1
        return None

    def put(self, tool_id: str, version: int, schema: str) -> bool:
        size = len(tool_id.encode()) + len(schema.encode())
        if size > self.max_bytes:
            return False
        self.entries.pop((tool_id, version), None)
        while len(self.entries) >= self.max_entries or self.size() + size > self.max_bytes:
            self.entries.popitem(last=True)
            self.evictions += 1
        self.entries[(tool_id, version)] = schema
        self.entries.move_to_end((tool_id, version), last=False)
        return True


def test_evicts_least_recently_used_first() -> None:
    cache = SchemaCache(3, 1 << 20)
    for name in "abc":
        cache.put(name, 1, "{}")
    assert cache.get("a", 1) == "{}"  # a is now the most recent
    cache.put("d", 1, "{}")
    assert cache.keys() == [("d", 1), ("a", 1), ("c", 1)]
    assert cache.get("b", 1) is None
    assert cache.stats()["evictions"] == 1


def test_byte_bound_counts_id_and_schema_utf8_bytes() -> None:
    cache = SchemaCache(100, 20)
    assert cache.put("t1", 1, "é" * 4)  # 2 + 8 bytes
    assert cache.put("t2", 1, "x" * 8)  # 2 + 8 bytes: exactly full
    assert cache.stats()["bytes"] == 20
    assert cache.put("t3", 1, "y")  # evicts t1
    assert cache.keys() == [("t3", 1), ("t2", 1)]
    assert cache.stats()["bytes"] == 13


def test_oversized_entry_is_returned_but_not_cached() -> None:
    cache = SchemaCache(10, 16)
    cache.put("small", 1, "{}")
    big = '{"type": "object", "properties": {}}'
    assert cache.put("big", 1, big) is False
    assert cache.get_or_fetch("big", 1, lambda: big) == big
    assert cache.keys() == [("small", 1)]
    assert cache.stats()["evictions"] == 0


def test_versions_never_serve_stale_schemas() -> None:
    cache = SchemaCache(10, 1000)
    cache.put("github/create_issue", 1, "old")
    assert cache.get("github/create_issue", 2) is None
    assert cache.get_or_fetch("github/create_issue", 2, lambda: "new") == "new"
    assert cache.get("github/create_issue", 2) == "new"
    assert cache.get("github/create_issue", 1) == "old"
    cache.put("github/create_issue", 2, "newer")
    assert cache.get("github/create_issue", 2) == "newer"
    assert len(cache) == 2


def test_counters_and_clear() -> None:
    cache = SchemaCache(2, 1000)
    cache.get("a", 1)
    cache.put("a", 1, "A")
    cache.get("a", 1)
    cache.get_or_fetch("b", 1, lambda: "B")
    cache.get_or_fetch("b", 1, lambda: pytest.fail("cached value must be used"))
    cache.put("c", 1, "C")
    assert cache.stats() == {"hits": 2, "misses": 2, "evictions": 1, "entries": 2, "bytes": 4}
    cache.clear()
    assert cache.stats() == {"hits": 2, "misses": 2, "evictions": 1, "entries": 0, "bytes": 0}
    assert cache.keys() == []


def test_matches_a_reference_lru_on_random_operations() -> None:
    rng = random.Random(11)
    cache, model = SchemaCache(8, 300), ModelLru(8, 300)
    for _ in range(5000):
        tool_id, version = f"tool{rng.randrange(20)}", rng.randrange(3)
        if rng.random() < 0.5:
            assert cache.get(tool_id, version) == model.get(tool_id, version)
        else:
            schema = "s" * rng.choice([0, 5, 40, 120, 400])
            assert cache.put(tool_id, version, schema) == model.put(tool_id, version, schema)
        assert cache.keys() == list(model.entries)
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["evictions"]) == (
        model.hits,
        model.misses,
        model.evictions,
    )
    assert stats["bytes"] == model.size()


def test_fetch_may_use_the_cache_without_deadlock() -> None:
    cache = SchemaCache(10, 1000)

    def fetch_outer() -> str:
        # Re-entering every operation from inside a fetch would deadlock if the lock were held.
        assert cache.get("outer", 1) is None
        cache.put("side", 1, "S")
        inner = cache.get_or_fetch("inner", 1, lambda: "I")
        return "O" + inner + str(cache.stats()["entries"])

    assert cache.get_or_fetch("outer", 1, fetch_outer) == "OI2"
    assert cache.get("outer", 1) == "OI2"


def test_fetch_runs_while_other_threads_use_the_cache() -> None:
    cache = SchemaCache(10, 1000)
    other_done = threading.Event()

    def slow_fetch() -> str:
        assert other_done.wait(timeout=10), "another thread was blocked during fetch"
        return "slow"

    def other() -> None:
        cache.put("x", 1, "X")
        assert cache.get("x", 1) == "X"
        other_done.set()

    thread = threading.Thread(target=other)
    fetching = threading.Thread(target=lambda: cache.get_or_fetch("y", 1, slow_fetch))
    fetching.start()
    thread.start()
    fetching.join()
    thread.join()
    assert cache.get("y", 1) == "slow"


def test_fetch_errors_propagate_and_cache_nothing() -> None:
    cache = SchemaCache(10, 1000)

    def broken() -> str:
        raise KeyError("no such tool")

    with pytest.raises(KeyError, match="no such tool"):
        cache.get_or_fetch("t", 1, broken)
    with pytest.raises(InvalidInputError, match=r"returned dict, expected the schema as a str"):
        cache.get_or_fetch("t", 1, lambda: {"type": "object"})  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidInputError, match="fetch must be callable"):
        cache.get_or_fetch("t", 1, "not callable")  # type: ignore[arg-type]
    assert len(cache) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 100), "max_entries must be a positive int, got 0"),
        ((10, -1), "max_bytes must be a positive int, got -1"),
        ((1.5, 100), "max_entries must be a positive int"),
    ],
)
def test_bad_bounds(args: tuple[object, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        SchemaCache(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [-1, 2**64, "1", 1.0])
def test_bad_versions(version: object) -> None:
    cache = SchemaCache(1, 10)
    with pytest.raises(InvalidInputError, match="version must be an int"):
        cache.get("t", version)  # type: ignore[arg-type]


def test_eight_threads_hammering() -> None:
    cache = SchemaCache(50, 4000)
    gets = [0] * 8
    errors: list[str] = []

    def schema_of(tool_id: str, version: int) -> str:
        return f'{{"id": "{tool_id}", "v": {version}}}'

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(3000):
            tool_id, version = f"server/tool{rng.randrange(120)}", rng.randrange(2)
            op = rng.random()
            if op < 0.4:
                gets[seed] += 1
                got = cache.get(tool_id, version)
                if got is not None and got != schema_of(tool_id, version):
                    errors.append(f"wrong value for {tool_id}@{version}: {got}")
            elif op < 0.8:
                gets[seed] += 1
                got = cache.get_or_fetch(tool_id, version, partial(schema_of, tool_id, version))
                if got != schema_of(tool_id, version):
                    errors.append(f"wrong fetched value for {tool_id}@{version}")
            elif op < 0.99:
                cache.put(tool_id, version, schema_of(tool_id, version))
            else:
                cache.clear()
            stats = cache.stats()
            if stats["entries"] > 50 or stats["bytes"] > 4000:
                errors.append(f"bound exceeded: {stats}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = cache.stats()
    assert stats["hits"] + stats["misses"] == sum(gets)
    assert stats["hits"] > 0
    assert stats["evictions"] > 0
    keys = cache.keys()
    assert len(keys) == len(set(keys)) == stats["entries"]
    assert stats["bytes"] == sum(len(k) + len(schema_of(k, v)) for k, v in keys)

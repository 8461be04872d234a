"""Shared SQLite files (the embedding cache, the learned store) opened by several processes
at once while the file is new, as a gateway's workers do on a first deploy."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
import warnings
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from tests.conftest import file_mode, without_root_override
from toolgate import sqlite_files
from toolgate.embedding.cache import EmbeddingCache
from toolgate.routing.learned_store import SqliteStore
from toolgate.sqlite_files import open_shared_sqlite

KINDS = ("cache", "store")
PROCESSES = 4
ROUNDS = 100
SCHEMA = ["CREATE TABLE IF NOT EXISTS t (k)"]


def _open(kind: str, path: Path) -> str:
    """How opening ``path`` as ``kind`` went: "ok", or what failed."""
    if kind == "cache":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = EmbeddingCache(path)
        active = cache.active
        cache.close()
        return "ok" if active else "; ".join(str(warning.message) for warning in caught)
    try:
        SqliteStore(path).close()
    except Exception as exc:  # the test reports whatever it was
        return f"{type(exc).__name__}: {exc}"
    return "ok"


# _open in a process of its own: python -c _OPEN KIND PATH prints how it went.
_OPEN = """
import sys
from pathlib import Path
from tests.test_sqlite_files import _open

print(_open(sys.argv[1], Path(sys.argv[2])))
"""
REPO = Path(__file__).parents[1]


def _opener(paths: list[Path], start: Barrier, results: Queue[list[str]]) -> None:
    """Opens each of ``paths`` together with the other processes, one round per path, as
    the cache and the store in turn."""
    outcomes = []
    for round_, path in enumerate(paths):
        start.wait()
        outcomes.append(_open(KINDS[round_ % 2], path))
    results.put(outcomes)


def test_processes_opening_one_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    paths = [tmp_path / f"round-{n}" / "shared.sqlite3" for n in range(ROUNDS)]
    # Spawned, not forked: a fork of a process running the model's threads may hang.
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    results: Queue[list[str]] = context.Queue()
    workers = [
        context.Process(target=_opener, args=(paths, start, results)) for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    outcomes = [outcome for _ in workers for outcome in results.get(timeout=60)]
    for worker in workers:
        worker.join(60)
    assert len(outcomes) == PROCESSES * ROUNDS
    assert sorted(set(outcomes)) == ["ok"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_switch_to_wal_refused_at_once_is_tried_again(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "new.sqlite3"
    # Another process mid-way through its own set-up of the new file: SQLite refuses this
    # one's switch to WAL at once (waiting could deadlock), whatever its busy timeout.
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if other.in_transaction:
            other.execute("COMMIT")

    monkeypatch.setattr(sqlite_files, "sleep", pause, raising=False)
    outcome = _open(kind, path)
    other.close()
    assert outcome == "ok"
    assert len(pauses) == 1


def test_a_file_already_in_wal_mode_opens_without_switching(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    open_shared_sqlite(path, timeout_s=1.0, schema=SCHEMA).close()
    db = open_shared_sqlite(path, timeout_s=1.0, schema=SCHEMA)
    (mode,) = db.execute("PRAGMA journal_mode").fetchone()
    db.close()
    assert mode == "wal"


def test_a_file_that_is_no_database_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    path.write_bytes(b"not a database, " * 64)
    with pytest.raises(sqlite3.DatabaseError, match="not a database"):
        open_shared_sqlite(path, timeout_s=30.0, schema=[])


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_in_a_folders_place_is_named_as_no_folder(kind: str, tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file, not a folder")
    outcome = _open(kind, tmp_path / "state" / "shared.sqlite3")
    assert f"Not a directory: '{tmp_path / 'state'}'" in outcome
    assert "File exists" not in outcome


@pytest.mark.parametrize("kind", KINDS)
def test_a_link_to_no_folder_is_named_as_such(kind: str, tmp_path: Path) -> None:
    # A link to a folder that does not exist is no file in the folder's place.
    (tmp_path / "state").symlink_to(tmp_path / "gone")
    outcome = _open(kind, tmp_path / "state" / "shared.sqlite3")
    assert f"a symbolic link to a folder that does not exist: '{tmp_path / 'state'}'" in outcome
    assert not (tmp_path / "gone").exists()


@pytest.mark.usefixtures("usual_umask")
def test_a_private_file_and_its_wal_are_for_their_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "private.sqlite3"
    db = open_shared_sqlite(path, timeout_s=5, schema=SCHEMA, private=True)
    db.execute("INSERT INTO t VALUES (1)")  # the -wal and -shm files exist while it is open
    modes = {p.name: file_mode(p) for p in tmp_path.iterdir()}
    db.close()
    assert modes == dict.fromkeys(
        ["private.sqlite3", "private.sqlite3-wal", "private.sqlite3-shm"], "-rw-------"
    )


@pytest.mark.usefixtures("usual_umask")
def test_a_private_file_that_exists_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "mine.sqlite3"
    sqlite3.connect(path).close()
    path.chmod(0o640)
    open_shared_sqlite(path, timeout_s=5, schema=SCHEMA, private=True).close()
    assert file_mode(path) == "-rw-r-----"


@pytest.mark.usefixtures("usual_umask")
def test_the_learned_store_is_created_for_its_owner_only(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "learned.sqlite3")
    store.use("scope", store, keep=8, lease_s=60.0, now=1.0)  # a write: the -wal file exists
    modes = {p.name: file_mode(p) for p in tmp_path.iterdir()}
    store.close()
    assert set(modes.values()) == {"-rw-------"}
    assert len(modes) == 3


@pytest.mark.parametrize(("umask", "mode"), [(0o002, "-rw-rw-r--"), (0o000, "-rw-rw-r--")])
def test_a_shared_file_is_writable_by_the_group_the_umask_lets_share_it(
    tmp_path: Path, umask: int, mode: str
) -> None:
    """A folder a group shares (setgid, umask 002): SQLite made the file 0644, which the
    group's other users could not write; a umask of 000 never makes it writable by all."""
    path = tmp_path / "shared.sqlite3"
    old = os.umask(umask)
    try:
        db = open_shared_sqlite(path, timeout_s=5, schema=SCHEMA)
        db.execute("INSERT INTO t VALUES (1)")  # the -wal and -shm files exist while it is open
        modes = {p.name: file_mode(p) for p in tmp_path.iterdir()}
        db.close()
    finally:
        os.umask(old)
    assert modes == dict.fromkeys(
        ["shared.sqlite3", "shared.sqlite3-wal", "shared.sqlite3-shm"], mode
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_this_user_may_not_write_is_refused_and_left_as_it_was(
    kind: str, tmp_path: Path
) -> None:
    """Another user's file in a folder both may write: SQLite opened it read-only and left
    its -wal and -shm files, of this user, behind; its owner could then not open it."""
    path = tmp_path / "theirs.sqlite3"
    open_shared_sqlite(path, timeout_s=5, schema=SCHEMA).close()
    path.chmod(0o444)
    try:
        # In a process of its own: root's (CI's) is made to heed the file's permissions.
        run = subprocess.run(
            without_root_override([sys.executable, "-c", _OPEN, kind, str(path)]),
            capture_output=True, text=True, timeout=60, check=True, cwd=REPO,
        )  # fmt: skip
        outcome = run.stdout.strip()
        left = sorted(p.name for p in tmp_path.iterdir())
    finally:
        path.chmod(0o644)
    assert "not writable by this process" in outcome
    assert str(path) in outcome
    assert left == ["theirs.sqlite3"]
    assert _open(kind, path) == "ok"


def test_a_step_waits_on_a_lock_only_until_the_set_ups_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0.4 s of the 0.5 s went by before the step (another process's set-up, say).
    clock = iter([0.0])
    monkeypatch.setattr(sqlite_files, "monotonic", lambda: next(clock, 0.4))
    waits: list[int] = []
    create = sqlite_files._create

    def recording(db: sqlite3.Connection, schema: list[str]) -> None:
        waits.append(db.execute("PRAGMA busy_timeout").fetchone()[0])
        create(db, schema)

    monkeypatch.setattr(sqlite_files, "_create", recording)
    db = open_shared_sqlite(tmp_path / "shared.sqlite3", timeout_s=0.5, schema=SCHEMA)
    (after,) = db.execute("PRAGMA busy_timeout").fetchone()
    db.close()
    assert waits == [100]
    assert after == 500  # the set-up done, each wait has the whole timeout again


def test_a_private_file_through_a_link_to_no_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.sqlite3"
    (tmp_path / "learned.sqlite3").symlink_to(target)
    with pytest.raises(FileNotFoundError, match="symbolic link"):
        open_shared_sqlite(tmp_path / "learned.sqlite3", timeout_s=5, schema=SCHEMA, private=True)
    assert not target.exists()


@pytest.mark.parametrize("timeout_s", [float("inf"), 1e9])
def test_a_wait_past_what_sqlite_takes_is_its_longest(tmp_path: Path, timeout_s: float) -> None:
    # SQLite's busy timeout is a C int of milliseconds: past it, it read no wait at all.
    db = open_shared_sqlite(tmp_path / "a.sqlite3", timeout_s=timeout_s, schema=())
    assert db.execute("PRAGMA busy_timeout").fetchone() == (2**31 - 1,)


# In a process of its own, as a pre-forking server's master: a worker forked from it writes
# through the master's cache or store, the master writes and closes its own, and the worker
# writes on. Prints the rows a new connection then reads: 20 by each of the four writes.
_MASTER_CLOSES = """
import os, signal, sqlite3, sys
import numpy as np
from toolgate.embedding.cache import EmbeddingCache
from toolgate.routing.learned_store import SqliteStore

kind, path = sys.argv[1], sys.argv[2]
vector = np.eye(4, dtype=np.float32)[0]
if kind == "cache":
    shared = EmbeddingCache(path, dim=4)
    def write(tag):
        texts = [f"{tag}{i}" for i in range(20)]
        shared.put_many("m", texts, np.tile(vector, (len(texts), 1)))
    table = "embeddings"
else:
    shared = SqliteStore(path)
    def write(tag):
        for i in range(20):
            shared.insert("s", f"{tag}/{i}", "t", b"k", vector, 0.0)
    table = "learned"
write("master")
go, went = os.pipe()
wrote, written = os.pipe()
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    write("before")
    os.write(written, b"x")
    os.read(go, 1)  # the master closed its connection
    write("after")
    os._exit(0)
os.read(wrote, 1)
write("again")  # the worker's leaving its copy of the connection left the master's alone
shared.close()
os.write(went, b"x")
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
print(sqlite3.connect(path).execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("kind", KINDS)
def test_a_workers_writes_outlive_the_masters_close(kind: str, tmp_path: Path) -> None:
    # The worker's connection took SQLite's locks for itself: the master's close, seeing no
    # other process, deleted the -wal file the worker went on writing to.
    run = subprocess.run(
        [sys.executable, "-c", _MASTER_CLOSES, kind, str(tmp_path / "shared.sqlite3")],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert run.stdout.strip() == "80"


# A process whose store is written by a thread when it exits, the write waiting on another
# process's lock (here another connection's, held to the end) for up to 20 s.
_EXIT_WHILE_WRITING = """
import sqlite3, sys, threading, time
import numpy as np
from toolgate.routing.learned_store import SqliteStore

path = sys.argv[1]
store = SqliteStore(path, timeout_s=20)
idle = SqliteStore(path + ".idle")  # no thread uses it: closed at exit
holder = sqlite3.connect(path, isolation_level=None)
holder.execute("BEGIN IMMEDIATE")
vector = np.eye(4, dtype=np.float32)[0]
writer = threading.Thread(
    target=store.insert, args=("s", "t/x", "t", b"k", vector, 0.0), daemon=True
)
writer.start()
while not store._lock.locked():  # the write holds its store until SQLite's wait ends
    time.sleep(0.01)
time.sleep(0.2)
"""


def test_a_write_waiting_on_another_process_holds_no_exit_up(tmp_path: Path) -> None:
    # A learning queue's thread writing to a stalled store: its close returns (lessons
    # dropped), but closing the store's connection at exit waited out SQLite's busy timeout
    # (30 s by default) for the thread's statement.
    path = tmp_path / "learned.sqlite3"
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", _EXIT_WHILE_WRITING, str(path)], timeout=60, check=True)
    assert time.monotonic() - start < 10
    assert not Path(f"{path}.idle-wal").exists()  # an idle connection is still closed

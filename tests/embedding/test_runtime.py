"""ONNX Runtime is imported in one place, with its telemetry off, whichever path gets there."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import toolgate

PACKAGE = Path(toolgate.__file__).parent
THE_ONE_PLACE = PACKAGE / "embedding" / "runtime.py"

# The int8 conversion's route to the quantizer (`toolgate model ensure`), in a fresh process:
# a graph without the nodes it keeps in float32 stops it right after the import.
_QUANTIZE = """
import os, sys, onnx
from toolgate.embedding import convert
from toolgate.errors import ModelError
try:
    convert._quantize(onnx.ModelProto())
except ModelError:
    pass
assert "onnxruntime.quantization" in sys.modules
print(os.environ.get("ORT_DISABLE_TELEMETRY"))
"""


def _imports_onnxruntime(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] == "onnxruntime" for name in names):
            return True
    return False


def test_only_the_runtime_module_imports_onnxruntime() -> None:
    importers = [path for path in sorted(PACKAGE.rglob("*.py")) if _imports_onnxruntime(path)]
    assert importers == [THE_ONE_PLACE]


def test_the_int8_conversion_starts_no_telemetry(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
    run = subprocess.run(
        [sys.executable, "-c", _QUANTIZE], env=env, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "1"
    assert not (home / ".cache" / "Microsoft").exists()


def test_the_telemetry_is_switched_off_at_import_not_from_a_worker_thread() -> None:
    # Importing the package sets it, on the importing thread: no thread builds a session yet.
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    code = "import os, toolgate.embedding; print(os.environ.get('ORT_DISABLE_TELEMETRY'))"
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "1"


# A process exiting while daemon threads embed (a learning queue's worker, an app's own),
# run until at least one text went through each thread.
_EXIT_WHILE_EMBEDDING = """
import threading
from toolgate.embedding.embedder import Embedder

embedder = Embedder(precision="int8")
started = threading.Semaphore(0)

def embed_for_ever() -> None:
    while True:
        embedder.embed([f"text {i} of a batch" for i in range(16)])
        started.release()

for _ in range(2):
    threading.Thread(target=embed_for_ever, daemon=True).start()
for _ in range(4):
    started.acquire()
"""


def test_a_process_exits_cleanly_while_daemon_threads_embed() -> None:
    # CPython (3.11-3.13) ends a daemon thread returning from ONNX Runtime after shutdown
    # began with pthread_exit, whose unwinding through ONNX Runtime's C++ frames called
    # std::terminate: SIGABRT, exit code 134, a core dump, two runs in three.
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-c", _EXIT_WHILE_EMBEDDING], capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert (run.returncode, run.stderr) == (0, "")


# An exit hook registered before toolgate's (so run after it: atexit runs the last first)
# that waits for a daemon thread about to call into ONNX Runtime, as a learning queue's
# close() or a thread pool's join does.
_JOINED_AT_EXIT = """
import atexit
import threading

go = threading.Event()
threads: list[threading.Thread] = []

def wait_for_the_worker() -> None:
    go.set()
    threads[0].join()
    print("joined")

atexit.register(wait_for_the_worker)

from toolgate.embedding import runtime
from toolgate.errors import ModelError

runtime.EXIT_WAIT_S = 0.5

def work() -> None:
    go.wait()
    try:
        with runtime.call_under_way():
            print("ran")
    except ModelError as exc:
        print("refused:", exc)

threads.append(threading.Thread(target=work, daemon=True))
threads[0].start()
"""


def test_a_daemon_thread_an_exit_hook_waits_for_is_refused_not_parked_for_ever() -> None:
    # It waited on a lock for ever, and its joiner with it: the process never exited.
    run = subprocess.run(
        [sys.executable, "-c", _JOINED_AT_EXIT], capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    refused, joined = run.stdout.splitlines()
    assert refused.startswith("refused: ")
    assert "exiting" in refused
    assert joined == "joined"


# As _JOINED_AT_EXIT, with a worker that goes on to its next call once one is refused, as a
# learning queue's does with its next lesson. Prints how long the hook waited for it.
_JOINED_AT_EXIT_AFTER_CALLS = """
import atexit
import threading
import time

go = threading.Event()
threads: list[threading.Thread] = []

def wait_for_the_worker() -> None:
    start = time.monotonic()
    go.set()
    threads[0].join()
    print(time.monotonic() - start)

atexit.register(wait_for_the_worker)

from toolgate.embedding import runtime
from toolgate.errors import ModelError

runtime.EXIT_WAIT_S = 1.0

def work() -> None:
    go.wait()
    for _ in range(6):  # lessons waiting
        try:
            with runtime.call_under_way():
                print("ran")
        except ModelError:
            print("refused")

threads.append(threading.Thread(target=work, daemon=True))
threads[0].start()
"""


def test_a_daemon_threads_calls_at_exit_wait_once_in_all_not_once_each() -> None:
    # Each refused call waited EXIT_WAIT_S anew: a queue of 1,024 lessons held the exit hook
    # that joined its worker for hours.
    run = subprocess.run(
        [sys.executable, "-c", _JOINED_AT_EXIT_AFTER_CALLS], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    *calls, waited = run.stdout.splitlines()
    assert calls == ["refused"] * 6
    assert float(waited) < 4.0  # one wait of 1 s, not six

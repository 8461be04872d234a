"""Locks a forked child finds released, whoever held them at the fork."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# In a process of its own: a fork with another thread running warns on Python 3.12+, which
# the test run turns into an error. Exits 0 if the child took the lock, 3 if it could not.
_HELD_AT_FORK = """
import os, sys, threading
from toolgate.forks import fork_safe_lock

lock = fork_safe_lock()
held, done = threading.Event(), threading.Event()

def hold():
    with lock:
        held.set()
        done.wait(10)

holder = threading.Thread(target=hold)
holder.start()
held.wait(10)
pid = os.fork()
if pid == 0:  # the child has no holder thread to release it
    os._exit(0 if lock.acquire(timeout=5) else 3)
status = os.waitpid(pid, 0)[1]
still_held = lock.locked()  # the parent's holder still has it
done.set()
holder.join()
sys.exit(os.waitstatus_to_exitcode(status) if still_held else 5)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_lock_held_by_another_thread_at_the_fork_is_free_in_the_child() -> None:
    run = subprocess.run([sys.executable, "-c", _HELD_AT_FORK], timeout=60, check=False)
    assert run.returncode == 0

"""The filter's routers by tools array (``Indexes``) in a worker a pre-forking server forks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

# In a process of its own, as a pre-forking server's master: a thread builds one tools
# array's index when a worker is forked. The worker asks for the same array; exits 0 if it
# built it itself, 3 if it got the master's, and dies of its alarm if it waited for ever.
_BUILDING_AT_FORK = """
import os, signal, threading
from toolgate.gateway.indexes import Indexes
from toolgate.lazy import Lazy
from toolgate.routing.config import RouterConfig

building, release = threading.Event(), threading.Event()

class Held(Indexes):
    def _build(self, read, reader, key):  # the master's build waits for the test
        if threading.current_thread() is not threading.main_thread():
            building.set()
            release.wait(10)
        return f"built by {os.getpid()}"

indexes = Held(
    config=RouterConfig(), embedder=Lazy(None, lambda: None), cache=None, store=None,
    max_catalogs=4, unreadable="error",
)
builder = threading.Thread(target=indexes.get, args=("key", "openai", list, True))
builder.start()
building.wait(10)
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    got = indexes.get("key", "openai", list, True)
    os._exit(0 if got == f"built by {os.getpid()}" else 3)
release.set()
builder.join()
os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) % 256)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_build_in_flight_at_the_fork_is_built_again_in_the_worker() -> None:
    # The build's thread is the master's: the worker's requests for the array waited for ever
    # on a build that never ended there.
    run = subprocess.run([sys.executable, "-c", _BUILDING_AT_FORK], timeout=120, check=False)
    hung = 256 - signal.SIGALRM  # the worker waited for ever, killed by its alarm
    assert run.returncode != hung, "the worker waited for ever"
    assert run.returncode == 0

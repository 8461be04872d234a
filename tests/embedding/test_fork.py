"""A pre-forking server's worker (gunicorn --preload) inherits the parent's embedder: it must
embed and exit normally, never hang in ONNX Runtime's exit handlers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from toolgate.embedding import models

# In a process of its own: it imports ONNX Runtime first, as a server's master would.
_WORKER = """
import os, sys
from toolgate.embedding.embedder import Embedder

embedder = Embedder("int8", threads={threads})
text = "open an issue about the crash"
expected = embedder.embed(text)
pid = os.fork()
if pid == 0:  # the worker: embeds, then exits as gunicorn's do (sys.exit: every exit handler)
    sys.exit(0 if (embedder.embed(text) == expected).all() else 3)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def _run_worker(threads: int) -> int:
    """The exit code of a forked worker, or -1 if it hung (the group is then killed)."""
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    code = _WORKER.format(threads=threads)
    with subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True) as run:
        try:
            return run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)  # the parent and its hung child
            run.wait()
            return -1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("threads", [1, 2])
def test_a_forked_worker_embeds_and_exits(threads: int) -> None:
    # threads=2: a session with an intra-op pool, whose threads the child does not have.
    models.ensure()
    assert _run_worker(threads) == 0

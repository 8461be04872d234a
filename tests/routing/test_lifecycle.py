"""A router's resources over its life: its temporary directory, across fork and collection."""

from __future__ import annotations

import atexit
import os
from pathlib import Path

import pytest

from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.routing.router import Router

TOOLS = {
    "weather": {"tools": [{"name": "get_forecast", "description": "Weather forecast."}]},
    "mail": {"tools": [{"name": "send_email", "description": "Send an email."}]},
}


def _temporary_router(embedder: Embedder) -> Router:
    return Router.from_catalog(Catalog.load(TOOLS), embedder=embedder, cache=None)


def _exit_as_a_worker() -> None:
    """What a forked worker's normal exit (``sys.exit`` in a gunicorn worker) runs in Python,
    its ``atexit`` handlers, then out without the C runtime's exit handlers."""
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit(0)


# Python 3.12 warns that forking a threaded process may deadlock: what pre-forking servers do.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_exiting_leaves_its_parent_the_temporary_index(
    embedder: Embedder, tmp_path: Path
) -> None:
    router = _temporary_router(embedder)
    pid = os.fork()
    if pid == 0:
        _exit_as_a_worker()
    os.waitpid(pid, 0)
    router.save(tmp_path / "saved")  # reads the index files from the temporary directory
    assert (tmp_path / "saved" / "router.json").is_file()

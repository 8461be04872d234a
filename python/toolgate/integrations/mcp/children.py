"""The server processes one proxy started, told apart from every other process, and killed.

Closing a stdio upstream gives its server a grace period after its stdin closes, then
SIGTERM, then SIGKILL (the MCP SDK's shutdown, about four seconds in all). The proxy's own
client grants the proxy the same two seconds before killing it, and a server that is stuck
(a tool blocking its event loop, a start that hangs) would outlive a proxy killed mid-way:
each server runs in a session of its own, out of reach of a signal to the proxy's group.
So every server the proxy starts carries a tag in its environment, one per
:class:`~toolgate.integrations.mcp.upstreams.Upstreams`, and :func:`kill_tagged` ends the
processes that still carry it, found through ``/proc`` (Linux; elsewhere it finds none and
the SDK's shutdown is all there is). The tag, not the parent, says which: a host embedding
the proxy may have children of its own, and a server's own subprocesses inherit the tag.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path

__all__ = ["TAG_ENV", "exists", "kill_tagged", "new_tag"]

#: The environment variable that marks a process as one of a proxy's upstream servers.
TAG_ENV = "TOOLGATE_MCP_UPSTREAM"

_PROC = Path("/proc")


def new_tag() -> str:
    """A tag no other proxy's servers carry."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def kill_tagged(tag: str) -> list[int]:
    """SIGKILL every process whose environment carries ``tag`` (its whole process group when
    it leads one), and return their ids."""
    marker = f"{TAG_ENV}={tag}".encode()
    killed = []
    for pid in _tagged(marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # A server started in a session of its own leads its group: its children go too.
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def exists(pid: int) -> bool:
    """Whether process ``pid`` is there, a zombie not yet reaped included (Linux)."""
    return (_PROC / str(pid)).exists()


def _tagged(marker: bytes) -> list[int]:
    """Ids of the live processes whose environment holds the entry ``marker``."""
    me = os.getpid()
    found = []
    with contextlib.suppress(OSError):
        for entry in _PROC.iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:  # gone meanwhile, or another user's
                continue
            if marker in environ.split(b"\0"):
                found.append(int(entry.name))
    return found

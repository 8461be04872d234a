"""The requests under way through each upstream connection, so that a connection replaced
by a new one is closed once they are done rather than under them.

A request that failed as one of a session the server forgot, or whose connection seemed
closed, starts a new connection (:meth:`~toolgate.integrations.mcp.upstreams.Upstreams.restart`).
Other calls may still be running through the old one, on a transport that is fine: the
answer of a call that a load balancer's other instance never saw, or of a server that only
stopped answering for a while. Closing the old connection at once cut them off, and each
was reported as interrupted (it may or may not have run) though its server went on and
answered. Calls on a connection that is really gone fail by themselves, at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

__all__ = ["busy", "idle", "using"]


class _Uses:
    """The requests under way through one client, and the event set when none is left."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = anyio.Event()


# By the client's id: an ``mcp.Client`` is a dataclass, which hashes by nothing. A client
# is in here only while a request holds it, so its id is not reused meanwhile.
_uses: dict[int, _Uses] = {}


@contextmanager
def using(client: object | None) -> Iterator[None]:
    """Count the block as a request under way through ``client`` (nothing for ``None``)."""
    if client is None:
        yield
        return
    uses = _uses.setdefault(id(client), _Uses())
    uses.count += 1
    try:
        yield
    finally:
        uses.count -= 1
        if uses.count == 0:
            del _uses[id(client)]
            uses.idle.set()


def busy(client: object) -> bool:
    """Whether a request is under way through ``client``."""
    return id(client) in _uses


async def idle(client: object) -> None:
    """Return once no request is under way through ``client``."""
    uses = _uses.get(id(client))
    if uses is not None:
        await uses.idle.wait()

"""Hearing that a server's tools changed, so that the next turn lists it again.

Before the 2026-07-28 protocol a server sends ``notifications/tools/list_changed``, which a
client's message handler hears (:func:`change_handler`); on it, the client follows a
``subscriptions/listen`` stream (:func:`follow_changes`).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio.lowlevel
from anyio.abc import TaskStatus
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.subscriptions import ToolsListChanged

from toolgate.errors import InvalidInputError
from toolgate.integrations.mcp.listing import McpClient

__all__ = ["MarkChanged", "change_handler", "follow_changes"]

_LIST_CHANGED = "notifications/tools/list_changed"

#: ``mark_changed(server)``: list ``server`` again on the next turn.
MarkChanged = Callable[[str], None]


def change_handler(
    server: str, mark_changed: MarkChanged, then: MessageHandlerFnT | None = None
) -> MessageHandlerFnT:
    """A ``message_handler`` for the client of ``server``, which marks it changed on
    ``notifications/tools/list_changed`` and passes every message on to ``then``.

    It never calls the server itself: the SDK runs message handlers inside the
    connection's receive loop, where waiting for a response would deadlock.
    """

    async def handle(message: IncomingMessage) -> None:
        if getattr(getattr(message, "root", message), "method", None) == _LIST_CHANGED:
            mark_changed(server)
        if then is not None:
            await then(message)
        else:
            await anyio.lowlevel.checkpoint()

    return handle


async def follow_changes(
    server: str,
    client: McpClient,
    mark_changed: MarkChanged,
    *,
    prompts: bool,
    resources: bool,
    task_status: TaskStatus[None],
) -> None:
    """Mark ``server`` changed on each tools-changed event of ``client``'s
    ``subscriptions/listen`` stream, until cancelled or the stream ends; ``prompts`` /
    ``resources`` subscribe to those lists' changes too, for the client's message handler.
    A client or server without the stream is an :class:`~toolgate.errors.InvalidInputError`.
    """
    listen = getattr(client, "listen", None)
    if listen is None:
        raise InvalidInputError(
            f"server {server!r}: {type(client).__name__} has no listen(); hear changes "
            "through message_handler instead"
        )
    kinds = {"prompts_list_changed": prompts, "resources_list_changed": resources}
    try:
        async with listen(tools_list_changed=True, **kinds) as events:
            task_status.started()
            # The stream does not replay: a change made before it was acknowledged
            # would go unheard, so the next turn lists the server once more.
            mark_changed(server)
            async for event in events:
                if isinstance(event, ToolsListChanged):
                    mark_changed(server)
    except ListenNotSupportedError as exc:
        raise InvalidInputError(
            f"server {server!r}: {exc.args[0] if exc.args else exc}; hear changes through "
            "message_handler instead"
        ) from None

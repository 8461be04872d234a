"""LangChain: a conversation read as the OpenAI Chat messages routing takes.

LangChain's ``convert_to_openai_messages`` refuses content blocks OpenAI Chat has no form for,
though the agent's own model may take them: a file or audio by URL, a video, a plain-text
document, Anthropic's image by URL, Gemini's media. Routing reads only a conversation's text,
roles and calls, so such a block is read as an opaque one (content that is no text, as an
image is), never as an error that stops the agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toolgate.errors import InvalidInputError
from toolgate.integrations import needs_extra

with needs_extra("langchain"):
    from langchain_core.messages import BaseMessage, convert_to_openai_messages

__all__ = ["openai_messages"]

# What LangChain's conversion raises for a message or block it cannot convert.
_REFUSED = (ValueError, KeyError, TypeError)


def openai_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """``messages`` (LangChain messages, OpenAI-style dicts) as OpenAI Chat messages, each
    content block the conversion refuses read as an opaque block; an
    :class:`~toolgate.errors.InvalidInputError` naming a message that cannot be read even so
    (a dict without a role, or with one no chat model has)."""
    try:
        return list(convert_to_openai_messages(list(messages)))
    except _REFUSED:
        pass  # read message by message, to find the blocks it refuses
    return [read for index, message in enumerate(messages) for read in _message(message, index)]


def _message(message: Any, index: int) -> list[dict[str, Any]]:
    """One message converted, with the blocks the conversion refuses made opaque: the
    messages it converts to (Anthropic ``tool_result`` blocks are one ``tool`` message
    each, before the user's words), of which converting it alone returns only the first."""
    candidates = [message]
    blocks = _content(message)
    if isinstance(blocks, list):
        readable = [b if _converts(message, b) else {"type": "unreadable"} for b in blocks]
        candidates.append(_with_content(message, readable))
    problem = ""
    for candidate in candidates:
        try:
            return list(convert_to_openai_messages([candidate]))
        except _REFUSED as exc:
            problem = (str(exc) or type(exc).__name__).splitlines()[0]
    raise InvalidInputError(f"messages[{index}] cannot be read as a chat message: {problem}")


def _converts(message: Any, block: Any) -> bool:
    """Whether the conversion takes ``block`` as ``message``'s whole content."""
    try:
        convert_to_openai_messages(_with_content(message, [block]))
    except _REFUSED:
        return False
    return True


def _content(message: Any) -> Any:
    if isinstance(message, BaseMessage):
        return message.content
    return message.get("content") if isinstance(message, Mapping) else None


def _with_content(message: Any, blocks: list[Any]) -> Any:
    """``message`` (a LangChain message or a dict) with ``blocks`` as its content."""
    if isinstance(message, BaseMessage):
        return message.model_copy(update={"content": blocks})
    return {**message, "content": blocks}

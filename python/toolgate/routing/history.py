"""Multi-turn routing: blend recent user turns and tool results into the query vector.

Later turns often lean on earlier ones ("now post that to the channel"), so the query vector is
the current query's embedding plus the recent turns' embeddings with geometrically decaying
weights, re-normalised. Assistant turns are left out: they restate the plan, not the intent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from toolgate.errors import InvalidInputError
from toolgate.json_limits import json_problem
from toolgate.unicode import well_formed

__all__ = ["HistoryTurn", "blend_history", "history_texts"]

HistoryTurn = str | Mapping[str, object]
_BLENDED_ROLES = frozenset({"user", "tool", "function", "tool_result"})
# Responses API items holding a tool's result (they carry no role).
_TOOL_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
# Deepest value written out as text. Tool outputs may nest past json_limits.MAX_DEPTH (a bound
# on schemas, not on results), but the writers (json.dumps, repr) recurse: well inside the
# interpreter's recursion limit from any caller's stack.
_TEXT_DEPTH = 256


def history_texts(history: Sequence[HistoryTurn] | None, turns: int) -> list[str]:
    """The texts of the last ``turns`` user or tool turns, most recent first.

    A turn is a string (taken as a user turn) or a message mapping: OpenAI or Anthropic
    (``role`` and ``content``, a string or a list of blocks, Anthropic ``tool_result``
    blocks included), an OpenAI Responses item, or Gemini (``role`` and ``parts``,
    ``functionResponse`` included). Of the Responses items, messages (``type: "message"``)
    are read by their role and ``function_call_output`` / ``custom_tool_call_output`` as tool
    results; the others
    (``reasoning``, ``function_call``, ``web_search_call``, ...) are the model's own steps and
    are skipped. A mapping with neither ``role`` nor ``type`` is a user turn, as a Gemini
    ``Content`` without a role is.
    """
    if history is None or turns <= 0:
        return []
    if isinstance(history, (str, bytes, Mapping)) or not isinstance(history, Iterable):
        raise InvalidInputError(f"history must be a list of turns, got {type(history).__name__}")
    history = list(history)
    texts: list[str] = []
    for position in range(len(history) - 1, -1, -1):
        turn = history[position]
        if isinstance(turn, str):
            text = turn
        elif isinstance(turn, Mapping):
            text = _message_text(turn, position)
        else:
            raise InvalidInputError(
                f"history[{position}] must be a string or a mapping, got {type(turn).__name__}"
            )
        if text.strip():
            texts.append(well_formed(text))
        if len(texts) == turns:
            break
    return texts


def _message_text(turn: Mapping[str, object], position: int) -> str:
    """The text a message adds to the query; "" for the turns left out: the assistant's,
    and Responses items that are not messages or tool outputs."""
    kind = turn.get("type")
    # Responses API: a tool's result, no role. A type that is no string (a list is not
    # hashable) is no tool output.
    if isinstance(kind, str) and kind in _TOOL_OUTPUTS:
        output = turn.get("output")
        if isinstance(output, str):
            return output
        return _written(output, lambda value: json.dumps(value, default=str))
    if "role" in turn:
        role = turn["role"]
    elif "type" in turn:
        # A Responses item with no role is one of the model's own steps (reasoning, a tool
        # call, a web search), and so is a "message" missing its role: the role is required
        # on input messages and always "assistant" on output ones. Blending it would pass
        # the model's text off as the user's.
        return ""
    else:
        # Gemini lets a single-turn Content leave its role unset, meaning the user.
        role = "user"
    if not isinstance(role, str) or role not in _BLENDED_ROLES:  # str() of any value may fail
        return ""
    content = turn["parts"] if "parts" in turn else turn.get("content")
    return _content_text(content, position)


def _content_text(content: object, position: int, results: bool = True) -> str:
    """The text of a message's content; a tool result's own ``results`` are not read (it
    holds text and images, and reading one in another would recurse as deep as it nests)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (_block_text(block, position, results) for block in content)
        return " ".join(p for p in texts if p)
    raise InvalidInputError(
        f"history[{position}]['content'] must be a string or a list of blocks, "
        f"got {type(content).__name__}"
    )


def _block_text(block: object, position: int, results: bool) -> str:
    """A content block's text: ``text``, a tool result's ``content``, a Gemini function
    response (as JSON); blocks without text (images, tool calls) give nothing."""
    if not isinstance(block, Mapping):
        return _written(block, str)
    if "text" in block:
        return _written(block["text"], str)
    if block.get("type") == "tool_result":
        return _content_text(block.get("content"), position, False) if results else ""
    response = block.get("functionResponse", block.get("function_response"))
    if isinstance(response, Mapping):
        value = response.get("response", {})
        return _written(value, lambda value: json.dumps(value, ensure_ascii=False, default=str))
    return ""


def _written(value: object, write: Callable[[object], str]) -> str:
    """``write(value)``, or "" if writing it out would fail: nested past :data:`_TEXT_DEPTH`
    levels (a ``RecursionError``) or holding an integer past 4,300 digits (a ``ValueError``).
    The provider takes such a value and routing only needs text to embed, so it adds none
    rather than refusing the request. Strings, the common case, are not walked."""
    if not isinstance(value, str) and json_problem(value, _TEXT_DEPTH, strict=False):
        return ""
    return write(value)


def blend_history(
    query_vector: np.ndarray,
    texts: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
    decay: float,
) -> np.ndarray:
    """``normalise(q + sum(decay**i * e(turn_i)))`` over turns most recent first (i from 1)."""
    if not texts or decay == 0.0:
        return query_vector
    vectors = embed(list(texts))
    weights = decay ** np.arange(1, len(texts) + 1, dtype=np.float32)
    blended = query_vector + (weights[:, None] * vectors).sum(axis=0)
    norm = float(np.linalg.norm(blended))
    return (blended / norm).astype(np.float32) if norm > 0 else query_vector

"""Multi-turn routing: blend recent user turns and tool results into the query vector.

Later turns often lean on earlier ones ("now post that to the channel"), so the query vector is
the current query's embedding plus the recent turns' embeddings with geometrically decaying
weights, re-normalised. Assistant turns are left out: they restate the plan, not the intent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import numpy as np

from toolgate.embedding.long_texts import PREFIX_CHARS
from toolgate.errors import InvalidInputError
from toolgate.formats.text_tags import without_reminders
from toolgate.unicode import well_formed

__all__ = ["HistoryTurn", "blend_history", "history_texts"]

HistoryTurn = str | Mapping[str, object]
_BLENDED_ROLES = frozenset({"user", "tool", "function", "tool_result"})
# Responses API items holding a tool's result (they carry no role).
_TOOL_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
# Deepest value written out as text. Tool outputs may nest past json_limits.MAX_DEPTH (a bound
# on schemas, not on results); one nested deeper is no tool's real output, and adds no text.
_TEXT_DEPTH = 256


def history_texts(history: Sequence[HistoryTurn] | None, turns: int) -> list[str]:
    """The texts of the last ``turns`` user or tool turns, most recent first.

    A turn is a string (taken as a user turn) or a message mapping: OpenAI or Anthropic
    (``role`` and ``content``, a string or a list of blocks, Anthropic ``tool_result``
    blocks included), an OpenAI Responses item, or Gemini (``role`` and ``parts``,
    ``functionResponse`` included). Of the Responses items, messages (``type: "message"``)
    are read by their role and ``function_call_output`` / ``custom_tool_call_output`` as tool
    results (an output of content parts by their text); the others
    (``reasoning``, ``function_call``, ``web_search_call``, ...) are the model's own steps and
    are skipped. A mapping with neither ``role`` nor ``type`` is a user turn, as a Gemini
    ``Content`` without a role is. Claude Code's ``<system-reminder>`` elements are left out.
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
            text = _written(turn)
        elif isinstance(turn, Mapping):
            text = _message_text(turn, position)
        else:
            raise InvalidInputError(
                f"history[{position}] must be a string or a mapping, got {type(turn).__name__}"
            )
        # The embedder reads no further (embedding.long_texts): a 10 MB tool result is cut
        # here, not carried through every step of every route.
        text = text[:PREFIX_CHARS]
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
        if isinstance(output, list):
            # Content parts (input_text, input_image, input_file), read as a tool_result's
            # blocks are: their text, not an image's or a file's base64.
            return _content_text(output, position, False)
        return _written(output)
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
        return _written(content)
    if isinstance(content, list):
        texts = (_block_text(block, position, results) for block in content)
        return " ".join(p for p in texts if p)
    raise InvalidInputError(
        f"history[{position}]['content'] must be a string or a list of blocks, "
        f"got {type(content).__name__}"
    )


def _block_text(block: object, position: int, results: bool) -> str:
    """A content block's text: ``text``, a tool result's ``content``, a Gemini function
    response (its ``output`` and ``error``, else all of it, as JSON); blocks without text
    (images, tool calls) give nothing."""
    if not isinstance(block, Mapping):
        return _written(block)
    if "text" in block:
        return _written(block["text"])
    if block.get("type") == "tool_result":
        return _content_text(block.get("content"), position, False) if results else ""
    response = block.get("functionResponse", block.get("function_response"))
    if isinstance(response, Mapping):
        value = response.get("response", {})
        # Gemini: "output" holds the function's output, "error" its failure; without
        # either, the whole response is the output.
        keys = _RESPONSE_KEYS if isinstance(value, Mapping) else ()
        named = [value[key] for key in keys if key in value]
        return " ".join(filter(None, map(_written, named))) if named else _written(value)
    return ""


_RESPONSE_KEYS = ("output", "error")


def _written(value: object) -> str:
    """``value`` as text: a string as it is (without Claude Code's ``<system-reminder>``
    elements, context the client adds that no user asked), anything else as its JSON
    (``json.dumps`` with ``default=str``, non-ASCII as itself), both no longer than
    :data:`PREFIX_CHARS`, which is all the embedder reads. "" when the JSON cannot be
    written: nested past :data:`_TEXT_DEPTH` levels, or an integer past 4,300 digits (a
    ``ValueError``). The provider takes such a value and routing only needs text to embed,
    so it adds none rather than refusing the request."""
    if isinstance(value, str):
        # Each string by itself: in a turn's joined text, a block naming the tag would
        # reach to a later reminder's closing tag, taking the words between with it.
        return without_reminders(value)[:PREFIX_CHARS]
    try:
        return _json_prefix(value, PREFIX_CHARS)
    except (_TooDeep, ValueError):
        return ""


class _TooDeep(Exception):
    """A value nested past :data:`_TEXT_DEPTH` levels."""


def _json_prefix(value: Any, limit: int) -> str:
    """The first ``limit`` characters of ``json.dumps(value, ensure_ascii=False,
    default=str)``, written iteratively and no further: a tool's result of a million rows
    costs what its first rows do, and one nested past the recursion limit cannot raise."""
    parts: list[str] = []
    size = 0
    # Each open container: its items left, its closing bracket, whether it is a dict.
    stack: list[tuple[Iterator[Any], str, bool]] = []
    pending: list[Any] = [value]  # the value to write next, if any
    first = True
    while size < limit:
        if pending:
            item = pending.pop()
            if isinstance(item, (dict, list, tuple)):
                if len(stack) >= _TEXT_DEPTH:
                    raise _TooDeep
                is_dict = isinstance(item, dict)
                parts.append("{" if is_dict else "[")
                items = iter(item.items()) if isinstance(item, dict) else iter(item)
                stack.append((items, "}" if is_dict else "]", is_dict))
                first = True
            else:
                parts.append(_json_scalar(item, limit - size))
                first = False
            size += len(parts[-1])
            continue
        if not stack:
            break
        items, close, is_dict = stack[-1]
        nxt: Any = next(items, _END)
        if nxt is _END:
            stack.pop()
            parts.append(close)
            size += 1
            first = False
            continue
        separator = "" if first else ", "
        first = False
        if is_dict:
            key, nxt = nxt
            separator += f"{_json_scalar(_key_text(key), limit - size)}: "
        parts.append(separator)
        size += len(separator)
        pending.append(nxt)
    return "".join(parts)[:limit]


_END: Any = object()  # a container has no items left


def _key_text(key: Any) -> str:
    """A dict key as the string ``json.dumps`` writes (a string, a str enum's too, as
    itself; a bool, None or number as its JSON; the keys JSON has no form for, which it
    refuses, as their str())."""
    if isinstance(key, str):
        return key  # str() of a str enum member is its name, not the string it is
    if key is None or isinstance(key, (bool, int, float)):
        return _json_scalar(key, PREFIX_CHARS)
    return str(key)


def _json_scalar(value: Any, limit: int) -> str:
    """A value that holds no other as ``json.dumps`` writes it, without its per-call cost
    (most of the time of a large result); a string no longer than ``limit`` characters past
    its quote (its escapes only lengthen it)."""
    if isinstance(value, str):
        return encode_basestring(value[:limit])
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)  # raises ValueError past 4,300 digits
    if isinstance(value, float):
        if math.isfinite(value):
            return float.__repr__(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return encode_basestring(str(value)[:limit])


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

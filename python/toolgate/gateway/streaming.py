"""Server-sent event streams read as they pass: whole events out, the tool calls in them seen.

The gateway forwards a streamed answer event by event, never holding more than the event
being received, and watches each for tool calls: the name of a call is known from its first
event (so an ``enforce`` route can stop the stream before the application sees a call to a
tool it did not send), and its arguments once its last event is in. Google's stream without
SSE, a JSON array of responses, is read element by element the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolgate.extras import needs_extra
from toolgate.formats.calls import RESPONSES_CALLS, answer_tool_calls, call_name
from toolgate.formats.requests import qualified_name

with needs_extra("gateway", "toolgate.gateway"):
    import orjson

__all__ = [
    "CallWatcher",
    "JsonArraySplitter",
    "SseEvent",
    "SseSplitter",
    "array_error",
    "error_event",
]

# An event ends at a blank line; lines end in CRLF, LF or CR (the SSE specification).
_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
# Only those end a line: str.splitlines also splits on U+2028, U+0085, form feeds..., which
# JSON allows raw in a string, and a data line cut there hides the call it holds.
_LINE_END = re.compile(r"\r\n|\r|\n")


class _Splitter:
    """Bytes received and not yet cut into a whole piece, and how far they were scanned."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0

    def rest(self) -> bytes:
        """What came after the last whole piece (a stream cut short, or an array's ``]``)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._scanned = 0
        return rest


class SseSplitter(_Splitter):
    """Cuts a byte stream into whole events, each with the blank line that ends it."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events ``chunk`` completes, in order; the rest waits for the next chunk."""
        self._buffer += chunk
        events = []
        start = 0
        # A boundary may straddle two chunks: scan again from just before the old end.
        search_from = max(0, self._scanned - 3)
        while (match := _BOUNDARY.search(self._buffer, search_from)) is not None:
            events.append(bytes(self._buffer[start : match.end()]))
            start = search_from = match.end()
        del self._buffer[:start]
        self._scanned = len(self._buffer)
        return events


class JsonArraySplitter(_Splitter):
    """Cuts a JSON array arriving in pieces into its elements, each with what came before it
    (the ``[`` or a comma): Google streams ``streamGenerateContent`` so to a client that asks
    for no SSE (no ``?alt=sse``), one response after another."""

    # What changes the nesting outside a string, and what ends or escapes inside one.
    _STRUCTURE = re.compile(rb'[\[\]{}"]')
    _IN_STRING = re.compile(rb'["\\]')

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._in_string = False
        # The depth at which an element closes: 1 in the array, 0 for an answer that is
        # no array (an object: read whole), unknown before the first bracket.
        self._closes_at: int | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """The elements ``chunk`` completes, in order; the rest waits for the next chunk."""
        self._buffer += chunk
        buffer = self._buffer
        elements = []
        start, at = 0, self._scanned
        while True:
            if self._in_string:
                match = self._IN_STRING.search(buffer, at)
                if match is None:
                    at = len(buffer)
                    break
                if match.group() == b'"':
                    self._in_string = False
                    at = match.end()
                elif match.end() < len(buffer):
                    at = match.end() + 1  # past the escaped character, whatever it is
                else:
                    at = match.start()  # scanned again once the escaped character comes
                    break
                continue
            match = self._STRUCTURE.search(buffer, at)
            if match is None:
                at = len(buffer)
                break
            at, char = match.end(), match.group()
            if char == b'"':
                self._in_string = True
                continue
            if self._closes_at is None:
                self._closes_at = 1 if char == b"[" else 0
            self._depth += 1 if char in (b"[", b"{") else -1
            if char in (b"]", b"}") and self._depth == self._closes_at:
                elements.append(bytes(buffer[start:at]))
                start = at
        del buffer[:start]
        self._scanned = at - start
        return elements

    @staticmethod
    def parse(raw: bytes) -> SseEvent:
        """An element (as :meth:`feed` cut it) read as an event's data, as SSE carries it."""
        text = raw.lstrip(b"[, \t\r\n")
        try:
            return SseEvent(None, orjson.loads(text))
        except orjson.JSONDecodeError:
            return SseEvent(None, text.decode("utf-8", "replace"))


@dataclass(frozen=True)
class SseEvent:
    """One event's name (``event:``) and its data lines joined, parsed as JSON if they are."""

    name: str | None
    data: Any

    @classmethod
    def parse(cls, raw: bytes) -> SseEvent:
        """Read ``raw``, one whole event; data that is not JSON (``[DONE]``) stays text."""
        name, lines = None, []
        for line in _LINE_END.split(raw.decode("utf-8", "replace")):
            field_name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field_name == "event":
                name = value
            elif field_name == "data":
                lines.append(value)
        text = "\n".join(lines)
        try:
            return cls(name, orjson.loads(text)) if text else cls(name, None)
        except orjson.JSONDecodeError:
            return cls(name, text)


@dataclass
class _Partial:
    """A streamed call not finished yet: its id, name and argument text so far, and whether
    it calls a Chat custom tool (its input free text)."""

    call_id: str | None
    name: str
    arguments: list[str] = field(default_factory=list)
    custom: bool = False


class CallWatcher:
    """Follows one streamed answer of the request shape ``shape`` and reports its tool calls.

    :meth:`see` takes each event and returns the names of the calls it starts and the calls
    it finishes (as the provider writes a whole call, for verification); :meth:`finish`
    returns the calls the stream started but never closed.
    """

    def __init__(self, shape: str) -> None:
        self.shape = shape
        self._open: dict[Any, _Partial] = {}
        # The Chat calls (by choice and index) to custom tools, read under "custom" (their
        # later deltas may not say their type).
        self._custom: set[Any] = set()

    def see(self, event: SseEvent) -> tuple[list[str], list[Any]]:
        """The call names started and the calls finished by ``event``."""
        data = event.data
        if not isinstance(data, Mapping):
            return [], []
        if self.shape == "openai":
            return self._chat(data)
        if self.shape == "openai-responses":
            return self._responses(data)
        if self.shape == "anthropic":
            return self._anthropic(data)
        calls = answer_tool_calls(data, "gemini")
        return [call_name(call) for call in calls], calls

    def finish(self) -> list[Any]:
        """The calls still open when the stream ended, as whole calls."""
        calls = [self._whole(partial) for partial in self._open.values()]
        self._open.clear()
        return calls

    def _whole(self, partial: _Partial) -> dict[str, Any]:
        arguments = "".join(partial.arguments)
        if self.shape == "anthropic":
            return {"type": "tool_use", "id": partial.call_id, "name": partial.name,
                    "input": arguments}  # fmt: skip
        if partial.custom:
            return {"id": partial.call_id, "type": "custom",
                    "custom": {"name": partial.name, "input": arguments}}  # fmt: skip
        return {"id": partial.call_id, "function": {"name": partial.name, "arguments": arguments}}

    def _chat(self, data: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
        started: list[str] = []
        finished: list[Any] = []
        for choice in _items(data.get("choices")):
            delta = choice.get("delta")
            number = choice.get("index", 0)
            number = number if isinstance(number, int) else 0
            for call in _items(delta.get("tool_calls") if isinstance(delta, Mapping) else None):
                # OpenAI numbers each call; servers that do not are followed by call id.
                index = call.get("index")
                key = (number, index if isinstance(index, int) else None)
                # Its first delta says its type; a stray "custom" beside a function's does not.
                custom = call.get("type") == "custom" and "function" not in call
                if custom and isinstance(index, int):  # a call without an index is followed by id
                    self._custom.add(key)
                custom = custom or key in self._custom
                call_id = call.get("id") if isinstance(call.get("id"), str) else None
                partial = self._open.get(key)
                if partial is not None and call_id and partial.call_id not in (None, call_id):
                    finished.append(self._whole(self._open.pop(key)))  # a new call began
                started += self._extend(key, call_id, call.get("custom" if custom else "function"),
                                        custom=custom)  # fmt: skip
            # A legacy function call (the "functions" of Azure's older API versions): one
            # per choice, its name in its first delta.
            if isinstance(delta, Mapping) and isinstance(delta.get("function_call"), Mapping):
                started += self._extend((number, "function_call"), None, delta["function_call"])
            if choice.get("finish_reason"):
                for key in [k for k in self._open if k[0] == number]:
                    finished.append(self._whole(self._open.pop(key)))
        return started, finished

    def _extend(
        self, key: Any, call_id: str | None, function: Any, *, custom: bool = False
    ) -> list[str]:
        """Add a Chat delta's ``function`` (its name, a piece of its arguments; a custom
        tool's ``custom``, a piece of its input) to the call open at ``key``, opened now if
        none is; the name, the first time it comes."""
        partial = self._open.get(key)
        if partial is None:
            partial = self._open[key] = _Partial(call_id, "", custom=custom)
        function = function if isinstance(function, Mapping) else {}
        name = function.get("name")
        started = []
        if not partial.name and isinstance(name, str) and name:
            # Checked when it first comes, whichever delta carries it.
            partial.name = name
            started.append(name)
        piece = function.get("input" if partial.custom else "arguments")
        if isinstance(piece, str):
            partial.arguments.append(piece)
        return started

    def _responses(self, data: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
        item = data.get("item")
        if not isinstance(item, Mapping) or item.get("type") not in RESPONSES_CALLS:
            return [], []
        if data.get("type") == "response.output_item.added":
            # A tool of a namespace is named with it, as the request's tools list it.
            namespace = item.get("namespace")
            name = str(item.get("name") or "")
            return [qualified_name(namespace if isinstance(namespace, str) else None, name)], []
        if data.get("type") == "response.output_item.done":
            return [], [item]
        return [], []

    def _anthropic(self, data: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
        kind, index = data.get("type"), data.get("index")
        # Anthropic numbers each block; any other index (a list: unhashable) is read as none.
        index = index if isinstance(index, int) else None
        if kind == "content_block_start":
            block = data.get("content_block")
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                name = str(block.get("name") or "")
                self._open[index] = _Partial(block.get("id"), name)
                return [name], []
        elif kind == "content_block_delta" and index in self._open:
            delta = data.get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("partial_json"), str):
                self._open[index].arguments.append(delta["partial_json"])
        elif kind == "content_block_stop" and index in self._open:
            return [], [self._whole(self._open.pop(index))]
        return [], []


def error_event(shape: str, message: str, code: str) -> bytes:
    """A stream event that each provider's SDK raises as an error, carrying ``message``."""
    body: dict[str, Any]
    if shape == "anthropic":
        body = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
    if shape == "gemini":
        return b"data: " + _google_error(message) + b"\n\n"
    error = {"message": message, "type": "toolgate_error", "code": code, "param": None}
    if shape == "openai-responses":
        body = {"type": "error", "code": code, "message": message, "param": None, "error": error}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
    return b"data: " + orjson.dumps({"error": error}) + b"\n\n"


def array_error(message: str, began: bool) -> bytes:
    """The end of a JSON array of Gemini responses (:class:`JsonArraySplitter`) that fails:
    an error element carrying ``message``, then the ``]``; the ``[`` too unless it ``began``
    (the client has it already)."""
    return (b"," if began else b"[") + _google_error(message) + b"]"


def _google_error(message: str) -> bytes:
    return orjson.dumps({"error": {"code": 502, "message": message, "status": "INTERNAL"}})


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []

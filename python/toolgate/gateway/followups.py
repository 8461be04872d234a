"""What the gateway remembers of the OpenAI Responses answers it forwarded, so a follow-up is
routed as the turn it continues was.

An agent loop on the Responses API sends each turn after the first as a
``previous_response_id`` and the ``function_call_output`` items answering the calls: no user
text, so nothing to route on, and such a request would go with every tool. The gateway keeps,
per response id read from the upstream's answer (whole or streamed), the names of the tools
it sent for that response and of those the answer called; a follow-up naming a response it
knows keeps those tools (:meth:`ToolFilter.filter`'s ``previous``). One it does not know (an
answer another worker forwarded, one from before a restart, one forgotten) goes with all its
tools, as before.

Only tool names are kept, in this process's memory, the least recently used dropped past
:data:`MAX_RESPONSES` ids; nothing of a conversation and nothing on disk. They are keyed by
the response id alone: OpenAI's ids are random and long, so a client can read (through the
tools its follow-up is sent with) or replace only the record of an answer it was given, and
the id of each record comes from the upstream, never from a client.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from toolgate.gateway.filter import FilteredRequest
from toolgate.verify import Verdict

__all__ = ["MAX_RESPONSES", "Recorder", "ResponseTools"]

#: How many response ids a gateway process remembers: a few MB at most (tool names, shared
#: with the catalogs, in small sets).
MAX_RESPONSES = 10_000


class ResponseTools:
    """The tools sent for, and called by, the Responses answers last forwarded, by id."""

    def __init__(self, size: int = MAX_RESPONSES) -> None:
        self._size = size
        self._lock = threading.Lock()  # read on filter threads, written on the event loop
        self._tools: OrderedDict[str, frozenset[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tools)

    def recall(self, body: Mapping[str, Any]) -> frozenset[str] | None:
        """The tools of the response ``body`` follows (its ``previous_response_id``); None
        when it follows none this process remembers."""
        response_id = body.get("previous_response_id")
        if not isinstance(response_id, str):
            return None
        with self._lock:
            tools = self._tools.get(response_id)
            if tools is not None:
                self._tools.move_to_end(response_id)
            return tools

    def remember(self, response_id: str, tools: frozenset[str]) -> None:
        """Keep ``tools`` as those of response ``response_id`` (replacing any before)."""
        with self._lock:
            self._tools[response_id] = tools
            self._tools.move_to_end(response_id)
            while len(self._tools) > self._size:
                self._tools.popitem(last=False)

    def recorder(self, shape: str, filtered: FilteredRequest) -> Recorder | None:
        """What records the answer to ``filtered``; None when there is nothing to remember:
        not a Responses request, or one that went with all its tools (its follow-ups must
        too)."""
        if shape != "openai-responses" or filtered._routed is None:
            return None
        return Recorder(self, frozenset(filtered.kept))


class Recorder:
    """One answer's record: the tools its request was sent, and those it calls, under its id
    once the answer gives it."""

    def __init__(self, store: ResponseTools, tools: frozenset[str]) -> None:
        self._store = store
        self._tools = tools
        self._id: str | None = None

    def answered(self, answer: Any) -> None:
        """Note the id of a whole answer."""
        if isinstance(answer, Mapping):
            self._identified(answer.get("id"))

    def streamed(self, data: Any) -> None:
        """Note the id of a stream event carrying the response (``response.created``, the
        first event, and the others that carry it)."""
        response = data.get("response") if isinstance(data, Mapping) else None
        if isinstance(response, Mapping):
            self._identified(response.get("id"))

    def called(self, verdict: Verdict) -> None:
        """Add the tool of a call the answer made, when the request declared it (a follow-up
        answers the call); a call to no tool of the request could never be kept."""
        if verdict.error == "unknown_tool" or not verdict.name or verdict.name in self._tools:
            return
        self._tools |= {verdict.name}
        if self._id is not None:
            self._store.remember(self._id, self._tools)

    def _identified(self, response_id: Any) -> None:
        if isinstance(response_id, str) and response_id and response_id != self._id:
            self._id = response_id
            self._store.remember(response_id, self._tools)

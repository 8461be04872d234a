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

Only the names of catalog tools are kept (those a follow-up can route to: not provider-side
tools nor tools the catalog could not read, which every request keeps anyway), in this
process's memory; nothing of a conversation and nothing on disk. The memory is bounded
whatever clients send: a record holds at most :data:`MAX_TOOLS` names of at most
:data:`MAX_NAME` bytes (a larger one is not kept: its follow-ups go with all their tools),
and the least recently used records are dropped past :data:`MAX_RESPONSES` ids or
:data:`MAX_NAMES` names in all. At worst (names no catalog shares, each of 64 bytes: about
140 B as a string, plus its set slot; ids of :data:`MAX_ID` characters) that is under 30 MB;
names are usually the catalogs' own strings, shared, which leaves a few MB. Records are
keyed by the response id alone: OpenAI's ids are random and long, so a client can read
(through the tools its follow-up is sent with) or replace only the record of an answer it
was given, and the id of each record comes from the upstream, never from a client.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from toolgate.catalog.catalog import Catalog
from toolgate.gateway.filter import FilteredRequest
from toolgate.verify import Verdict

__all__ = [
    "MAX_ID",
    "MAX_NAME",
    "MAX_NAMES",
    "MAX_RESPONSES",
    "MAX_TOOLS",
    "Recorder",
    "ResponseTools",
]

#: How many response ids a gateway process remembers at most.
MAX_RESPONSES = 10_000
#: How many tool names all its records hold together at most: ten for each of
#: :data:`MAX_RESPONSES` ids (a route keeps five by default, plus the tools called).
MAX_NAMES = 100_000
#: The most tool names one record holds. A request keeping more (a large top_k, or a tool
#: choice or conversation naming many tools) gains little from routing its follow-ups.
MAX_TOOLS = 64
#: The longest tool name a record holds, in UTF-8 bytes: OpenAI's own limit on a function's.
MAX_NAME = 64
#: The longest response id remembered: OpenAI's are about 50 characters.
MAX_ID = 256


class ResponseTools:
    """The tools sent for, and called by, the Responses answers last forwarded, by id."""

    def __init__(self, size: int = MAX_RESPONSES) -> None:
        self._size = size
        self._lock = threading.Lock()  # read on filter threads, written on the event loop
        self._tools: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._names = 0  # in all the records

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
        """Keep ``tools`` as those of response ``response_id`` (replacing any before); past
        the bounds of a record, forget the response instead (its follow-ups go with all
        their tools)."""
        fits = (
            len(response_id) <= MAX_ID
            and len(tools) <= MAX_TOOLS
            and all(len(name) <= MAX_NAME and len(name.encode()) <= MAX_NAME for name in tools)
        )
        with self._lock:
            before = self._tools.pop(response_id, None)
            if before is not None:
                self._names -= len(before)
            if not fits:
                return
            self._tools[response_id] = tools
            self._names += len(tools)
            while len(self._tools) > self._size or self._names > MAX_NAMES:
                self._names -= len(self._tools.popitem(last=False)[1])

    def recorder(self, shape: str, filtered: FilteredRequest) -> Recorder | None:
        """What records the answer to ``filtered``; None when there is nothing to remember:
        not a Responses request, or one that went with all its tools (its follow-ups must
        too)."""
        routed = filtered._routed
        if shape != "openai-responses" or routed is None:
            return None
        # The catalog tools kept, by the names the request gives them (as ``kept`` does):
        # the others are kept on every request whatever a follow-up is told.
        catalog = routed.catalog
        return Recorder(self, frozenset(catalog[i].name for i in filtered._active), catalog)


class Recorder:
    """One answer's record: the tools its request was sent, and those it calls, under its id
    once the answer gives it. When ``catalog`` is given, a call adds only a tool of it."""

    def __init__(
        self, store: ResponseTools, tools: frozenset[str], catalog: Catalog | None = None
    ) -> None:
        self._store = store
        self._tools = tools
        self._catalog = catalog
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
        name = verdict.name
        if verdict.error == "unknown_tool" or not name or name in self._tools:
            return
        catalog = self._catalog
        if catalog is not None and not catalog.with_name(name) and not catalog.get_exposed(name):
            return  # a tool the catalog could not read: kept on every request anyway
        self._tools |= {name}
        if self._id is not None:
            self._store.remember(self._id, self._tools)

    def _identified(self, response_id: Any) -> None:
        if isinstance(response_id, str) and response_id and response_id != self._id:
            self._id = response_id
            self._store.remember(response_id, self._tools)

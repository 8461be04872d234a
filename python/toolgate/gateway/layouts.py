"""Where the function tools of each tools array sit, read once per array and kept under the
bounds the array's router is kept under (:class:`~toolgate.gateway.indexes.Indexes`)."""

from __future__ import annotations

import contextlib
import marshal
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from toolgate.forks import fork_safe_lock
from toolgate.formats.compact import compact_entry
from toolgate.formats.requests import Slot, defers, other_tool_names, routable_tools
from toolgate.gateway import indexes

__all__ = ["Layout", "Layouts", "compacted"]

# Compacted entries kept per tools array: enough for any tools array a provider accepts.
_MAX_COMPACTED = 512


@dataclass(frozen=True)
class Layout:
    """A request's tools array as routing reads it: its key (None: it has none) and the bytes
    it was taken over, the slot of each function tool, the positions of those, the names of
    the others (provider-side and deferred tools), and whether it defers tools to a tool
    search. It holds nothing of the array itself, which may be megabytes, only the compacted
    form of the entries kept so far (``compacted``, by position)."""

    key: str | None
    size: int
    slots: tuple[Slot, ...]
    routable: frozenset[int]
    builtin: frozenset[str]
    defers: bool
    compacted: dict[int, bytes] = field(default_factory=dict, compare=False)


class Layouts:
    """The layouts of the tools arrays seen lately: at most ``max_catalogs`` of them and
    :data:`~toolgate.gateway.indexes.MAX_CACHED_BYTES` of their arrays, least recently used
    first out, the newest kept however large. A layout's compacted entries grow toward its
    whole array, so the count alone let the layouts of the largest arrays outlive their
    routers, which the bytes evict."""

    def __init__(self, max_catalogs: int) -> None:
        self._max_catalogs = max_catalogs
        self._lock = fork_safe_lock()
        self._layouts: OrderedDict[str, Layout] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._layouts)

    def get(self, tools: list[Any], provider: str) -> Layout:
        """Where the function tools of ``tools`` sit, found once per tools array: its digest
        finds what an earlier request with the same array found."""
        key, size = indexes.keyed(tools, provider)
        if key is not None:
            with self._lock:
                found = self._layouts.get(key)
                if found is not None:
                    self._layouts.move_to_end(key)
                    return found
        slots = routable_tools(tools, provider)
        routable = frozenset(i for i, _ in slots)
        builtin = other_tool_names(tools, routable)
        layout = Layout(key, size, tuple(slots), routable, builtin, any(map(defers, tools)))
        if key is not None:
            with self._lock:
                if (old := self._layouts.pop(key, None)) is not None:  # two threads made it
                    self._bytes -= old.size
                self._layouts[key] = layout
                self._bytes += size
                while len(self._layouts) > self._max_catalogs or (
                    self._bytes > indexes.MAX_CACHED_BYTES and len(self._layouts) > 1
                ):
                    _, gone = self._layouts.popitem(last=False)
                    self._bytes -= gone.size
        return layout


def compacted(layout: Layout, tools: list[Any], i: int, entry: Any, provider: str) -> Any:
    """``entry`` compacted (:func:`compact_entry`), walked once per tools array.

    A client sends the same array on every turn, and walking a schema costs more than the
    route. The saved form is serialised, so each request gets its own copy to change.
    """
    if entry is not tools[i]:  # a Gemini entry cut to this request's declarations
        return compact_entry(entry, provider)
    saved = layout.compacted.get(i)
    if saved is not None:
        return marshal.loads(saved)
    out = compact_entry(entry, provider)
    # Not plain JSON data (an SDK object): compacted each time.
    with contextlib.suppress(ValueError):
        if len(layout.compacted) < _MAX_COMPACTED:
            layout.compacted[i] = marshal.dumps(out)
    return out

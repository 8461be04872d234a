"""Changes between versions of a catalog: what differs from one to the next, and one server's
tools swapped in place when it sends ``notifications/tools/list_changed``.

Kept apart from :mod:`~toolgate.catalog.catalog`, whose class is the catalog's data and
lookups; these are the steps from one version to another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from toolgate.catalog.build import Offender, build_tools
from toolgate.catalog.tool import Tool
from toolgate.errors import CatalogError
from toolgate.formats.documents import detect_format, parse_document

if TYPE_CHECKING:
    from toolgate.catalog.catalog import Catalog

__all__ = ["CatalogDiff", "catalog_diff", "server_tools", "with_server_replaced"]


@dataclass(frozen=True)
class CatalogDiff:
    """What changed between two catalogs, as tool ids in catalog order."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def __len__(self) -> int:
        return len(self.added) + len(self.removed) + len(self.changed)

    def to_dict(self) -> dict[str, list[str]]:
        """JSON-ready view."""
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "changed": list(self.changed),
        }


def catalog_diff(old: Catalog, new: Catalog) -> CatalogDiff:
    """What changed from ``old`` to ``new``, a tool changed when its fingerprint did: added
    and changed in ``new``'s order, removed in ``old``'s."""
    added = tuple(t.id for t in new if t.id not in old)
    removed = tuple(t.id for t in old if t.id not in new)
    changed = tuple(
        t.id
        for t in new
        if (before := old.get(t.id)) is not None and before.fingerprint != t.fingerprint
    )
    return CatalogDiff(added, removed, changed)


def server_tools(
    new_tools: Any,
    server: str,
    overrides: Mapping[str, Mapping[str, Any]],
    self_pins: str = "refuse",
) -> tuple[list[Tool], list[Offender]]:
    """``new_tools`` (a server's ``tools/list`` result, or a list of tools in any accepted
    shape) read as ``server``'s tools under ``overrides``, and the bad ones (``self_pins``:
    :func:`~toolgate.catalog.build.build_tools`')."""
    try:
        fmt = detect_format(new_tools) if not isinstance(new_tools, list) else "tools"
        raws = parse_document(new_tools, fmt, server)
    except ValueError as exc:
        raise CatalogError(f"refresh of server {server!r}: {exc}") from None
    raws = [replace(r, server=server) for r in raws]
    return build_tools(raws, overrides=overrides, self_pins=self_pins)


def with_server_replaced(
    tools: Sequence[Tool], server: str, fresh: Sequence[Tool], order: Sequence[str] = ()
) -> list[Tool]:
    """``tools`` with ``server``'s replaced by ``fresh``, where the first of them stood, so the
    order of other servers' tools is untouched. A server new to ``tools`` goes before the first
    tool of a server that ``order`` lists after it (at the end when there is none)."""
    present = any(tool.server == server for tool in tools)
    later: set[str] = set()
    if not present and server in order:
        # A server's first mention is its place: one named again after ``server`` (McpRouter
        # names its servers, then those listed this turn) still goes before it.
        place = order.index(server) + 1
        later = set(order[place:]) - set(order[:place])
    merged: list[Tool] = []
    inserted = False
    for tool in tools:
        if not inserted and (tool.server == server or tool.server in later):
            merged.extend(fresh)
            inserted = True
        if tool.server != server:
            merged.append(tool)
    if not inserted:
        merged.extend(fresh)
    return merged

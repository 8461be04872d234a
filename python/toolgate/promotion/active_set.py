"""The active set of a turn: the tools the model may call, for the catalog version it was routed
on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.scopes import ScopeMatcher
from toolgate.catalog.tool import Tool
from toolgate.errors import InvalidInputError
from toolgate.memo import Memo

__all__ = ["ANY_SCOPE", "ActiveSet", "Scope", "check_catalog_version", "tools_in_scope"]


#: A route's allow and deny patterns (``None``: not given), as :class:`RouteResult` holds them.
Scope = tuple[tuple[str, ...] | None, tuple[str, ...] | None]


#: No allow or deny list.
ANY_SCOPE: Scope = (None, None)

_MATCHERS: Memo[str, ScopeMatcher] = Memo(32)


def tools_in_scope(
    catalog: Catalog, allow: Sequence[str] | None, deny: Sequence[str] | None
) -> Sequence[Tool]:
    """The tools of ``catalog`` that the ``allow`` and ``deny`` patterns admit (see
    :mod:`toolgate.catalog.scopes`), in catalog order."""
    if allow is None and deny is None:
        return catalog.tools
    matcher = _MATCHERS.get(
        catalog.version,
        lambda: ScopeMatcher(
            catalog.ids, [t.name for t in catalog], [t.exposed_name for t in catalog]
        ),
    )
    allowed, denied = matcher.rows(allow), matcher.rows(deny, deny=True)
    keep = np.full(len(catalog), allowed is None)
    if allowed is not None:
        keep[allowed] = True
    if denied is not None:
        keep[denied] = False
    return [tool for tool, kept in zip(catalog, keep, strict=True) if kept]


def check_catalog_version(catalog: Catalog, active: Any) -> None:
    """Refuse a ``RouteResult`` or :class:`Promotion` made from another version of ``catalog``:
    its ids would be checked against tools they were never routed among."""
    version = getattr(active, "catalog_version", "")
    if version and version != catalog.version:
        kind = type(active).__name__
        raise InvalidInputError(
            f"the {kind} is for catalog version {version}, this catalog is {catalog.version}"
        )


@dataclass(frozen=True)
class ActiveSet:
    """The tools a model may call this turn, best first, the name the ``tool_search`` tool
    was sent under, if it was, and the route's allow / deny ``scope`` (what a digest of the
    catalog may describe).

    A :class:`RouteResult` or a promotion is the whole set: the router already added the
    pinned tools the gate and the allow / deny lists admit, a pinned tool they shut out must
    stay out, and a promotion holds only what its budget let through. A bare list of ids
    carries no state, so the catalog's pinned tools are added to it.
    """

    ids: tuple[str, ...]
    search_tool_name: str | None = None
    scope: Scope = ANY_SCOPE

    @classmethod
    def of(cls, catalog: Catalog, active: Any, *, strict: bool) -> ActiveSet:
        """The active set ``active`` (a ``RouteResult``, a ``Promotion`` or a list of ids)
        names in ``catalog``, which it must have been routed on.

        ``strict`` refuses ids the catalog does not hold (what to promote must exist);
        otherwise they are left out (a call checked against them is simply refused). A
        tool's name where its id belongs is refused either way, naming the id: left out,
        it would quietly make every call to that tool a routing miss.
        """
        check_catalog_version(catalog, active)
        # A Promotion's active_ids, a RouteResult's (or a look-alike's) ids, or the list itself.
        ids = getattr(active, "active_ids", None)
        if ids is None:
            ids = getattr(active, "ids", active)
        routed = ids is not active
        if isinstance(ids, str) or not isinstance(ids, Iterable):
            raise InvalidInputError(
                "active_ids must be a list of tool ids, a RouteResult or a Promotion, "
                f"got {type(ids).__name__}"
            )
        ids = list(ids)
        known = [i for i in ids if isinstance(i, str) and i in catalog]
        if len(known) != len(ids):
            unknown = [i for i in ids if not isinstance(i, str) or i not in catalog]
            _refuse_names(catalog, unknown)
            if strict:
                raise InvalidInputError(f"active_ids has ids not in the catalog: {unknown}")
        pinned = () if routed else catalog.pinned_ids
        search_tool_name = getattr(active, "search_tool_name", None)
        scope = (getattr(active, "allow", None), getattr(active, "deny", None))
        return cls(tuple(dict.fromkeys([*known, *pinned])), search_tool_name, scope)


def _refuse_names(catalog: Catalog, unknown: Sequence[object]) -> None:
    """An :class:`InvalidInputError` if any of ``unknown`` (entries of a list of ids that no
    tool has as its id) is a tool's name or exposed name, naming the ids meant."""
    meant = {}
    for entry in unknown:
        if not isinstance(entry, str):
            continue
        exposed = catalog.get_exposed(entry)
        tools = [exposed] if exposed is not None else catalog.with_name(entry)
        if tools:
            meant[entry] = [tool.id for tool in tools]
    if meant:
        hints = "; ".join(
            f"{name!r} is the name of {' or '.join(map(repr, ids))}" for name, ids in meant.items()
        )
        raise InvalidInputError(f"active_ids takes tool ids (server/name), not names: {hints}")

"""The allow / deny lists over the function tools of OpenAI Responses ``namespace`` tools.

A namespace groups tools the request sends whole, unrouted; its function members are still
function tools, so the caller's lists hold for them. A list names a member by its bare name
(``send_email``: that name in any namespace, as a tool choice names it) or qualified with
its namespace (``mail.send_email``, ``mail.*``: as a call names it, with its namespace, and
as a stream's call is checked). An allow list admits a member either name matches (the
qualified one only by a pattern holding a dot, which names a namespace); a deny list shuts
out one either name matches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.formats.raw import RawTool
from toolgate.formats.requests import qualified_name
from toolgate.gateway.choosing import refuse_shut_choice, shut_out_read

__all__ = ["Cut", "cut_namespaces"]


@dataclass(frozen=True)
class Cut:
    """The kept entries of a tools array once the lists cut its namespaces, the qualified
    names of the members cut, and the bare names of the members left."""

    entries: list[tuple[int, Any]]
    shut: frozenset[str] = frozenset()
    left: frozenset[str] = frozenset()

    def refuse_choice(self, names: Iterable[str], offered: Callable[[str], bool]) -> None:
        """Refuse a tool choice naming (by its bare name) a member cut, unless a member left
        or a tool ``offered`` says the request still sends has that name: the provider would
        refuse a choice of a tool it is not sent, and a forced call must not pass the lists."""
        cut = {name.rpartition(".")[2] for name in self.shut}
        chosen = sorted(n for n in names if n in cut and n not in self.left and not offered(n))
        if chosen:
            refuse_shut_choice(chosen)


def cut_namespaces(
    entries: list[tuple[int, Any]], allow: Iterable[str] | None, deny: Iterable[str] | None
) -> Cut:
    """``entries`` (kept entries of a request's tools, with their positions) with the function
    members of each namespace that ``allow`` or ``deny`` shut out cut from a copy of it (the
    caller's request is never changed), and a namespace left with no member dropped, since
    it would declare nothing."""
    if allow is None and deny is None:
        named = {
            m["name"]
            for _, entry in entries if _is_namespace(entry) and isinstance(entry.get("tools"), list)
            for m in entry["tools"] if isinstance(m, Mapping) and _named(m)
        }  # fmt: skip
        return Cut(entries, left=frozenset(named))
    # Each namespace's function members, (position among its members, name), read together:
    # resolving the lists once per namespace cost a request of many namespaces seconds.
    spaces: dict[int, tuple[str, list[Any], list[tuple[int, str]]]] = {}  # by entry
    for at, (_, entry) in enumerate(entries):
        members = entry.get("tools") if _is_namespace(entry) else None
        space = entry.get("name") if isinstance(members, list) else None
        if isinstance(members, list) and isinstance(space, str):
            # Custom members, like custom tools, are no function tools: the lists leave them.
            spaces[at] = space, members, [
                (k, m["name"])
                for k, m in enumerate(members)
                if isinstance(m, Mapping) and m.get("type") == "function"
                and isinstance(m.get("name"), str)
            ]  # fmt: skip
    listed = [(space, name) for space, _, functions in spaces.values() for _, name in functions]
    out_of = _shut_members(listed, allow, deny)
    out: list[tuple[int, Any]] = []
    shut: set[str] = set()
    left: set[str] = set()
    start = 0  # where the namespace's functions start in ``listed``
    for at, (i, entry) in enumerate(entries):
        if at not in spaces:
            out.append((i, entry))
            continue
        space, members, functions = spaces[at]
        gone = {k for n, (k, _) in enumerate(functions) if start + n in out_of}
        start += len(functions)
        shut.update(qualified_name(space, name) for k, name in functions if k in gone)
        kept = [m for k, m in enumerate(members) if k not in gone]
        left.update(m["name"] for m in kept if isinstance(m, Mapping) and _named(m))
        if not gone:
            out.append((i, entry))
        elif kept:
            out.append((i, {**entry, "tools": kept}))
    return Cut(out, frozenset(shut), frozenset(left))


def _shut_members(
    listed: list[tuple[str, str]], allow: Iterable[str] | None, deny: Iterable[str] | None
) -> set[int]:
    """The positions of those of the namespaces' functions ``listed`` (namespace, name) the
    lists shut out, each read by its bare name and as ``space.name``: shut out when allow
    admits neither, or deny matches either. Only an allowed pattern naming a namespace
    (holding a dot) reads the qualified name: ``get_*``'s ``*`` would run over the dot of
    ``get_admin.delete``."""
    count = len(listed)
    read = [RawTool(f"{space}.{name}", name=name) for space, name in listed]
    read += [RawTool(f"{space}.{name}", name=qualified_name(space, name)) for space, name in listed]
    refused = shut_out_read(read[:count], allow, None)
    # A pattern that is no string is left in, for the lists' own check to refuse.
    dotted = None if allow is None else [p for p in allow if not isinstance(p, str) or "." in p]
    refused |= {count + k for k in shut_out_read(read[count:], dotted, None)}
    denied = shut_out_read(read, None, deny)
    return {
        k
        for k in range(count)
        if (k in refused and k + count in refused) or k in denied or k + count in denied
    }


def _is_namespace(entry: Any) -> bool:
    return isinstance(entry, Mapping) and entry.get("type") == "namespace"


def _named(entry: Mapping[str, Any]) -> bool:
    return isinstance(entry.get("name"), str)

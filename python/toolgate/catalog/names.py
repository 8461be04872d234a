"""Exposed tool names: the name a model sees and calls, unique across a catalog.

A tool's id is ``server/name``, but providers only accept a restricted alphabet for function
names, and two servers often expose a tool with the same name (``search``). Every tool therefore
gets an *exposed name* that is valid for every provider at once:

- OpenAI (Chat and Responses) and Anthropic: ``^[a-zA-Z0-9_-]{1,64}$``;
- Gemini: starts with a letter or an underscore, then letters, digits, ``_ . : -``, at most 64.

Their intersection is ``^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$`` (:data:`EXPOSED_NAME_RE`).

The rule, chosen so a name only changes when it has to:

1. The name is sanitised (other characters become ``_``; a leading digit or dash gets a ``_``
   prefix). If no other tool in the catalog sanitises to the same name (compared
   case-insensitively, since some clients fold case), that is the exposed name.
2. Otherwise the server is prefixed: ``<server>__<name>`` (sanitised). A name so qualified
   is its tool's: a tool whose own name has that form (``a__x`` on server ``c``, beside ``x``
   on ``a`` and ``b``) is prefixed too, so another server cannot take a tool's name over.
3. If that is longer than 64 characters or still taken, it is cut and suffixed with eight hex
   digits of the sha256 of the id, which makes it unique.

The assignment depends only on the set of ids, not on their order, so reloading the same tools
in another order gives the same names.

>>> assign_exposed_names([("github", "search"), ("slack", "search"), ("slack", "post")])
['github__search', 'slack__search', 'post']
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence

from toolgate.errors import CatalogError, InvalidInputError

__all__ = [
    "EXPOSED_NAME_RE",
    "MAX_EXPOSED_LEN",
    "assign_exposed_names",
    "name_words",
    "qualified_name",
    "sanitize_name",
    "split_name",
]

#: Names valid for OpenAI, Anthropic and Gemini alike.
EXPOSED_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")
#: The longest name every provider accepts.
MAX_EXPOSED_LEN = 64

_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")
_VALID_FIRST = re.compile(r"[a-zA-Z_]")
_HASH_LEN = 8

_SEPARATORS = re.compile(r"[_\-\s./:]+")


def name_words(name: str, *, keep_case: bool = False) -> list[str]:
    """The words of the tool or parameter name ``name``, split on ``_ - . / :``, white space
    and camelCase (an acronym ends before a capitalised word); lower-case unless
    ``keep_case``. Every split of names into words is this one, so the summary, the embedded
    text, the pool and ``verify`` read a name alike.

    >>> name_words("getRepo_file.contents")
    ['get', 'repo', 'file', 'contents']
    """
    words = [part for word in _SEPARATORS.split(name) for part in _case_parts(word) if part]
    return words if keep_case else [word.lower() for word in words]


def _case_parts(word: str) -> list[str]:
    """``word`` cut at camelCase (a lower-case letter or a digit, then a capital) and at an
    acronym's end before a capitalised word (``getHTTPResponse`` -> ``get`` ``HTTP``
    ``Response``), in letters of any script, as the BM25 analyser cuts it (``re`` has no
    Unicode case classes). The acronym is two capitals or more and the word two lower-case
    letters or more, so a plural acronym (``listAPIs``) stays one word."""
    parts, start = [], 0
    for at in range(1, len(word)):
        before, here, after = word[max(at - 2, 0) : at], word[at], word[at + 1 : at + 3]
        camel = (before[-1].islower() or before[-1].isdecimal()) and here.isupper()
        acronym_end = (
            len(before) == 2 and all(c.isupper() for c in before) and here.isupper()
            and len(after) == 2 and all(c.islower() for c in after)
        )  # fmt: skip
        if camel or acronym_end:
            parts.append(word[start:at])
            start = at
    parts.append(word[start:])
    return parts


def split_name(name: str) -> str:
    """``name`` as lower-case words joined by spaces (:func:`name_words`).

    >>> split_name("getRepo_file.contents")
    'get repo file contents'
    """
    return " ".join(name_words(name))


def sanitize_name(name: str) -> str:
    """Map ``name`` onto the common provider alphabet, without making it unique.

    >>> sanitize_name("nasa/apod")
    'nasa_apod'
    >>> sanitize_name("21st_magic")
    '_21st_magic'
    """
    cleaned = _INVALID_CHARS.sub("_", name.strip()).strip("_") or "tool"
    if not _VALID_FIRST.match(cleaned):
        cleaned = "_" + cleaned
    return cleaned


def _id_hash(server: str, name: str) -> str:
    return hashlib.sha256(f"{server}/{name}".encode()).hexdigest()[:_HASH_LEN]


def _fit(candidate: str, server: str, name: str, *, force_hash: bool) -> str:
    if len(candidate) <= MAX_EXPOSED_LEN and not force_hash:
        return candidate
    keep = MAX_EXPOSED_LEN - _HASH_LEN - 1
    return f"{candidate[:keep]}_{_id_hash(server, name)}"


def qualified_name(server: str, name: str) -> str:
    """``<server>__<name>``, sanitised and cut to fit: the tool's name prefixed by its server.

    >>> qualified_name("github", "search")
    'github__search'
    """
    return _qualified(server, name, sanitize_name(name))


def _qualified(server: str, name: str, base: str) -> str:
    """:func:`qualified_name` of the tool ``name`` of ``server``, sanitised as ``base``."""
    return _fit(f"{sanitize_name(server)}__{base.lstrip('_')}", server, name, force_hash=False)


def assign_exposed_names(ids: Sequence[tuple[str, str]], *, qualify: str = "auto") -> list[str]:
    """Give every ``(server, name)`` a unique, provider-valid exposed name.

    ``qualify="auto"`` prefixes the server only where names collide; ``"always"`` prefixes it
    everywhere (names then never change when servers come and go, at a few tokens per tool).
    The result is in the order of ``ids``. Ids are assumed distinct (the catalog checks that).
    """
    if qualify not in ("auto", "always"):
        raise InvalidInputError(f"qualify must be 'auto' or 'always', got {qualify!r}")
    bases = [sanitize_name(name) for _, name in ids]
    base_counts = Counter(base.casefold() for base in bases)
    qualified = [qualify == "always" or base_counts[base.casefold()] > 1 for base in bases]
    wanted = [
        _qualified(server, name, base) if prefixed else _fit(base, server, name, force_hash=False)
        for (server, name), base, prefixed in zip(ids, bases, qualified, strict=True)
    ]
    # The server's prefix names the tool of that server: a name that only looks like it
    # steps aside, or a change of another server would rename the tool the model knows.
    taken = {w.casefold() for w, prefixed in zip(wanted, qualified, strict=True) if prefixed}
    wanted = [
        _qualified(server, name, base) if not prefixed and w.casefold() in taken else w
        for (server, name), base, prefixed, w in zip(ids, bases, qualified, wanted, strict=True)
    ]
    wanted_counts = Counter(w.casefold() for w in wanted)
    final: list[str] = []
    for (server, name), candidate in zip(ids, wanted, strict=True):
        clash = wanted_counts[candidate.casefold()] > 1
        final.append(_fit(candidate, server, name, force_hash=clash))
    _check_unique(final, ids)
    return final


def _check_unique(names: Sequence[str], ids: Sequence[tuple[str, str]]) -> None:
    # A sha256 prefix clash is astronomically unlikely; if it happens, fail loudly rather than
    # let two tools share a name the model calls.
    seen: dict[str, tuple[str, str]] = {}
    for exposed, ident in zip(names, ids, strict=True):
        key = exposed.casefold()
        if key in seen:
            first = "/".join(seen[key])
            raise CatalogError(
                f"exposed name {exposed!r} is shared by {first!r} and {'/'.join(ident)!r}"
            )
        seen[key] = ident

"""JSON pointers into a schema document."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

__all__ = ["resolve_pointer"]


_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


def resolve_pointer(root: Any, ref: str) -> Any:
    """The value the local JSON pointer ``ref`` (``#/properties/a~1b``) names in ``root``, or
    ``None`` for a remote reference, a plain-name anchor or a pointer that leads nowhere.

    The fragment is percent-decoded before it is split, then ``~1`` and ``~0`` are decoded
    in that order, as RFC 6901 says (``~01`` is ``~1``, not ``/``).
    """
    if not ref.startswith("#"):
        return None
    pointer = unquote(ref[1:])
    if not pointer:
        return root
    if not pointer.startswith("/"):
        return None
    node = root
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and _ARRAY_INDEX.fullmatch(token) and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node

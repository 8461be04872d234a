"""What a route reads from a request besides its tools: the text to route on, and the state.

The text is the latest user message unless the route names a JSONPath (``jsonpath-ng``'s
extended syntax, as in the gateway seed's ``$.messages[-1].content``); the state comes from
headers such as ``x-toolgate-scopes: github:write, slack:read``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from toolgate.errors import InvalidInputError
from toolgate.gateway.config import INSTALL_EXTRA

__all__ = ["compile_path", "query_at", "state_from_headers"]


@functools.lru_cache(maxsize=256)
def _compiled(path: str) -> Any:
    from jsonpath_ng.ext.parser import parse

    return parse(path)


def compile_path(path: str, where: str) -> Any:
    """The parsed JSONPath ``path``; an error naming ``where`` if it does not parse."""
    try:
        return _compiled(path)
    except ImportError as exc:  # jsonpath-ng is the gateway extra's
        raise InvalidInputError(f"{where}: a query needs {INSTALL_EXTRA} ({exc})") from None
    except Exception as exc:  # jsonpath-ng raises bare Exception subclasses of its own
        raise InvalidInputError(f"{where}: query {path!r} is not a JSONPath: {exc}") from None


def query_at(body: Mapping[str, Any], path: str) -> str | None:
    """The text at ``path`` in ``body``: strings found there joined by new lines, the text
    blocks of a content list read as text; None when nothing is found."""
    texts: list[str] = []
    for match in compile_path(path, "query").find(body):
        texts.extend(_texts(match.value))
    joined = "\n".join(t for t in texts if t.strip())
    return joined or None


def _texts(value: Any) -> list[str]:
    """The strings in ``value`` in order: a mapping's ``text``, else those of its
    ``content`` (or ``parts``). Iterative: a body may nest 1,024 deep, past the recursion
    limit."""
    texts: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, Mapping):
            text = item.get("text")
            stack.append(text if isinstance(text, str) else item.get("content", item.get("parts")))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return texts


def state_from_headers(
    headers: Mapping[str, str], fields: Mapping[str, str]
) -> dict[str, list[str]] | None:
    """The routing state the request's headers give (comma-separated lists), None if none.

    ``fields`` maps lower-case header names to the state field each fills.
    """
    state: dict[str, list[str]] = {}
    for header, name in fields.items():
        value = headers.get(header)
        if value is None:
            continue
        items = [item.strip() for item in value.split(",") if item.strip()]
        state.setdefault(name, []).extend(items)
    return state or None

"""google-genai's request objects read as the Gemini REST request they stand for, and back.

The SDK's ``generate_content(model=..., contents=..., config=...)`` carries the tools and the
tool config inside ``config`` (a ``GenerateContentConfig``), and ``contents`` may be a plain
string. :func:`lift` turns a ``GenerateContentParameters`` object, or those keyword arguments
as a dict, into ``{"contents": [...], "tools": [...], "toolConfig": {...}}``, which the
request readers know; :meth:`Lifted.restore` puts a filtered copy back into the caller's form.
Nothing is imported from the SDK: its objects are pydantic models, dumped by alias.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.formats.calls import plain_json

__all__ = ["Lifted", "lift"]

# The REST request's keys that live in the SDK's config, by their alias.
_FROM_CONFIG = ("tools", "toolConfig")


@dataclass(frozen=True)
class Lifted:
    """A google-genai request as a REST request, and how to give a changed copy back."""

    request: dict[str, Any]
    restore: Callable[[Mapping[str, Any]], Any]


def lift(request: Any) -> Lifted | None:
    """``request`` as a Gemini REST request if it is a google-genai one, else ``None``.

    A google-genai request is an SDK object with ``contents`` (``GenerateContentParameters``)
    or a dict of ``generate_content``'s arguments: ``contents`` and ``config``, no ``tools``.
    """
    is_object = not isinstance(request, Mapping) and callable(getattr(request, "model_dump", None))
    if is_object:
        dumped = plain_json(request)
    elif isinstance(request, Mapping) and "config" in request and "contents" in request:
        dumped = _plain_tree(request)
    else:
        return None
    if not isinstance(dumped, Mapping) or "contents" not in dumped or "tools" in dumped:
        return None
    config = dumped.get("config") or {}
    if not isinstance(config, Mapping):
        return None
    rest: dict[str, Any] = {"contents": _contents(dumped["contents"])}
    rest.update({key: config[key] for key in _FROM_CONFIG if key in config})

    def restore(filtered: Mapping[str, Any]) -> Any:
        new_config = {k: v for k, v in config.items() if k not in _FROM_CONFIG}
        new_config.update({key: filtered[key] for key in _FROM_CONFIG if key in filtered})
        out = {**dumped, "config": new_config}
        if filtered["contents"] is not rest["contents"]:  # text tags were rewritten
            out["contents"] = filtered["contents"]
        return type(request).model_validate(out) if is_object else out

    return Lifted(rest, restore)


def _plain_tree(value: Any) -> Any:
    """``value`` with every SDK object in it dumped to JSON (dicts and lists walked)."""
    value = plain_json(value)
    if isinstance(value, Mapping):
        return {key: _plain_tree(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_tree(item) for item in value]
    return value


def _contents(contents: Any) -> Any:
    """The SDK's ``contents`` as REST contents: a string, or a string or part in a list, is
    a user turn of its own (as the SDK sends it); anything else is left for the reader to
    judge."""
    if isinstance(contents, str):
        return [_user_turn({"text": contents})]
    if not isinstance(contents, list):
        return contents
    out = []
    for item in contents:
        if isinstance(item, str):
            out.append(_user_turn({"text": item}))
        elif isinstance(item, Mapping) and "parts" not in item and "role" not in item:
            out.append(_user_turn(item))
        else:
            out.append(item)
    return out


def _user_turn(part: Mapping[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": [part]}

"""google-genai's requests read as the Gemini REST request they stand for, and back.

The SDK's ``generate_content(model=..., contents=..., config=...)`` carries the tools and the
tool config inside ``config`` (a ``GenerateContentConfig``), and ``contents`` may be a plain
string. :func:`lift` turns those keyword arguments, as a dict, into ``{"contents": [...],
"tools": [...], "toolConfig": {...}}``, which the request readers know;
:meth:`Lifted.restore` puts a filtered copy back into the caller's form, so
``client.models.generate_content(**filtered.request)`` works. Nothing is imported from the
SDK: its objects are pydantic models, dumped by alias.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.formats.calls import plain_json

__all__ = ["Lifted", "lift"]

# The REST request's keys that live in the SDK's config, by their alias.
_FROM_CONFIG = ("tools", "toolConfig", "tool_config")


@dataclass(frozen=True)
class Lifted:
    """A google-genai request as a REST request, and how to give a changed copy back."""

    request: dict[str, Any]
    restore: Callable[[Mapping[str, Any]], Any]


def lift(request: Any) -> Lifted | None:
    """``request`` as a Gemini REST request if it is ``generate_content``'s keyword arguments
    (``contents`` and ``config``, no ``tools``), else ``None``. The SDK objects in it
    (``GenerateContentConfig``, ``Content``...) are read as the JSON they dump to."""
    if not isinstance(request, Mapping) or "config" not in request or "contents" not in request:
        return None
    if "tools" in request:
        return None
    given = request["config"]
    config = _plain_tree(given) or {}
    if not isinstance(config, Mapping):
        return None
    contents = _contents(_plain_tree(request["contents"]))
    rest: dict[str, Any] = {"contents": contents}
    rest.update({key: config[key] for key in _FROM_CONFIG if key in config})

    def restore(filtered: Mapping[str, Any]) -> Any:
        new_config = {k: v for k, v in config.items() if k not in _FROM_CONFIG}
        new_config.update({key: filtered[key] for key in _FROM_CONFIG if key in filtered})
        out = dict(request)
        # The config comes back as the type it was given in (an SDK object or a dict).
        is_object = callable(getattr(given, "model_validate", None))
        out["config"] = type(given).model_validate(new_config) if is_object else new_config
        if filtered["contents"] is not contents:  # text tags were rewritten
            out["contents"] = filtered["contents"]
        return out

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

"""google-genai's requests read as the Gemini REST request they stand for, and back.

The SDK's ``generate_content(model=..., contents=..., config=...)`` carries the tools and the
tool config inside ``config`` (a ``GenerateContentConfig``), and ``contents`` may be a plain
string. :func:`lift` turns those keyword arguments, as a dict, into ``{"contents": [...],
"tools": [...], "toolConfig": {...}}``, which the request readers know;
:meth:`Lifted.restore` puts a filtered copy back into the caller's form, so
``client.models.generate_content(**filtered.request)`` works. The SDK's objects are pydantic
models, dumped by alias.

``config.tools`` may also hold Python functions, which the SDK declares itself and, with
automatic function calling, runs. Each is read as the declaration the SDK sends for it (its
own ``FunctionDeclaration.from_callable_with_api_option``, the one thing imported from the
SDK, and only when there is a function), and a kept function goes back as the function
itself, which the SDK needs to run it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolgate.errors import InvalidInputError
from toolgate.formats.calls import plain_json

__all__ = ["Lifted", "lift"]

# The REST request's keys that live in the SDK's config, by their alias.
_FROM_CONFIG = ("tools", "toolConfig", "tool_config")


@dataclass(frozen=True)
class Lifted:
    """A google-genai request as a REST request, and how to give a changed copy back.

    ``restore`` takes the changed REST request and the positions, in its ``tools``, of the
    entries it kept (``FilteredRequest.positions``)."""

    request: dict[str, Any]
    restore: Callable[[Mapping[str, Any], Sequence[int]], Any]


def lift(request: Any) -> Lifted | None:
    """``request`` as a Gemini REST request if it is ``generate_content``'s keyword arguments
    (``contents`` and ``config``, no ``tools``), else ``None``. The SDK objects in it
    (``GenerateContentConfig``, ``Content``...) are read as the JSON they dump to, and the
    Python functions in ``config.tools`` as the declarations the SDK makes of them."""
    if not isinstance(request, Mapping) or "config" not in request or "contents" not in request:
        return None
    if "tools" in request:
        return None
    given = request["config"]
    given_tools = _config_tools(given)
    config = _plain_tree(_without_tools(given)) or {}
    if not isinstance(config, Mapping):
        return None
    contents = _contents(_plain_tree(request["contents"]))
    rest: dict[str, Any] = {"contents": contents}
    rest.update({key: config[key] for key in _FROM_CONFIG if key in config})
    if given_tools is not None:
        rest["tools"] = _rest_tools(given_tools)

    def restore(filtered: Mapping[str, Any], positions: Sequence[int]) -> Any:
        new_config = {k: v for k, v in config.items() if k not in _FROM_CONFIG}
        new_config.update({key: filtered[key] for key in _FROM_CONFIG if key in filtered})
        if "tools" in filtered and given_tools is not None:
            new_config["tools"] = _restored_tools(given_tools, rest["tools"], filtered, positions)
        out = dict(request)
        # The config comes back as the type it was given in (an SDK object or a dict).
        is_object = callable(getattr(given, "model_validate", None))
        out["config"] = type(given).model_validate(new_config) if is_object else new_config
        if filtered["contents"] is not contents:  # text tags were rewritten
            out["contents"] = filtered["contents"]
        return out

    return Lifted(rest, restore)


def _config_tools(config: Any) -> list[Any] | None:
    """The config's ``tools`` as given (SDK objects and functions in it untouched), or
    ``None`` when it gives no list."""
    tools = config.get("tools") if isinstance(config, Mapping) else getattr(config, "tools", None)
    return list(tools) if isinstance(tools, (list, tuple)) else None


def _without_tools(config: Any) -> Any:
    """``config`` without its tools list, which :func:`_rest_tools` reads: a function in it
    would make the SDK object refuse to dump."""
    if _config_tools(config) is None:
        return config
    if isinstance(config, Mapping):
        return {key: value for key, value in config.items() if key != "tools"}
    copy = getattr(config, "model_copy", None)
    return copy(update={"tools": None}) if callable(copy) else config


def _rest_tools(tools: list[Any]) -> list[Any]:
    """The config's tools as REST entries; a function is one entry declaring it alone."""
    return [_rest_tool(tool, index) for index, tool in enumerate(tools)]


def _rest_tool(tool: Any, index: int) -> Any:
    if _is_function(tool):
        return {"functionDeclarations": [_declare(tool, index)]}
    if isinstance(tool, Mapping) or _is_sdk_tool(tool):
        return _plain_tree(tool)
    # Anything else (a callable object, an MCP tool or session) would be misread as a
    # declaration without parameters, or not at all: refused, naming what to give instead.
    raise InvalidInputError(
        f"config.tools[{index}] is a {type(tool).__name__}, which ToolFilter does not read: "
        "give each tool as a Python function or method (google-genai declares those from "
        "their signature), a types.Tool or a dict {'function_declarations': [...]}"
    )


def _is_sdk_tool(tool: Any) -> bool:
    """Whether ``tool`` is google-genai's ``types.Tool`` (only an SDK user has one)."""
    try:
        from google.genai import types
    except ImportError:
        return False
    return isinstance(tool, types.Tool)


def _is_function(tool: Any) -> bool:
    """A tool the SDK declares from its signature: a function or a method, as it checks."""
    return inspect.isfunction(tool) or inspect.ismethod(tool)


def _declare(function: Any, index: int) -> Any:
    """The declaration google-genai sends for ``function``, as JSON."""
    name = getattr(function, "__qualname__", repr(function))
    try:
        from google.genai import types
    except ImportError:
        raise InvalidInputError(
            f"config.tools[{index}] is the Python function {name!r}, which only google-genai "
            "declares: install it, or give the declaration as a types.Tool or a dict"
        ) from None
    try:
        declared = types.FunctionDeclaration.from_callable_with_api_option(
            callable=function, use_json_schema=True
        )
    except Exception as error:  # the SDK's own refusal, which generate_content would raise
        raise InvalidInputError(
            f"config.tools[{index}]: google-genai cannot declare the function {name!r}: {error}"
        ) from None
    return plain_json(declared)


def _restored_tools(
    given: list[Any], lifted: list[Any], filtered: Mapping[str, Any], positions: Sequence[int]
) -> list[Any]:
    """The filtered tools in the config's form: a kept function as the function itself."""
    tools = filtered["tools"]
    if tools is lifted:  # not filtered (nothing to route on): the tools as given
        return given
    return [
        given[i] if _is_function(given[i]) else tool
        for i, tool in zip(positions, tools, strict=True)
    ]


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

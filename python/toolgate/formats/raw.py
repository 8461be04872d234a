"""A tool as a format reads it, before the catalog checks it, and the providers toolgate writes
for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "DEFAULT_SERVER",
    "EMPTY_SCHEMA",
    "FORMATS",
    "PROVIDERS",
    "RawTool",
    "ToolView",
    "base_provider",
    "extract_meta",
]


#: Output formats of :meth:`toolgate.catalog.tool.Tool.to_provider`.
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini", "gemini-json-schema", "mcp")


# Output formats that are a variant of another provider's: their definitions go into that
# provider's request, so they are wrapped and their tokens counted as its are.
_VARIANT_OF = {"openai-responses": "openai", "gemini-json-schema": "gemini"}


#: Input formats :func:`parse_document` accepts.
FORMATS = ("mcp", "openai", "anthropic", "gemini", "jsonl", "text_tags", "tools")


JsonDict = dict[str, Any]

#: The server of tools read without one (a bare list, a request's tools array).
DEFAULT_SERVER = "default"


EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
"""The input schema of a tool that takes no arguments (copy it before changing it)."""


class ToolView(Protocol):
    """What writing a tool in a provider's format reads of it; a catalog's ``Tool`` is one.

    The formats sit below the catalog, so they name this shape rather than the class.
    """

    @property
    def server(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def exposed_name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def title(self) -> str | None: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...
    @property
    def annotations(self) -> dict[str, Any]: ...
    @property
    def strict(self) -> bool: ...


def base_provider(fmt: str) -> str:
    """The provider whose request an output format of :data:`PROVIDERS` belongs to
    (``"openai-responses"`` -> ``"openai"``, ``"gemini-json-schema"`` -> ``"gemini"``)."""
    return _VARIANT_OF.get(fmt, fmt)


@dataclass(frozen=True)
class RawTool:
    """One tool as read from a source, before validation.

    ``where`` locates it in the input (``tools[3]``, ``line 17``) for error messages;
    ``problem`` is set when the input could not even be read as a tool.
    """

    where: str
    name: Any = None
    description: Any = None
    input_schema: Any = None
    server: Any = None
    annotations: Any = None
    meta: Any = None
    title: Any = None
    problem: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    strict: Any = None


def extract_meta(obj: Mapping[str, Any]) -> Any:
    """The toolgate block of a tool: ``x-toolgate``, ``_meta.toolgate`` or ``_meta.x-toolgate``.

    Returns ``None`` when the tool has none. Its shape is checked by the catalog.
    """
    if "x-toolgate" in obj:
        return obj["x-toolgate"]
    meta = obj.get("_meta")
    if isinstance(meta, Mapping):
        for key in ("toolgate", "x-toolgate"):
            if key in meta:
                return meta[key]
    return None

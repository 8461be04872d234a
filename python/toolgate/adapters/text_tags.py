"""The text-tag form some frameworks put inside a prompt.

::

    <toolname>get_weather</toolname>
    <tooldescription>Get current weather and a 7-day forecast</tooldescription>
    <userq>I'm planning a retreat in Denver next weekend</userq>

Each ``<toolname>`` is paired with the ``<tooldescription>`` that follows it (before the next
``<toolname>``). Tags carry no schema, so tools read this way take no arguments.
:func:`user_query` reads the ``<userq>`` tag and :func:`strip_tool_tags` removes the tool tags
from a payload before it is forwarded, as a gateway does.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from toolgate.adapters import RawTool

if TYPE_CHECKING:
    from toolgate.tool import Tool

__all__ = ["parse", "render", "strip_tool_tags", "user_query"]

_TAG = re.compile(r"<(toolname|tooldescription)>(.*?)</\1>", re.DOTALL)
_TOOL_TAGS = re.compile(r"<(toolname|tooldescription)>.*?</\1>\s*", re.DOTALL)
_USERQ = re.compile(r"<userq>(.*?)</userq>", re.DOTALL)


def parse(text: str, server: str | None) -> list[RawTool]:
    """Read every ``<toolname>``/``<tooldescription>`` pair in ``text``."""
    out: list[RawTool] = []
    name: str | None = None
    description: str | None = None
    index = 0

    def flush() -> None:
        nonlocal name, description, index
        if name is not None:
            out.append(
                RawTool(
                    where=f"<toolname> #{index + 1}",
                    name=html.unescape(name.strip()),
                    description=html.unescape((description or "").strip()),
                    server=server,
                )
            )
            index += 1
        name, description = None, None

    for match in _TAG.finditer(text):
        tag, body = match.group(1), match.group(2)
        if tag == "toolname":
            flush()
            name = body
        elif name is None or description is not None:
            out.append(
                RawTool(
                    where=f"offset {match.start()}",
                    problem="<tooldescription> without a <toolname> before it",
                )
            )
        else:
            description = body
    flush()
    return out


def user_query(text: str) -> str | None:
    """The content of the ``<userq>`` tag, or ``None`` if there is none."""
    match = _USERQ.search(text)
    return html.unescape(match.group(1).strip()) if match else None


def strip_tool_tags(text: str) -> str:
    """``text`` without its ``<toolname>`` and ``<tooldescription>`` tags."""
    return _TOOL_TAGS.sub("", text)


def render(tools: Iterable[Tool]) -> str:
    """Write tools in the tag form, named by their exposed names."""
    return "".join(
        f"<toolname>{html.escape(t.exposed_name, quote=False)}</toolname>\n"
        f"<tooldescription>{html.escape(t.description, quote=False)}</tooldescription>\n"
        for t in tools
    )

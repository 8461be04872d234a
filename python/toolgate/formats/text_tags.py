"""The text-tag form some frameworks put inside a prompt.

::

    <toolname>get_weather</toolname>
    <tooldescription>Get current weather and a 7-day forecast</tooldescription>
    <userq>I'm planning a retreat in Denver next weekend</userq>

Each ``<toolname>`` is paired with the ``<tooldescription>`` that follows it (before the next
``<toolname>``). Tags carry no schema, so tools read this way take no arguments. Unclosed and
mismatched tags are reported with their line, never dropped.
:func:`user_query` reads the ``<userq>`` tag and :func:`strip_tool_tags` removes the tool tags
from a payload before it is forwarded, as a gateway does.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from toolgate.formats.raw import RawTool, ToolView

__all__ = ["catalog_in", "parse", "render", "strip_tool_tags", "user_query", "without_reminders"]

_TAG = re.compile(r"<(/?)(toolname|tooldescription)>")
_SPACE = re.compile(r"\s*")


@dataclass
class _Open:
    """A tag whose closing tag has not been seen yet."""

    tag: str
    line: int
    body_start: int


@dataclass
class _Pending:
    """The tool a ``<toolname>`` started, filled in as its tags close."""

    line: int
    name: str | None = None
    description: str | None = None
    problem: str | None = None

    def fail(self, problem: str) -> None:
        # The first problem explains the rest: later ones usually follow from it.
        self.problem = self.problem or problem


class _Reader:
    """Walks the tool tags of a text in order, pairing them and noting every broken one."""

    def __init__(self, text: str, server: str | None) -> None:
        self.text = text
        self.server = server
        self.out: list[RawTool] = []
        self.tool: _Pending | None = None
        self.open: _Open | None = None

    def run(self) -> list[RawTool]:
        line, scanned = 1, 0
        for match in _TAG.finditer(self.text):
            line += self.text.count("\n", scanned, match.start())
            scanned = match.start()
            closing, tag = bool(match.group(1)), match.group(2)
            if closing:
                self._close(tag, line, match.start())
            else:
                self._start(tag, line, match)
        if self.open is not None:
            self._unclosed(len(self.text), "the text ends")
        self._flush()
        return self.out

    def _start(self, tag: str, line: int, match: re.Match[str]) -> None:
        if self.open is not None:
            self._unclosed(match.start(), f"<{tag}> opens at line {line}")
        if tag == "toolname":
            self._flush()
            self.tool = _Pending(line)
        self.open = _Open(tag, line, match.end())

    def _close(self, tag: str, line: int, at: int) -> None:
        opened, self.open = self.open, None
        if opened is None:
            self._orphan(line, f"</{tag}> at line {line} has no opening <{tag}>")
        elif opened.tag != tag:
            problem = f"<{opened.tag}> at line {opened.line} is closed by </{tag}> at line {line}"
            self._broken(opened, at, problem)
        elif tag == "toolname" and self.tool is not None:
            self.tool.name = self.text[opened.body_start : at]
        elif self.tool is None:
            self._orphan(opened.line, "<tooldescription> without a <toolname> before it")
        elif self.tool.description is not None:
            self.tool.fail(f"a second <tooldescription> at line {opened.line}")
        else:
            self.tool.description = self.text[opened.body_start : at]

    def _unclosed(self, at: int, until: str) -> None:
        opened, self.open = self.open, None
        if opened is not None:
            problem = f"<{opened.tag}> at line {opened.line} is never closed ({until} first)"
            self._broken(opened, at, problem)

    def _broken(self, opened: _Open, at: int, problem: str) -> None:
        if opened.tag == "toolname" and self.tool is not None:
            # Keep the first line of what follows the tag, so the message names the tool.
            body = self.text[opened.body_start : at].strip()
            self.tool.name = body.splitlines()[0] if body else None
        if self.tool is None:
            self._orphan(opened.line, problem)
        else:
            self.tool.fail(problem)

    def _orphan(self, line: int, problem: str) -> None:
        self.out.append(RawTool(where=f"line {line}", problem=problem))

    def _flush(self) -> None:
        tool, self.tool = self.tool, None
        if tool is None:
            return
        name = html.unescape(tool.name.strip()) if tool.name is not None else None
        self.out.append(
            RawTool(
                where=f"line {tool.line}",
                name=name,
                description=html.unescape((tool.description or "").strip()),
                server=self.server,
                problem=tool.problem,
            )
        )


def parse(text: str, server: str | None) -> list[RawTool]:
    """Read every ``<toolname>``/``<tooldescription>`` pair in ``text``.

    Each tool is located by the line of its ``<toolname>``. A tag that is never closed, closed
    by the other tag, or a closing tag with no opening one makes a bad entry naming its line,
    so no tool is silently dropped or merged into its neighbour.
    """
    return _Reader(text, server).run()


def catalog_in(text: str, server: str | None) -> list[RawTool] | None:
    """The tags of ``text`` (as :func:`parse` reads them) when it is a catalog in this form,
    not words that mention a tag ("what does <toolname> mean?"): it asks its question in
    ``<userq>``, or each of its tools has a whole ``<toolname>`` and ``<tooldescription>``;
    else ``None``."""
    if "<toolname>" not in text:
        return None
    tags = parse(text, server)
    if user_query(text) is not None:
        return tags
    whole = bool(tags) and all(tag.problem is None and tag.description for tag in tags)
    return tags if whole else None


def user_query(text: str) -> str | None:
    """The content of the ``<userq>`` tag, or ``None`` if there is none."""
    for start, end in _elements(text, "userq"):
        return html.unescape(text[start + len("<userq>") : end - len("</userq>")].strip())
    return None


def strip_tool_tags(text: str) -> str:
    """``text`` without its ``<toolname>`` and ``<tooldescription>`` tags."""
    return _without(text, "toolname", "tooldescription")


def render(tools: Iterable[ToolView]) -> str:
    """Write tools in the tag form, named by their exposed names."""
    return "".join(
        f"<toolname>{html.escape(t.exposed_name, quote=False)}</toolname>\n"
        f"<tooldescription>{html.escape(t.description, quote=False)}</tooldescription>\n"
        for t in tools
    )


def without_reminders(text: str) -> str:
    """``text`` without Claude Code's ``<system-reminder>`` elements: context the client adds
    to a user turn (the project's CLAUDE.md, the todo list), which the user did not ask.
    Routed on, CLAUDE.md filled all the tokens the model reads before the user's words.
    Claude Code writes one as a block: its opening tag starts the text or a line, or its
    body starts on a line of its own; one typed inside a sentence is the user's words."""
    return _without(text, "system-reminder", blocks=True)


def _without(text: str, *tags: str, blocks: bool = False) -> str:
    """``text`` without its elements of ``tags``, each with the white space after it; with
    ``blocks``, only those written as a block (see :func:`without_reminders`)."""
    kept, at = [], 0
    for start, end in _elements(text, *tags, blocks=blocks):
        kept.append(text[at:start])
        space = _SPACE.match(text, end)  # the white space after an element goes with it
        at = space.end() if space else end
    return "".join([*kept, text[at:]]) if kept else text


def _elements(text: str, *tags: str, blocks: bool = False) -> Iterator[tuple[int, int]]:
    """Where each ``<tag>...</tag>`` element of ``text`` (of any of ``tags``) starts and ends,
    each opening tag paired with the first closing tag of its name after it (as
    ``<(a|b)>.*?</\\1>`` reads them); with ``blocks``, only an opening tag that starts the
    text or a line, or ends one, opens an element. Closing tags are found with ``str.find``,
    once per opening: a regex tries every opening tag left unclosed to the end of the text,
    quadratic in a client's text holding many."""
    opening = re.compile("<({})>".format("|".join(map(re.escape, tags))))
    unclosed: set[str] = set()  # a tag with no closing tag past one opening has none later
    at = 0
    while len(unclosed) < len(tags) and (match := opening.search(text, at)) is not None:
        tag, at = match.group(1), match.end()
        if blocks and not _starts_block(text, match.start(), at):
            continue
        end = -1 if tag in unclosed else text.find(f"</{tag}>", at)
        if end == -1:
            unclosed.add(tag)
            continue
        at = end + len(f"</{tag}>")
        yield match.start(), at


def _starts_block(text: str, start: int, end: int) -> bool:
    """Whether the tag at ``start:end`` of ``text`` starts the text or a line, or ends a
    line (its element's body then starts on the next)."""
    return start == 0 or text[start - 1] == "\n" or text.startswith(("\n", "\r\n"), end)

"""JSON from outside (files, servers, a model's tool calls) read within bounds.

Python's own readers have none that hostile input cannot reach: ``json.loads`` of 100,000
nested brackets raises ``RecursionError``, a 5,000-digit number ``ValueError``, a path to
``/dev/zero`` is read until memory runs out, and every recursive walk of an accepted value
(schema checks, fingerprints, validation) fails on deep nesting later, far from the input.
These helpers refuse such input where it is read, with a message that says what is wrong, and
let each caller raise it as its own :class:`~toolgate.errors.ToolgateError`.
"""

from __future__ import annotations

import codecs
import json
import math
import numbers
import os
import stat
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO

from toolgate.unicode import lone_surrogate_at

__all__ = [
    "MAX_DEPTH",
    "MAX_VALUES",
    "JsonLimitError",
    "NotUtf8Error",
    "json_problem",
    "loads",
    "nesting",
    "not_utf8_problem",
    "one_json_document",
    "open_regular",
    "read_bounded",
    "read_text",
    "without_bom",
]

#: Deepest nesting of objects and arrays accepted in a tool or a call's arguments: far past
#: any real schema, and well inside the interpreter's recursion limit for every walker.
MAX_DEPTH = 64

#: Most values (each key, item and scalar) a call's arguments may hold: more than a model
#: writes within its output limit, and about 0.3 s of checking on a slow core, where each
#: value costs microseconds of Python with the GIL held (3 million stalled a proxy's event
#: loop, which every session shares, for seconds).
MAX_VALUES = 100_000


# The bits of the longest integer Python prints or parses by default (4,300 digits).
_MAX_INT_BITS = 14_280


class JsonLimitError(ValueError):
    """Input past a bound (size, nesting) or that is no regular file; the message says which."""


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused past ``limit`` bytes.

    A directory, a device (``/dev/zero``) or a pipe is a :class:`JsonLimitError` before it is
    opened for reading (opening a FIFO blocks); I/O failures are ``OSError``.
    """
    with open_regular(path) as file:
        # The size first, so a file far past the limit costs no read of ``limit`` bytes; the
        # bounded read still catches a file that grows after the check.
        if os.fstat(file.fileno()).st_size <= limit:
            data = file.read(limit + 1)
            if len(data) <= limit:
                return data
    raise JsonLimitError(f"{path} is larger than {limit:,} bytes, the most read here")


class NotUtf8Error(UnicodeDecodeError):
    """A file that is not UTF-8 text; the message names it and where its first bad byte is."""

    # UnicodeDecodeError's arguments first: pickle and copy rebuild an error from its args
    # (the message then comes back with its attributes).
    def __init__(
        self, encoding: str, data: bytes, start: int, end: int, reason: str, message: str = ""
    ) -> None:
        super().__init__(encoding, data, start, end, reason)
        self.message = message

    def __str__(self) -> str:
        return self.message or super().__str__()


def read_text(path: Path, limit: int) -> str:
    """The text of the regular file ``path`` (see :func:`read_bounded`), UTF-8 with a byte
    order mark allowed first; not UTF-8 is a :class:`NotUtf8Error` (a ``ValueError``)."""
    data = without_bom(read_bounded(path, limit))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # By line and column: a byte offset into a registry of thousands of lines is no help.
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        where = f"line {line}, column {column} (byte {data[exc.start]:#04x})"
        message = not_utf8_problem(path, data) or f"{path} is not UTF-8 at {where}"
        raise NotUtf8Error(
            exc.encoding, exc.object, exc.start, exc.end, exc.reason, message
        ) from None


# How the files a log rotation, a download or an archiver leaves start, and text in the
# encodings Windows tools write (PowerShell 5's `>` writes UTF-16): the longer marks first.
_NOT_UTF8 = {
    b"\x1f\x8b": "gzip-compressed: decompress it first",
    b"\x28\xb5\x2f\xfd": "zstd-compressed: decompress it first",
    b"\xfd7zXZ\x00": "xz-compressed: decompress it first",
    # "BZh" and a level are text too: bzip2's block (or end of stream) mark must follow.
    **{
        b"BZh%d%b" % (level, block): "bzip2-compressed: decompress it first"
        for level in range(1, 10)
        for block in (b"1AY&SY", b"\x17rE8P\x90")
    },
    b"PK\x03\x04": "zip-compressed: decompress it first",
    codecs.BOM_UTF32_LE: "UTF-32 text: save it as UTF-8",
    codecs.BOM_UTF32_BE: "UTF-32 text: save it as UTF-8",
    codecs.BOM_UTF16_LE: "UTF-16 text: save it as UTF-8",
    codecs.BOM_UTF16_BE: "UTF-16 text: save it as UTF-8",
}


def not_utf8_problem(path: Path, head: bytes) -> str | None:
    """What to say of ``path`` if its first bytes ``head`` show it is no UTF-8 text at all
    (compressed, or UTF-16 or UTF-32), else None: read as UTF-8, it would be lines of bad
    bytes, or (a log) no line of toolgate's, a report of nothing."""
    for mark, what in _NOT_UTF8.items():
        if head.startswith(mark):
            return f"{path} is {what}"
    return None


def without_bom(data: bytes) -> bytes:
    """``data`` without a UTF-8 byte order mark first: Windows editors (Notepad) save one,
    and JSON, TOML and YAML parsers refuse it or take it for content."""
    return data.removeprefix(codecs.BOM_UTF8)


def one_json_document(text: str | bytes) -> list[Any] | dict[str, Any] | None:
    """The one JSON array or object that the text of a JSON-lines file holds instead of lines:
    an array, or a value printed over several lines (none of whose lines is a record); else
    None, JSON lines included, which fail to parse at the end of their first value."""
    lines = text.splitlines() if isinstance(text, bytes) else text.split("\n")
    array = text.lstrip()[:1] in ("[", b"[")
    if not array and sum(1 for line in lines if line.strip()) < 2:
        return None  # one line: a record of JSON lines
    try:
        document = loads(text)
    except ValueError:
        return None
    return document if isinstance(document, (list, dict)) else None


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file, else a :class:`JsonLimitError`
    (opening a FIFO would block, and a device or a directory has no content to read)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise JsonLimitError(f"{path} is not a regular file (a directory, a device or a pipe)")
    # O_NONBLOCK: if a FIFO took the path's place since the check, opening it does not block.
    # O_BINARY (Windows): else the descriptor reads as text, CR LF as LF and stopping at the
    # first Ctrl-Z, which cut a model file at its 18th byte.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    handle = os.open(path, flags)
    file = os.fdopen(handle, "rb")
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        file.close()
        raise JsonLimitError(f"{path} is not a regular file (a directory, a device or a pipe)")
    return file


def loads(
    text: str | bytes,
    *,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
    parse_constant: Callable[[str], Any] | None = None,
) -> Any:
    """``json.loads`` that raises only ``ValueError``: nesting too deep for the parser (a
    ``RecursionError``) becomes a :class:`JsonLimitError`, like a number of more than 4,300
    digits already is a ``ValueError``. ``object_pairs_hook`` and ``parse_constant`` are
    ``json.loads``'s."""
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook, parse_constant=parse_constant)
    except RecursionError:
        raise JsonLimitError("JSON nested too deeply to read") from None


def json_problem(
    value: Any,
    max_depth: int = MAX_DEPTH,
    *,
    strict: bool = True,
    max_values: int | None = None,
    finite: bool = False,
) -> str | None:
    """What in ``value`` is not plain JSON toolgate can hold, as a noun phrase naming where
    (``"NaN or Infinity at properties/x/maximum"``), or ``None``.

    Refused: nesting deeper than ``max_depth``, a key that is not a string, a string or key
    holding a lone surrogate (no encoder takes it), NaN or infinity, and any type JSON has no
    form for. The walk is iterative, so it is safe on values nested past the recursion limit.
    ``strict=False`` checks only what breaks a reader: the nesting, and integers longer than
    JSON text may hold (4,300 digits; not even ``repr`` takes them). ``max_values`` refuses
    more values than that (see :data:`MAX_VALUES`), the walk stopping there. ``finite``
    refuses NaN and infinity under ``strict=False`` too, of numpy's and ``Decimal`` as well.
    """
    if not isinstance(value, (dict, list)):
        return _scalar_problem(value, "(root)", strict)
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    # Counted by the container, before its items are walked: a million-item list costs one
    # len(), not a million steps, when it is past the limit.
    left = max_values
    while stack:
        node, where, depth = stack.pop()
        if depth >= max_depth:
            return f"nesting deeper than {max_depth} levels at {where or '(root)'}"
        if left is not None:
            left -= len(node)
            if left < 0:
                return f"more than {max_values:,} values (keys and items)"
        is_dict = isinstance(node, dict)
        for key, child in node.items() if is_dict else enumerate(node):
            if is_dict and strict:
                if not isinstance(key, str):
                    kind = type(key).__name__
                    return f"a key that is a {kind}, not a string, at {where or '(root)'}"
                bad = lone_surrogate_at(key)
                if bad is not None:
                    return f"a key with a lone surrogate at {where or '(root)'} (character {bad})"
            if isinstance(child, (dict, list)):
                stack.append((child, f"{where}/{key}" if where else str(key), depth + 1))
            elif finite and not _is_finite(child):
                return f"NaN or Infinity at {where}/{key}" if where else f"NaN or Infinity at {key}"
            elif strict or type(child) is int:
                problem = _scalar_problem(child, f"{where}/{key}" if where else str(key), strict)
                if problem:
                    return problem
    return None


def nesting(value: Any) -> int:
    """How many levels of objects and arrays ``value`` nests (0 for a scalar, 1 for ``{}``):
    :func:`json_problem` refuses more than ``max_depth``. Iterative, as that walk is."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            children = node.values() if isinstance(node, dict) else node
            stack.extend(
                (child, level + 1) for child in children if isinstance(child, (dict, list))
            )
    return deepest


def _is_finite(value: Any) -> bool:
    """Whether ``value`` is no NaN or infinity, of any number type code may build: numpy's
    floats are no ``float``, and a ``Decimal`` NaN raises on the first comparison."""
    if isinstance(value, Decimal):
        return value.is_finite()
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Rational):
        return math.isfinite(value)
    return True


def _scalar_problem(node: Any, at: str, strict: bool) -> str | None:
    if isinstance(node, int) and not isinstance(node, bool):
        return (
            None
            if node.bit_length() <= _MAX_INT_BITS
            else f"an integer of more than 4,300 digits at {at}"
        )
    if not strict or node is None or isinstance(node, bool):
        return None
    if isinstance(node, str):
        bad = lone_surrogate_at(node)
        return None if bad is None else f"a lone surrogate at {at} (character {bad})"
    if isinstance(node, float):
        return None if math.isfinite(node) else f"NaN or Infinity at {at}"
    return f"a {type(node).__name__} at {at}, which JSON cannot hold"

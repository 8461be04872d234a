"""Checks of the arguments a caller passes, shared by every layer: each failure is an
:class:`~toolgate.errors.InvalidInputError` that names the argument and shows the value
without ever failing to show it."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from toolgate.errors import InvalidInputError
from toolgate.unicode import lone_surrogate_at

__all__ = [
    "MAX_COUNT",
    "check_count",
    "check_flag",
    "check_instance",
    "check_share",
    "file_path",
    "finite_number",
    "number_list",
    "shown",
    "tool_list",
]


def finite_number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (``True`` is an int to Python, not a
    setting's number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    # An integer past float's range is no finite setting either (and isfinite raises on it).
    return math.isfinite(value) if isinstance(value, float) else value.bit_length() <= 1024


#: Largest count a setting takes: the core reads counts as 64-bit integers, and no index
#: holds more rows than this.
MAX_COUNT = 2**32 - 1


def check_count(name: str, value: object, *, minimum: int) -> None:
    """Raise :class:`InvalidInputError` unless ``value`` is an integer from ``minimum`` to
    :data:`MAX_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{name} must be an integer >= {minimum}, got {shown(value)}")
    if value > MAX_COUNT:
        raise InvalidInputError(f"{name} must be at most {MAX_COUNT:,}, got {shown(value)}")


def check_flag(name: str, value: object) -> None:
    """Raise :class:`InvalidInputError` unless ``value`` is True or False: any other value
    would be read by its truth (``"no"`` as true), and a list fails far from the call."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got a {type(value).__name__}")


def check_instance(name: str, value: object, kind: type, *, optional: bool = False) -> None:
    """Raise :class:`InvalidInputError` unless ``value`` is a ``kind`` (or None, when
    ``optional``): a dict of settings in its place fails far from the call otherwise."""
    if isinstance(value, kind) or (optional and value is None):
        return
    either = " or None" if optional else ""
    hint = f"; {kind.__name__}(**settings) makes one" if isinstance(value, Mapping) else ""
    raise InvalidInputError(
        f"{name} must be a {kind.__name__}{either}, got {type(value).__name__}{hint}"
    )


def check_seconds(name: str, value: object) -> None:
    """Raise :class:`InvalidInputError` unless ``value`` is a finite number of seconds >= 0:
    no deadline of NaN or infinity ever passes, so a wait bounded by either never ends."""
    if not (finite_number(value) and value >= 0):  # type: ignore[operator]
        raise InvalidInputError(
            f"{name} must be a finite number of seconds >= 0, got {shown(value)}"
        )


def check_share(name: str, value: object) -> None:
    """Raise :class:`InvalidInputError` unless ``value`` is a number in [0, 1] (NaN is in no
    range: it compares false with every bound)."""
    if not (finite_number(value) and 0.0 <= value <= 1.0):  # type: ignore[operator]
        raise InvalidInputError(f"{name} must be in [0, 1], got {shown(value)}")


def number_list(values: object, name: str, low: float, high: float) -> list[float]:
    """``values`` as a list of numbers from ``low`` to ``high``, or an error naming the
    argument ``name`` (a lone number or string is refused: it is no list of values)."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InvalidInputError(
            f"{name} must be a list of numbers in [{low:g}, {high:g}], got {shown(values)}"
        )
    listed = list(values)
    for value in listed:
        if not (finite_number(value) and low <= value <= high):
            raise InvalidInputError(
                f"{name} entries must be numbers in [{low:g}, {high:g}], got {shown(value)}"
            )
    return listed


def shown(value: object) -> str:
    """``repr(value)`` for a message: cut short, and never raising (``repr`` of an integer of
    more than 4,300 digits does)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not replace the error being reported
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else f"{text[:80]}..."


def file_path(name: str, value: str | os.PathLike[str]) -> Path:
    """``value`` as a path, else :class:`InvalidInputError` naming ``name``: a str the file
    system cannot encode (a lone surrogate, from a reply cut in an emoji) would fail as a
    bare ``UnicodeEncodeError`` at the first use, far from the call. Undecodable bytes that
    ``os.fsdecode`` gave as surrogates (``\\udce9``) encode back, and stay a path."""
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidInputError(f"{name} must be a path, got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str):  # an os.scandir(b"...") entry: pathlib takes no bytes
        raise InvalidInputError(f"{name} must be a path of str, got {type(text).__name__}")
    try:
        os.fsencode(text)
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{name} {shown(value)} holds a lone surrogate at character {exc.start}, "
            "which no file name can hold"
        ) from None
    return Path(value)


def tool_list(ids: Iterable[str], name: str, kinds: str = "tool ids") -> list[str]:
    """``ids`` as a list of non-empty strings, or an error naming the argument ``name`` and
    what it holds, ``kinds`` (a lone string is refused: its letters are not ids)."""
    if isinstance(ids, str):
        raise InvalidInputError(f"{name} must be a list of {kinds}, not {ids!r}")
    if isinstance(ids, (bytes, Mapping)) or not isinstance(ids, Iterable):
        raise InvalidInputError(f"{name} must be a list of {kinds}, got {type(ids).__name__}")
    listed = list(ids)
    for entry in listed:
        if not isinstance(entry, str) or not entry:
            raise InvalidInputError(f"{name} entries must be {kinds}, got {shown(entry)}")
        # No id holds one (the catalog refuses them), and the core cannot encode it.
        if (bad := lone_surrogate_at(entry)) is not None:
            raise InvalidInputError(
                f"{name} entries must be {kinds}, got {shown(entry)} (a lone surrogate at "
                f"character {bad})"
            )
    return listed

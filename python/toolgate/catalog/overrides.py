"""Load-time overrides (``x-toolgate`` blocks given by tool id or name) in their JSON form.

A catalog keeps its overrides so that :meth:`~toolgate.catalog.Catalog.replace_server`
applies them to a server's fresh tools, and a saved router stores them beside the catalog.
Both hold the one JSON form :func:`saved_overrides` gives, checked when the catalog loads, so
a router that saved always reopens, and a reopened router treats overrides exactly as the
fresh one did.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["saved_overrides"]


def _json_safe(value: object, where: str) -> Any:
    """``value`` rebuilt from JSON types only; a :class:`ValueError` naming ``where`` if not.

    Mappings become objects and tuples lists, as ``json.dumps`` would write them. Anything
    else JSON has no form for (a set, NaN, an object) is refused rather than written as
    ``json.dumps(default=str)`` would, or as the non-standard ``NaN`` token: the reopened
    catalog would then hold overrides the saved one did not.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise ValueError(f"{where} is {value!r}, which JSON cannot hold")
    if isinstance(value, (list, tuple)):
        return [_json_safe(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} has the key {key!r}, which is not a string")
            out[key] = _json_safe(item, f"{where}.{key}")
        return out
    raise ValueError(
        f"{where} is a {type(value).__name__}, which JSON cannot hold "
        "(use lists, objects, strings, numbers, booleans and null)"
    )


def saved_overrides(overrides: object) -> tuple[dict[str, dict[str, Any]], str]:
    """Load-time overrides in the JSON form a router saves, and the digest of that form.

    ``overrides`` maps tool ids or names to ``x-toolgate`` blocks (objects); anything else,
    or a value JSON cannot hold, is a :class:`ValueError` naming the entry. The same check
    runs on save and on load, so a router that saved never fails to reopen on this.
    """
    if not isinstance(overrides, Mapping):
        raise ValueError(
            "overrides must be an object mapping tool ids or names to x-toolgate blocks, "
            f"not {type(overrides).__name__}"
        )
    out: dict[str, dict[str, Any]] = {}
    for key, block in overrides.items():
        if not isinstance(key, str):
            raise ValueError(f"override key {key!r} is not a string (a tool id or name)")
        if not isinstance(block, Mapping):
            raise ValueError(
                f"override {key!r} must be an object (an x-toolgate block), "
                f"not {type(block).__name__}"
            )
        out[key] = _json_safe(block, f"override {key!r}")
    # Sorted keys: the digest must not depend on the order the caller wrote them in.
    canonical = json.dumps(out, sort_keys=True, separators=(",", ":"))
    return out, hashlib.sha256(canonical.encode()).hexdigest()[:32]

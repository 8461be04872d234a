"""Gemini's field names, which its API takes in two spellings.

The Gemini API reads a request as proto3 JSON: a field may be written under its lowerCamelCase
name or its snake_case (proto) name, and one message giving a field under both is refused.
Clients use both: google-genai writes ``functionDeclarations`` and ``toolConfig`` in
camelCase but each declaration's own fields as the SDK names them (``parameters_json_schema``),
and a hand-written request may use either. Every reader of a Gemini field goes through
:func:`field_key`, so no spelling is ever missed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["DECLARATIONS", "SCHEMA_FIELDS", "SpellingClash", "field_key", "gives", "spellings"]

#: Where a request's tools entry lists its function declarations.
DECLARATIONS = "functionDeclarations"
#: Where a declaration's parameters are, one or the other: JSON Schema, or the OpenAPI subset.
SCHEMA_FIELDS = ("parametersJsonSchema", "parameters")


class SpellingClash(ValueError):
    """An object gives a field twice: under both spellings, or beside one it excludes."""


def spellings(field: str) -> tuple[str, str]:
    """``field`` (a camelCase name) and its snake_case spelling, camelCase first."""
    return field, re.sub(r"([A-Z])", r"_\1", field).lower()


def field_key(obj: Mapping[str, Any], *fields: str) -> str | None:
    """The key under which ``obj`` gives one of ``fields`` (camelCase names, each also read
    in snake_case) a value other than null, or ``None`` if it gives none.

    ``fields`` are alternatives (``parametersJsonSchema`` or ``parameters``): an object giving
    two of them, or one under both spellings, is ambiguous and raises :class:`SpellingClash`
    naming both keys.
    """
    keys = _keys_given(obj, fields)
    if len(keys) > 1:
        raise SpellingClash(f"gives both {keys[0]!r} and {keys[1]!r}, which Gemini takes one of")
    return keys[0] if keys else None


def gives(obj: Mapping[str, Any], *fields: str) -> bool:
    """Whether ``obj`` gives any of ``fields`` (camelCase names), in either spelling."""
    return bool(_keys_given(obj, fields))


def _keys_given(obj: Mapping[str, Any], fields: tuple[str, ...]) -> list[str]:
    # proto3 JSON reads null as the field left unset, as a pydantic dump of an SDK object
    # (``model_dump()``) writes every field it does not set.
    return [
        key
        for field in fields
        for key in dict.fromkeys(spellings(field))
        if obj.get(key) is not None
    ]

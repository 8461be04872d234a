"""Checks a tool's JSON Schema needs beyond its metaschema, and the validator verify uses.

A schema can pass its draft's metaschema and still break verification: a ``$ref`` that points
nowhere inside it, a remote ``$ref`` (which a validator would *fetch*, at a URL an untrusted
server chose), a reference cycle, a ``pattern`` Python cannot compile. Loading refuses those
(:func:`reference_and_regex_problem`); :func:`schema_validator` builds validators whose
registry never retrieves anything, so nothing that got through can reach the network.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from toolgate.formats.schema_walk import child_schemas

__all__ = ["reference_and_regex_problem", "schema_validator"]


def _refuse_retrieval(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    # Tool schemas come from untrusted servers: a $ref must never make the router fetch a URL.
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


@lru_cache(maxsize=1)
def _offline_registry() -> Any:
    from referencing import Registry

    return Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def schema_validator(schema: Mapping[str, Any] | bool) -> Any:
    """A jsonschema validator for ``schema`` that checks formats and never fetches anything.

    The draft is the schema's ``$schema`` (2020-12 if none). A ``$ref`` resolves inside the
    schema or to a bundled metaschema, else validation raises
    ``referencing.exceptions.Unresolvable``; it never opens a network connection.
    """
    from jsonschema.validators import (  # type: ignore[import-untyped]
        Draft202012Validator,
        validator_for,
    )

    cls = validator_for(schema, default=Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER, registry=_offline_registry())


_MAX_REF_CHAIN = 64


def _ref_problem(ref: str, where: str, resolver: Any) -> str | None:
    """Why ``ref`` (found at ``where``) cannot be followed by the validator, if it cannot.

    The lookup uses a registry holding only the schema itself, so a remote URL, a pointer to
    nowhere, a target that is not a schema and a cycle of bare references (which would recurse
    forever at verify time) are all caught here, at load.
    """
    from referencing.exceptions import Unresolvable

    seen: set[int] = set()
    target = ref
    for _ in range(_MAX_REF_CHAIN):
        try:
            resolved = resolver.lookup(target)
        except (Unresolvable, ValueError):  # ValueError: a malformed URL
            outside = "" if target.startswith("#") else "; references are never fetched remotely"
            return f"$ref {target!r} at {where} does not resolve inside the schema{outside}"
        contents = resolved.contents
        if not isinstance(contents, (dict, bool)):
            return f"$ref {target!r} at {where} points at a {type(contents).__name__}, not a schema"
        if not isinstance(contents, dict) or not isinstance(contents.get("$ref"), str):
            return None
        if id(contents) in seen:
            return f"$ref {ref!r} at {where} is part of a reference cycle"
        seen.add(id(contents))
        target, resolver = contents["$ref"], resolved.resolver
    return f"$ref {ref!r} at {where} starts a chain of more than {_MAX_REF_CHAIN} references"


def _regex_problem(pattern: str, where: str) -> str | None:
    # jsonschema matches "pattern" and "patternProperties" with Python's re at verify time.
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"invalid regular expression {pattern!r} at {where}: {exc}"
    return None


def _node_problem(node: dict[str, Any], where: str, resolver: Any) -> str | None:
    at = where or "(root)"
    for key in ("$ref", "$dynamicRef"):
        if isinstance(node.get(key), str):
            problem = _ref_problem(node[key], at, resolver)
            if problem:
                return problem
    if isinstance(node.get("pattern"), str):
        problem = _regex_problem(node["pattern"], f"{where}/pattern".lstrip("/"))
        if problem:
            return problem
    if isinstance(node.get("patternProperties"), dict):
        for key in node["patternProperties"]:
            problem = _regex_problem(key, f"{where}/patternProperties".lstrip("/"))
            if problem:
                return problem
    return None


def _walk_problem(node: Any, where: str, resolver: Any, specification: Any) -> str | None:
    if not isinstance(node, dict):
        return None
    # A subschema with its own $id moves the base its relative references resolve against.
    resolver = resolver.in_subresource(specification.create_resource(node))
    problem = _node_problem(node, where, resolver)
    if problem:
        return problem
    for key, child in child_schemas(node):
        problem = _walk_problem(child, f"{where}/{key}".lstrip("/"), resolver, specification)
        if problem:
            return problem
    return None


def reference_and_regex_problem(schema: dict[str, Any], draft: Any) -> str | None:
    """A ``$ref`` that does not resolve within ``schema``, or a regex Python cannot compile.

    Both pass the metaschema but make verification fail; a remote ``$ref`` would also make it
    fetch a URL the tool's server chose.
    """
    from referencing.jsonschema import DRAFT202012, specification_with

    specification = specification_with(draft.ID_OF(draft.META_SCHEMA) or "", default=DRAFT202012)
    root = specification.create_resource(schema)
    resolver = _offline_registry().resolver_with_root(root)
    return _walk_problem(schema, "", resolver, specification)

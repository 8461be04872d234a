"""Checks a tool's JSON Schema needs beyond its metaschema, and the validator verify uses.

A schema can pass its draft's metaschema and still break verification: a ``$ref`` that points
nowhere inside it, a remote ``$ref`` (which a validator would *fetch*, at a URL an untrusted
server chose), a reference cycle, a ``pattern`` the matcher cannot compile. Loading refuses
those (:func:`reference_and_regex_problem`); :func:`schema_validator` builds validators whose
registry never retrieves anything, so nothing that got through can reach the network.

Patterns run on RE2, whose matching is linear in the text: Python's ``re`` (which jsonschema
uses) backtracks exponentially on ``^(a+)+$``, for seconds on a short argument, holding the GIL
(docs/design.md, "Hostile input").
JSON Schema patterns are ECMA-262 regular expressions; RE2 reads the common syntax alike
(``\\d`` and ``\\w`` are ASCII in both, ``$`` ends the text), and what it reads otherwise is
translated: ``\\uXXXX``, and ``\\s``, ``\\S`` and the dot, whose ECMA-262 classes take
Unicode spaces and line terminators (RE2's take ASCII ones and ``\\n``). What
RE2 cannot match in linear time (lookaround, backreferences) is refused at load, with the
pattern and where it is, as is ``patternProperties`` under ``unevaluatedProperties``, which
jsonschema would still match with ``re``. ``uniqueItems`` is checked in linear time too
(jsonschema compares unhashable items pairwise), and ``multipleOf`` exactly, on the
decimals the numbers were written as (jsonschema divides floats: 19.99 was no multiple of
0.01, and an integer past 1e308 overflowed).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any

from toolgate.formats.schema_walk import SCHEMA_KEYWORDS, child_schemas
from toolgate.unicode import well_formed

__all__ = [
    "pattern_search",
    "reference_and_regex_problem",
    "reference_problem",
    "schema_validator",
]

# ECMA-262's white space and line terminators, which its \s matches (RE2's: ASCII only),
# as the inside of an RE2 class, and the code points outside them, which \S matches.
_SPACES = r"\t-\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}"
_NOT_SPACES = (
    r"\x{0}-\x{8}\x{e}-\x{1f}\x{21}-\x{9f}\x{a1}-\x{167f}\x{1681}-\x{1fff}\x{200b}-\x{2027}"
    r"\x{202a}-\x{202e}\x{2030}-\x{205e}\x{2060}-\x{2fff}\x{3001}-\x{fefe}\x{ff00}-\x{10ffff}"
)
# What ECMA-262's dot matches: anything but a line terminator (RE2's stops at \n only).
_DOT = r"[^\n\r\x{2028}\x{2029}]"
# Escapes and characters read otherwise: a \uXXXX code unit, a class's brackets, the dot.
_TOKEN = re.compile(r"\\(u[0-9A-Fa-f]{4}|.)|[\[\].]", re.DOTALL)


def _re2_syntax(pattern: str) -> str:
    """``pattern`` as RE2 reads it alike: ECMA-262's ``\\uXXXX`` escapes in RE2's
    ``\\x{XXXX}`` form, and its ``\\s``, ``\\S`` and dot spelled out as the classes they
    are in ECMA-262, inside a class too (a tab, a no-break space or an ideographic space
    match ``[\\w\\s]``, a carriage return does not match ``.``)."""
    out: list[str] = []
    in_class = False
    last = 0
    for token in _TOKEN.finditer(pattern):
        out.append(pattern[last : token.start()])
        last = token.end()
        text, escaped = token.group(0), token.group(1)
        if escaped is not None and len(escaped) == 5:
            text = f"\\x{{{escaped[1:]}}}"
        elif escaped in ("s", "S"):
            inside = _SPACES if escaped == "s" else _NOT_SPACES
            text = inside if in_class else f"[{inside}]"
            if in_class and pattern.startswith("-", last):
                # A class escape cannot start a range: "[\s-z]" is a space, "-" or "z" (as
                # RE2 and ECMA-262's Annex B read it), but spelled out, its last character
                # would start one ("\x{feff}-z", which RE2 refuses).
                text, last = f"{text}\\-", last + 1
        elif text == "[":
            in_class = True
        elif text == "]":
            in_class = False
        elif text == "." and not in_class:
            text = _DOT
        out.append(text)
    out.append(pattern[last:])
    return "".join(out)


def _compile(pattern: str) -> Any:
    """``pattern`` compiled by RE2; ``ValueError`` naming the syntax RE2 refused."""
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    try:
        return re2.compile(_re2_syntax(well_formed(pattern)), options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(str(reason)) from None


# Schemas' patterns recur call after call; a call's own strings (the regex format) are not
# cached, or a stream of calls could fill memory with them.
_compiled = lru_cache(maxsize=1024)(_compile)


def pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (ECMA-262 syntax) matches somewhere in ``text``, in linear time."""
    return _compiled(pattern).search(well_formed(text)) is not None


def _shown(instance: Any) -> str:
    text = repr(instance) if not isinstance(instance, int) or abs(instance) < 10**100 else "..."
    return text if len(text) <= 100 else f"{text[:100]}..."


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

    if validator.is_type(instance, "string") and not pattern_search(pattern, instance):
        yield ValidationError(f"{_shown(instance)} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if pattern_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``additionalProperties``, with the properties that ``patternProperties``
    covers found by RE2."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = sorted(
        (
            key
            for key in instance
            if key not in named and not any(pattern_search(p, key) for p in patterns)
        ),
        key=str,
    )
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        listed = ", ".join(repr(key) for key in extras[:20]) + (", ..." if len(extras) > 20 else "")
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in sorted(patterns))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)"
            )


def _frozen(value: Any) -> Any:
    """A hashable stand-in for JSON ``value`` under JSON Schema equality: ``1`` and ``1.0``
    are equal, ``true`` and ``1`` are not, object keys are unordered."""
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, dict):
        return ("object", frozenset((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_frozen(item) for item in value))
    return ("value", value) if isinstance(value, str) else ("object id", id(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not (unique and validator.is_type(instance, "array")):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _frozen(item)
        if key in seen:
            yield ValidationError(f"{_shown(instance)} has non-unique elements")
            return
        seen.add(key)


# The largest exponent a Decimal argument is read exactly with (floats reach 1e-324 to 1e308).
_MAX_DECIMAL_EXPONENT = 400


def _written(number: Any) -> Fraction | None:
    """The decimal a JSON number was written as: a float by its shortest form (``0.07``, not
    the binary fraction nearest it), exactly; ``None`` for NaN or an infinity. Numbers built
    in code (numpy's, ``Decimal``) are read by value: their ``repr`` is no decimal."""
    if isinstance(number, numbers.Rational):  # int, numpy's integers, Fraction
        return Fraction(int(number.numerator), int(number.denominator))
    if isinstance(number, Decimal):
        # Decimal("1e999999999") would be a billion-digit integer: an exponent past any
        # float's is refused, as the infinity the JSON text's float would have been is.
        exponent = number.as_tuple().exponent
        usable = isinstance(exponent, int) and abs(exponent) <= _MAX_DECIMAL_EXPONENT
        return Fraction(number) if usable else None
    value = float(number)  # a float's subclass or numpy's float32 prints its type too
    return Fraction(Decimal(float.__repr__(value))) if math.isfinite(value) else None


def _multiple_of(validator: Any, step: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``multipleOf`` on the numbers as written: jsonschema divides floats as floats, so
    ``19.99`` is no multiple of ``0.01`` (1998.9999999999998), and an integer past 1e308
    overflows the division (an ``OverflowError``)."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "number") or not validator.is_type(step, "number"):
        return
    divisor = _written(step)
    if divisor is None or divisor <= 0:  # built in code
        return
    dividend = _written(instance)
    if dividend is None or (dividend / divisor).denominator != 1:
        yield ValidationError(f"{_shown(instance)} is not a multiple of {step!r}")


def _is_regex(instance: object) -> bool:
    """The ``regex`` format, checked by RE2 (``re.compile`` of a hostile argument can take
    as long as matching it)."""
    if not isinstance(instance, str):
        return True
    try:
        _compile(instance)
    except ValueError:
        return False
    return True


#: The formats verify asserts (docs/api.md, "verify"), whose checkers come with toolgate's
#: dependencies: jsonschema checks more when it finds more packages installed (fqdn:
#: ``hostname``, webcolors: ``color``), and a verdict must not change with what else is there.
#: ``ip-address`` is draft 3's name for ``ipv4``.
CHECKED_FORMATS = frozenset({
    "date", "date-time", "time", "email", "idn-email", "idn-hostname", "ipv4", "ip-address",
    "ipv6", "uri", "uri-reference", "uuid", "json-pointer", "relative-json-pointer", "regex",
})  # fmt: skip


@lru_cache(maxsize=8)
def _linear_validator(cls: Any) -> Any:
    """``cls`` with every keyword that matches a pattern (or compares items pairwise) replaced
    by a linear-time one, its formats those of :data:`CHECKED_FORMATS`, and the ``regex``
    format checked by RE2."""
    from jsonschema import FormatChecker  # type: ignore[import-untyped]
    from jsonschema.validators import extend  # type: ignore[import-untyped]

    known = [f for f in cls.FORMAT_CHECKER.checkers if f in CHECKED_FORMATS and f != "regex"]
    checker = FormatChecker(formats=known)
    checker.checks("regex")(_is_regex)
    keywords = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "uniqueItems": _unique_items,
        "multipleOf": _multiple_of,
    }
    extended = extend(cls, {k: v for k, v in keywords.items() if k in cls.VALIDATORS})
    extended.FORMAT_CHECKER = checker
    return extended


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
    from jsonschema.validators import (
        Draft202012Validator,
        validator_for,
    )

    cls = _linear_validator(validator_for(schema, default=Draft202012Validator))
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
    try:
        _compiled(pattern)
    except ValueError as exc:
        try:
            re.compile(pattern)
        except re.error as invalid:  # no regular expression in any dialect
            return f"invalid regular expression {pattern!r} at {where}: {invalid}"
        return (
            f"regular expression {pattern!r} at {where} cannot be matched in linear time (RE2 "
            f"refuses it: {exc}; lookaround and backreferences are not supported)"
        )
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


# Keywords whose subschemas apply to the very value their schema applies to: a reference
# cycle through them alone never reaches a smaller value, so validation recurses forever.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAP = ("dependentSchemas", "dependencies")
_IN_PLACE = frozenset({*_IN_PLACE_ONE, *_IN_PLACE_LIST, *_IN_PLACE_MAP})
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


def _in_place_edges(node: dict[str, Any], where: str, resolver: Any) -> Iterator[Any]:
    """The subschemas that apply to the value ``node`` applies to, each with where it is
    written, the resolver of its references, and the reference followed to it with where
    that is written (if one was)."""
    for key in _IN_PLACE_ONE:
        if isinstance(node.get(key), dict):
            yield node[key], f"{where}/{key}", resolver, None
    for key in _IN_PLACE_LIST:
        for i, sub in enumerate(node.get(key) or ()) if isinstance(node.get(key), list) else ():
            if isinstance(sub, dict):
                yield sub, f"{where}/{key}/{i}", resolver, None
    for key in _IN_PLACE_MAP:
        for name, sub in node[key].items() if isinstance(node.get(key), dict) else ():
            if isinstance(sub, dict):
                yield sub, f"{where}/{key}/{name}", resolver, None
    for key in _REF_KEYS:
        if isinstance(node.get(key), str):
            # Unresolvable ones are reported by the walk; a dynamic one is followed statically.
            with contextlib.suppress(Exception):
                found = resolver.lookup(node[key])
                if isinstance(found.contents, dict):
                    # Named where it is written, as far as the reference says.
                    ref = node[key]
                    there = ref[2:] if ref.startswith("#/") else ref
                    yield found.contents, there, found.resolver, (ref, where)


def _enter(
    node: dict[str, Any], where: str, resolver: Any, specification: Any, starts: list[Any]
) -> Iterator[Any]:
    """The in-place edges of ``node``; its other subschemas, which apply to a part of the
    value, are added to ``starts``."""
    if "$id" in node or "id" in node:  # a subresource moves the base of its references
        resolver = resolver.in_subresource(specification.create_resource(node))
    if not SCHEMA_KEYWORDS.isdisjoint(node):  # most nodes are leaves: spare the walk
        for key, child in child_schemas(node):
            if isinstance(child, dict) and key.split("/")[0] not in _IN_PLACE:
                starts.append((child, f"{where}/{key}".lstrip("/"), resolver))
    if _IN_PLACE.isdisjoint(node) and not any(key in node for key in _REF_KEYS):
        return iter(())
    return _in_place_edges(node, where, resolver)


# The most subschemas one value may be checked against (its in-place closure, counted with
# repeats): definitions that each refer twice to the next double it at every level, and
# jsonschema checks them all (2**14 took 5 s a call, 2**30 would take hours).
MAX_IN_PLACE = 10_000


def _reference_problem(schema: dict[str, Any], resolver: Any, specification: Any) -> str | None:
    """A ``$ref`` that leads back to a schema it is applied in without descending into the
    value (``{"not": {"$ref": "#"}}``, an ``anyOf`` branch referring to its own ``anyOf``),
    or references that fan out to more than :data:`MAX_IN_PLACE` subschemas for one value.
    On a cycle jsonschema would recurse until the interpreter's limit, where referencing's
    Rust map can panic (a ``BaseException`` no ``except Exception`` catches) rather than
    raise; on a fan-out it would check each call for hours.

    One depth-first walk of the graph of in-place subschemas and references, each schema
    visited once (iterative: a chain may be long); a schema reached through ``properties``,
    ``items`` and the like starts a walk of its own, since it applies to a smaller value.
    """
    done: dict[int, int] = {}  # how many subschemas each finished one applies, itself included
    starts: list[Any] = [(schema, "", resolver)]
    while starts:
        start, start_where, start_resolver = starts.pop()
        if id(start) in done:
            continue
        on_path = {id(start)}
        edges = _enter(start, start_where, start_resolver, specification, starts)
        path = [(start, start_where, edges, [1])]
        while path:
            node, at, edges, count = path[-1]
            step = next(edges, None)
            if step is None:
                path.pop()
                on_path.discard(id(node))
                done[id(node)] = total = min(sum(count), MAX_IN_PLACE + 1)
                if total > MAX_IN_PLACE:
                    return (
                        f"the references at {at.lstrip('/') or '(root)'} apply more than "
                        f"{MAX_IN_PLACE:,} subschemas to one value"
                    )
                if path:
                    path[-1][3].append(total)
                continue
            sub, where, sub_resolver, followed = step
            if id(sub) in on_path:
                if followed is None:  # the same dict twice in a schema built in code
                    continue
                ref, at = followed
                return f"$ref {ref!r} at {at.lstrip('/') or '(root)'} is part of a reference cycle"
            if id(sub) in done:
                count.append(done[id(sub)])
            else:
                on_path.add(id(sub))
                edges = _enter(sub, where, sub_resolver, specification, starts)
                path.append((sub, where, edges, [1]))
    return None


def reference_and_regex_problem(schema: dict[str, Any], draft: Any) -> str | None:
    """A ``$ref`` that does not resolve within ``schema``, loops back without descending into
    the value or fans out past :data:`MAX_IN_PLACE`, or a regex Python cannot compile.

    All pass the metaschema but make verification fail; a remote ``$ref`` would also make it
    fetch a URL the tool's server chose.
    """
    from referencing.jsonschema import DRAFT202012, specification_with

    specification = specification_with(draft.ID_OF(draft.META_SCHEMA) or "", default=DRAFT202012)
    root = specification.create_resource(schema)
    resolver = _offline_registry().resolver_with_root(root)
    keys = set(_schema_keys(schema))
    if {"unevaluatedProperties", "patternProperties"} <= keys:
        # jsonschema finds the properties patternProperties evaluated with Python's re.
        return (
            "patternProperties in a schema with unevaluatedProperties cannot be checked in "
            "linear time"
        )
    return _walk_problem(schema, "", resolver, specification) or _reference_problem(
        schema, resolver, specification
    )


def reference_problem(schema: Any) -> str | None:
    """:func:`_reference_problem` for a schema read in its own draft (2020-12 if none)."""
    from jsonschema.validators import Draft202012Validator, validator_for
    from referencing.jsonschema import DRAFT202012, specification_with

    if not isinstance(schema, dict):
        return None
    draft = validator_for(schema, default=Draft202012Validator)
    specification = specification_with(draft.ID_OF(draft.META_SCHEMA) or "", default=DRAFT202012)
    resolver = _offline_registry().resolver_with_root(specification.create_resource(schema))
    return _reference_problem(schema, resolver, specification)


def _schema_keys(node: Any) -> Iterator[str]:
    """The keywords of ``node`` and of every subschema in it."""
    if isinstance(node, dict):
        yield from node
        for _, child in child_schemas(node):
            yield from _schema_keys(child)

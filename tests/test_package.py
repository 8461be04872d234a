"""The ``toolgate`` package namespace: what editors and REPLs offer from it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import requires, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

import toolgate

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_dir_lists_every_public_name_and_no_helper() -> None:
    listed = dir(toolgate)
    assert listed == sorted(toolgate.__all__)
    assert {"Router", "Catalog", "Verdict", "promote_tools"} <= set(listed)
    for helper in ("TYPE_CHECKING", "annotations", "import_module"):
        assert helper not in listed
        assert not hasattr(toolgate, helper), helper


def test_every_listed_name_resolves() -> None:
    for name in dir(toolgate):
        assert getattr(toolgate, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Routr'"):
        _ = toolgate.Routr  # type: ignore[attr-defined]


def test_dir_loads_nothing_heavy() -> None:
    # Listing the names for completion must not import what they name.
    code = "import sys, toolgate; dir(toolgate); print('toolgate.routing.router' in sys.modules)"
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "False"


def test_errors_with_a_builtin_meaning_derive_from_the_builtin(tmp_path: Path) -> None:
    import numpy as np

    from toolgate import Index, InvalidInputError, RouterConfig, StorageError, ToolgateError
    from toolgate.errors import UnknownToolError

    for error, builtin in [
        (InvalidInputError, ValueError),
        (StorageError, OSError),
        (UnknownToolError, KeyError),
    ]:
        assert issubclass(error, ToolgateError), error
        assert issubclass(error, builtin), error
    # Raised by the Python layer and by the Rust core alike.
    with pytest.raises(ValueError, match="fusion_top"):
        RouterConfig(fusion_top=2**64)
    with pytest.raises(ValueError, match="finite"):
        Index.build(tmp_path / "i.tgi", np.full((2, 4), np.nan, dtype=np.float32))


def _toolgate_errors() -> dict[str, str]:
    """Every class of the package deriving from ToolgateError, by name, with its module:
    read from the source, so no module (nor an extra it needs) has to be imported."""
    root = Path(toolgate.__file__).resolve().parent
    classes: dict[str, tuple[str, list[str]]] = {}
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.pyi")]):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = [b.id for b in node.bases if isinstance(b, ast.Name)]
                classes[node.name] = (module, names)
    errors = {"ToolgateError": "toolgate"}
    while grown := {
        name: module
        for name, (module, bases) in classes.items()
        if name not in errors and any(b in errors for b in bases)
    }:
        errors.update(grown)
    return errors


def test_the_documented_errors_are_every_toolgate_error() -> None:
    """api.md's Errors section names every error, with where to import it from when
    ``toolgate`` does not export it."""
    import importlib

    api = (PYPROJECT.parent / "docs" / "api.md").read_text("utf-8")
    section = api.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    errors = _toolgate_errors()
    assert {"StoreError", "IndexInProgress", "BudgetExceededError"} <= set(errors)
    for name, module in errors.items():
        if name.startswith("_"):
            continue
        if name in toolgate.__all__:
            assert re.search(rf"`(toolgate\.)?{name}`", section), name
            continue
        where = re.search(rf"`(toolgate(?:\.\w+)*)\.{name}`", section)
        assert where is not None, f"{name} ({module}) is not in api.md's Errors"
        documented = getattr(importlib.import_module(where[1]), name)
        assert documented is getattr(importlib.import_module(module), name)


def _floor(specifier: SpecifierSet) -> Version | None:
    floors = [Version(spec.version) for spec in specifier if spec.operator == ">="]
    return max(floors, default=None)


def _declared_dependencies() -> dict[str, SpecifierSet]:
    with PYPROJECT.open("rb") as file:
        texts = tomllib.load(file)["project"]["dependencies"]
    return {canonicalize_name(req.name): req.specifier for req in map(Requirement, texts)}


def _floors_below_needs(declared: dict[str, SpecifierSet], name: str) -> list[str]:
    """Our floors below what the installed ``name`` requires of another of our dependencies."""
    too_low = []
    for need in map(Requirement, requires(name) or []):
        if need.marker is not None and not need.marker.evaluate({"extra": ""}):
            continue
        ours, needed = declared.get(canonicalize_name(need.name)), _floor(need.specifier)
        if ours is not None and needed is not None and (_floor(ours) or Version("0")) < needed:
            too_low.append(f"{need.name}{ours}, but {name} {version(name)} needs {need}")
    return too_low


def test_no_floor_is_below_what_a_dependency_at_its_floor_requires() -> None:
    # A dependency installed at exactly its floor shows what that oldest allowed version needs.
    declared = _declared_dependencies()
    at_floor = [name for name, spec in declared.items() if _floor(spec) == Version(version(name))]
    assert at_floor, "no dependency is installed at its floor"
    assert [low for name in at_floor for low in _floors_below_needs(declared, name)] == []


def test_the_format_checkers_verify_uses_are_dependencies() -> None:
    # jsonschema checks a format only when the package it checks it with is installed
    # (docs/api.md, "verify"): those must come with toolgate, not with whatever else is there.
    needed = {
        "idna": "idn-hostname",
        "jsonpointer": "json-pointer, relative-json-pointer",
        "rfc3339-validator": "date-time, time",
        "rfc3986-validator": "uri, uri-reference",
    }
    declared = _declared_dependencies()
    assert {name: formats for name, formats in needed.items() if name not in declared} == {}


def test_the_version_has_one_source() -> None:
    # pyproject.toml takes Cargo.toml's version, which the extension's __version__ is built from.
    with PYPROJECT.open("rb") as file:
        project = tomllib.load(file)["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    assert toolgate.__version__ == version("toolgate-router")


# What Windows lacks that toolgate's modules see at import: no fcntl module, no fork hooks.
_AS_ON_WINDOWS = """
import os, sys
sys.modules["fcntl"] = None  # import fcntl: ModuleNotFoundError
del os.fork, os.register_at_fork
import toolgate
for name in toolgate.__all__:
    getattr(toolgate, name)
import toolgate.gateway, toolgate.cli.commands, toolgate.telemetry.sinks
print("imported")
"""


def test_the_package_imports_where_there_is_no_fcntl_nor_fork() -> None:
    """On Windows ``from toolgate import Router`` failed with "No module named 'fcntl'",
    which publishing a router imported at the top of its module."""
    run = subprocess.run(
        [sys.executable, "-c", _AS_ON_WINDOWS], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr.strip().splitlines()[-1:]
    assert run.stdout.split() == ["imported"]

"""The package's layers: no module imports one of a higher layer, not even inside a function.

Bottom-up: the base modules, then formats, catalog, embedding, promotion, verify, telemetry,
routing (the Router promotes, verifies and reports through the three below it), gateway,
integrations, evaluation, cli; the package's own ``__init__`` and ``__main__`` sit on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import toolgate

PACKAGE = Path(toolgate.__file__).parent
BASE = {
    "_toolgate",
    "arguments",
    "asgi",
    "browser_guard",
    "extras",
    "errors",
    "forks",
    "json_limits",
    "lazy",
    "memo",
    "redaction",
    "sqlite_files",
    "temporary_folders",
    "told_once",
    "unicode",
}
LAYERS = [
    "base",
    "formats",
    "catalog",
    "embedding",
    "promotion",
    "verify",
    "telemetry",
    "routing",
    "gateway",
    "integrations",
    "evaluation",
    "cli",
    "package",
]


def _layer(module: str) -> str:
    """The layer of ``toolgate.<...>`` from its first part."""
    head = module.split(".")[1] if "." in module else "__init__"
    if head in ("__init__", "__main__"):
        return "package"
    return "base" if head in BASE else head


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found.append((".".join(parts).removesuffix(".__init__"), path))
    return found


def _imported(tree: ast.AST) -> list[tuple[str, int]]:
    """Every ``toolgate`` module ``tree`` imports, anywhere in it, with its line."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "toolgate":  # from toolgate import _toolgate, errors, ...
                names += [(f"toolgate.{alias.name}", node.lineno) for alias in node.names]
            else:
                names.append((node.module, node.lineno))
    return [(name, line) for name, line in names if name.split(".")[0] == "toolgate"]


def test_every_module_has_a_layer() -> None:
    modules = _modules()
    assert len(modules) > 50
    assert {_layer(name) for name, _ in modules} == set(LAYERS)


def test_no_module_imports_a_higher_layer() -> None:
    upward = []
    for name, path in _modules():
        rank = LAYERS.index(_layer(name))
        for imported, line in _imported(ast.parse(path.read_text(), str(path))):
            if LAYERS.index(_layer(imported)) > rank:
                upward.append(f"{name}:{line} imports {imported}")
    assert upward == []


def test_the_check_sees_an_import_inside_a_function() -> None:
    tree = ast.parse("def f():\n    from toolgate.cli.commands import run_route\n")
    assert _imported(tree) == [("toolgate.cli.commands", 2)]


def test_no_module_reaches_into_httpx2s_private_modules() -> None:
    # httpx2 is required with no upper bound (pyproject): any release may move or drop a
    # private module, which would break the proxy at import.
    private = []
    for name, path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                parts = module.split(".")
                if parts[0] == "httpx2" and any(part.startswith("_") for part in parts[1:]):
                    private.append(f"{name}:{node.lineno} imports {module}")
    assert private == []

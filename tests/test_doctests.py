"""The ``>>>`` examples in toolgate's docstrings run, and show what they say.

Every module of the package is imported and its examples run as ``python -m doctest`` would,
in the module's namespace, with an empty ``TOOLGATE_HOME``: examples that need the embedding
model, a network or a server are marked ``# doctest: +SKIP``, and the others must stay fast
and write nothing outside a temporary directory (a ``ToolFilter`` opens its embedding cache).
"""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import toolgate
from toolgate.embedding.model_files import HOME_ENV

# Importing LiteLLM would otherwise fetch its model price list over the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

#: Run as a program, not imported: importing it would run the command line.
_NOT_IMPORTED = frozenset({"toolgate.__main__"})


def _module_names() -> list[str]:
    found = pkgutil.walk_packages(toolgate.__path__, prefix="toolgate.")
    names = ["toolgate", *(info.name for info in found)]
    return sorted(name for name in names if name not in _NOT_IMPORTED)


def _imported(name: str) -> ModuleType:
    """The module ``name``; skipped when an optional dependency it needs is missing."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "toolgate":
            raise
        pytest.skip(f"{name} needs {exc.name}, which is not installed")


def test_every_module_is_checked() -> None:
    names = _module_names()
    assert {"toolgate.catalog.keyword_lists", "toolgate.gateway.app"} <= set(names)


@pytest.mark.parametrize("name", _module_names())
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    module = _imported(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner()
    report: list[str] = []
    for test in finder.find(module, name):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)

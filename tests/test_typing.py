"""toolgate as a typed dependency: code using the documented API the documented way passes
``mypy --strict`` with none of this project's settings, as a user's own code is checked
against the installed package (its ``py.typed``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import toolgate
from toolgate import verify_call

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "downstream"


def _documented_search() -> str:
    """docs/api.md's example of a ``tool_search`` call, as a user's function giving its
    names the documented types (its imports stay at the top)."""
    api = (ROOT / "docs" / "api.md").read_text("utf-8")
    found = re.search(r"may call `tool_search`.*?```python\n(.*?)```", api, re.DOTALL)
    assert found is not None, "api.md has no example of a tool_search call"
    lines = found[1].splitlines()
    imports = [line for line in lines if line.startswith(("from ", "import "))]
    body = [f"    {line}" if line else "" for line in lines if line not in imports]
    head = (
        "from typing import Any\n"
        "from toolgate import Promotion, Router, State, Verdict\n"
        + "".join(f"{line}\n" for line in imports)
        + "\n\ndef turn(router: Router, tool_call: dict[str, Any], promotion: Promotion,"
        " state: State, user_text: str, verdict: Verdict) -> None:\n"
    )
    return head + "\n".join(body) + "\n"


def _cache_directory(kept: Path, spare: Path) -> Path:
    """``kept`` (mypy's cache across runs) if it can be written, else ``spare``: in a
    read-only checkout mypy stops with an internal error on a cache it cannot write."""
    try:
        kept.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=kept).close()  # an existing directory may be read-only
    except OSError:
        return spare
    return kept


def test_mypy_caches_elsewhere_when_the_checkout_cannot_be_written(tmp_path: Path) -> None:
    blocked = tmp_path / "checkout"
    blocked.write_text("a file where the cache's parent would be", encoding="utf-8")
    spare = tmp_path / "spare"
    assert _cache_directory(blocked / ".mypy_cache" / "downstream", spare) == spare
    kept = tmp_path / "writable" / ".mypy_cache" / "downstream"
    assert _cache_directory(kept, spare) == kept
    assert kept.is_dir()


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy's errors on each sample, by file name: one run for them all, its cache kept
    (a cold run checks toolgate and its dependencies, the slow part)."""
    pytest.importorskip("mypy")  # not the package's dependency: a development tool
    work = tmp_path_factory.mktemp("mypy")
    # An empty config: mypy would otherwise find pyproject.toml above the samples.
    config = work / "mypy.ini"
    config.write_text("[mypy]\n", encoding="utf-8")
    samples = sorted(SAMPLES.glob("[!_]*.py"))
    documented = work / "documented_search.py"
    documented.write_text(_documented_search(), encoding="utf-8")
    samples.append(documented)
    command = [sys.executable, "-m", "mypy", "--strict", "--config-file", str(config)]
    cache = _cache_directory(ROOT / ".mypy_cache" / "downstream", work / "cache")
    command += ["--cache-dir", str(cache), "--no-error-summary", *map(str, samples)]
    # The package under test, ahead of whatever copy the environment installed.
    env = {**os.environ, "PYTHONPATH": str(Path(toolgate.__file__).parents[1])}
    run = subprocess.run(command, capture_output=True, text=True, cwd=work, env=env)
    assert run.returncode in (0, 1), run.stderr
    errors: dict[str, list[str]] = {sample.name: [] for sample in samples}
    for line in run.stdout.splitlines():
        if match := re.match(r"(.+?\.py):\d+: error: ", line):
            errors[Path(match[1]).name].append(line)
    # Exit status 1 is also Python's for a module it cannot run: without errors read, mypy
    # did not check the samples, and every test would pass on nothing.
    assert run.returncode == 0 or any(errors.values()), run.stdout + run.stderr
    return errors


def test_a_provider_sdks_call_object_type_checks_in_every_verifier(
    mypy_errors: dict[str, list[str]],
) -> None:
    assert mypy_errors["sdk_calls.py"] == []


def test_the_sdk_object_of_the_sample_is_read_as_a_call() -> None:
    # What the sample promises type checkers holds at run time: the object is read.
    from tests.downstream.sdk_calls import ToolUseBlock
    from toolgate import Catalog

    catalog = Catalog.from_tools([{"name": "get_me", "description": "Who I am."}])
    assert verify_call(catalog, catalog.ids, ToolUseBlock()).ok


def test_a_misspelt_or_mistyped_option_is_a_type_error(mypy_errors: dict[str, list[str]]) -> None:
    assert mypy_errors["options.py"] == []


def test_the_documented_result_types_import_from_toolgate(
    mypy_errors: dict[str, list[str]],
) -> None:
    assert mypy_errors["results.py"] == []
    import tests.downstream.results as sample

    for name in ("RoutedTool", "GatedOut", "BudgetDecision", "DuplicateGroup", "FilteredRequest"):
        assert getattr(sample, name) is getattr(toolgate, name)
        assert name in toolgate.__all__


def test_a_misspelt_name_of_toolgate_is_a_type_error(mypy_errors: dict[str, list[str]]) -> None:
    assert mypy_errors["typos.py"] == []


def test_every_form_of_schema_source_and_no_other_type_checks(
    mypy_errors: dict[str, list[str]],
) -> None:
    assert mypy_errors["schema_sources.py"] == []


def test_the_documented_search_call_type_checks(mypy_errors: dict[str, list[str]]) -> None:
    # Verdict.arguments is None on a refused call: the example must check it first.
    assert mypy_errors["documented_search.py"] == []

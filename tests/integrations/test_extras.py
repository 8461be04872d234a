"""An integration imported without its extra says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("mcp", "mcp", "mcp"),
        ("mcp.serve", "mcp", "mcp"),
        ("mcp", "httpx2", "mcp"),
        ("langchain", "langchain", "langchain"),
        ("langchain", "langgraph", "langchain"),
        ("litellm", "litellm", "litellm"),
    ],
)
def test_a_missing_framework_names_the_extra(module: str, framework: str, extra: str) -> None:
    # A process where importing the framework fails, as when the extra is not installed.
    code = (
        f"import sys; sys.modules[{framework!r}] = None\n"
        "try:\n"
        f"    import toolgate.integrations.{module}\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name); print(exc)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    # Still the ModuleNotFoundError of the framework, which callers may catch as before.
    assert shown[0].split(".")[0] == framework
    assert f'pip install "toolgate-router[{extra}]"' in shown[1]
    assert framework in shown[1]


def test_a_missing_toolgate_module_is_not_blamed_on_an_extra() -> None:
    from toolgate.integrations import needs_extra

    with pytest.raises(ModuleNotFoundError) as failed, needs_extra("mcp"):
        raise ModuleNotFoundError("No module named 'toolgate.nowhere'", name="toolgate.nowhere")
    assert "toolgate-router" not in str(failed.value)

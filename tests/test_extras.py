"""An integration or the gateway imported without its extra says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("integrations.mcp", "mcp", "mcp"),
        ("integrations.mcp.serve", "mcp", "mcp"),
        ("integrations.mcp", "httpx2", "mcp"),
        ("integrations.langchain", "langchain", "langchain"),
        ("integrations.langchain", "langgraph", "langchain"),
        ("integrations.litellm", "litellm", "litellm"),
        ("gateway.app", "anyio", "gateway"),
        ("gateway.app", "starlette", "gateway"),
        ("gateway.app", "httpx", "gateway"),
        ("gateway.app", "orjson", "gateway"),
        ("gateway.serve", "uvicorn", "gateway"),
        ("gateway.metrics", "prometheus_client", "gateway"),
        ("gateway.upstream", "orjson", "gateway"),
    ],
)
def test_a_missing_package_names_the_extra(module: str, package: str, extra: str) -> None:
    # A process where importing the package fails, as when the extra is not installed.
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        "try:\n"
        f"    import toolgate.{module}\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name); print(exc)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    # Still the ModuleNotFoundError of the package, which callers may catch as before.
    assert shown[0].split(".")[0] == package
    assert f'pip install "toolgate-router[{extra}]"' in shown[1]
    assert package in shown[1]


def test_a_missing_toolgate_module_is_not_blamed_on_an_extra() -> None:
    from toolgate.integrations import needs_extra

    with pytest.raises(ModuleNotFoundError) as failed, needs_extra("mcp"):
        raise ModuleNotFoundError("No module named 'toolgate.nowhere'", name="toolgate.nowhere")
    assert "toolgate-router" not in str(failed.value)

"""The gateway imported without its extra says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "package"),
    [
        ("app", "anyio"),
        ("app", "starlette"),
        ("app", "httpx"),
        ("app", "orjson"),
        ("serve", "uvicorn"),
        ("metrics", "prometheus_client"),
        ("upstream", "orjson"),
    ],
)
def test_a_missing_package_names_the_extra(module: str, package: str) -> None:
    # A process where importing the package fails, as when the extra is not installed.
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        "try:\n"
        f"    import toolgate.gateway.{module}\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name); print(exc)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    # Still the ModuleNotFoundError of the package, which callers may catch as before.
    assert shown[0].split(".")[0] == package
    assert 'pip install "toolgate-router[gateway]"' in shown[1]
    assert package in shown[1]


def test_the_command_names_the_extra_once() -> None:
    code = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from toolgate.cli import run\n"
        "sys.argv = ['toolgate', 'gateway', '--listen', '127.0.0.1:9', '--no-auth']\n"
        "sys.exit(run())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.count('pip install "toolgate-router[gateway]"') == 1
    assert "uvicorn" in done.stderr

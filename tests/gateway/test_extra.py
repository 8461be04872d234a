"""`toolgate gateway` without the gateway extra says which extra to install, once (the
modules' own hint: tests/test_extras.py)."""

from __future__ import annotations

import subprocess
import sys


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

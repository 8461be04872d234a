"""How the docs tell a user to install toolgate: it is not on PyPI, so from the wheel that
``make wheel`` builds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCED = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)


def pip_installs(doc: Path) -> list[str]:
    """The ``pip install`` commands in a document's code blocks."""
    blocks = FENCED.findall(doc.read_text(encoding="utf-8"))
    return [line for block in blocks for line in block.splitlines() if "pip install" in line]


@pytest.mark.parametrize("doc", ["README.md", "docs/deploy.md"])
def test_the_install_instructions_install_the_built_wheel(doc: str) -> None:
    commands = pip_installs(ROOT / doc)
    assert commands, f"{doc} has no pip install"
    from_pypi = [line for line in commands if "toolgate_router-" not in line]
    assert from_pypi == [], f"{doc}: toolgate-router is not on PyPI"

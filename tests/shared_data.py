"""The data beside the checkout (``../shared``) that tests read: real catalogs, retrieval
sets, reference vectors. CI always has it; a test that needs a missing file fails and says
which, rather than skipping and passing in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
DATA = SHARED / "data"
CATALOGS = DATA / "catalogs"


def require(*paths: Path) -> None:
    """Fail the calling test, naming the first of ``paths`` that does not exist."""
    for path in paths:
        if not path.exists():
            pytest.fail(
                f"{path} is missing: the tests read ../shared beside the checkout "
                "(clone it there; CI always has it)",
                pytrace=False,
            )

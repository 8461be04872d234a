"""A misspelt name of ``toolgate`` is a type checker's error, as it is at run time (each
``type: ignore`` must meet the error it names, or mypy --strict says it is unused)."""

from __future__ import annotations

import toolgate
from toolgate import RouterConfg  # type: ignore[attr-defined]


def config() -> object:
    return toolgate.Routr, RouterConfg  # type: ignore[attr-defined]

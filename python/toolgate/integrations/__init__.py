"""Adapters that put toolgate inside other frameworks.

Each module imports its framework, which is an optional dependency:
:mod:`toolgate.integrations.langchain` needs ``pip install "toolgate-router[langchain]"``,
:mod:`toolgate.integrations.mcp` ``pip install "toolgate-router[mcp]"`` and
:mod:`toolgate.integrations.litellm` ``pip install "toolgate-router[litellm]"``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["needs_extra"]


@contextlib.contextmanager
def needs_extra(extra: str) -> Iterator[None]:
    """Around an integration's imports of its framework: a package that is not installed is
    still a ``ModuleNotFoundError`` naming it, which now names the extra that brings it too
    (the framework's plain name would get an untested version, or the wrong project)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "toolgate":
            raise
        raise ModuleNotFoundError(
            f'{exc}: toolgate.integrations needs pip install "toolgate-router[{extra}]"',
            name=exc.name,
            path=exc.path,
        ) from exc

"""Adapters that put toolgate inside other frameworks.

Each module imports its framework, which is an optional dependency:
:mod:`toolgate.integrations.langchain` needs ``pip install "toolgate-router[langchain]"``,
:mod:`toolgate.integrations.mcp` ``pip install "toolgate-router[mcp]"`` and
:mod:`toolgate.integrations.litellm` ``pip install "toolgate-router[litellm]"``.
"""

from __future__ import annotations

import contextlib

from toolgate import extras

__all__ = ["needs_extra"]


def needs_extra(extra: str) -> contextlib.AbstractContextManager[None]:
    """Around an integration's imports of its framework: a missing one names ``extra`` too."""
    return extras.needs_extra(extra, "toolgate.integrations")

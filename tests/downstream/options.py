"""Options passed by keyword: a misspelt or mistyped one is a type checker's error (each
line marked ``type: ignore`` must raise the error it names, or mypy --strict says the
comment is unused)."""

from __future__ import annotations

from typing import Any

from toolgate import Router, RouterConfig
from toolgate.integrations.langchain import ToolgateMiddleware


def routers(tools: list[dict[str, Any]]) -> list[Router]:
    return [
        Router.from_tools(tools, server="github", config=RouterConfig(top_k=5), path="./r"),
        Router.from_tools(tools, confg=RouterConfig(top_k=5)),  # type: ignore[call-arg]
        Router.from_tools(tools, config=5),  # type: ignore[arg-type]
    ]


def middleware() -> list[ToolgateMiddleware]:
    return [
        ToolgateMiddleware(top_k=5, always_include=["search"], deny=["delete_*"]),
        ToolgateMiddleware(top_kk=5),  # type: ignore[call-arg]
        ToolgateMiddleware(top_k="5"),  # type: ignore[arg-type]
    ]

"""Adapters that put toolgate inside other frameworks.

Each module imports its framework, which is an optional dependency:
:mod:`toolgate.integrations.langchain` needs ``pip install "toolgate-router[langchain]"``,
:mod:`toolgate.integrations.mcp` ``pip install "toolgate-router[mcp]"`` and
:mod:`toolgate.integrations.litellm` ``pip install "toolgate-router[litellm]"``.
"""

"""Adapters that put toolgate inside other frameworks.

Each module imports its framework, which is an optional dependency:
:mod:`toolgate.integrations.langchain` needs ``pip install "toolgate[langchain]"``, and
:mod:`toolgate.integrations.mcp` ``pip install "toolgate[mcp]"``.
"""

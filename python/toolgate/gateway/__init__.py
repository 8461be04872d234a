"""The gateway form: cut an LLM request's tools down to those routed for its user turn."""

from toolgate.gateway.filter import FilteredRequest, ToolFilter

__all__ = ["FilteredRequest", "ToolFilter"]

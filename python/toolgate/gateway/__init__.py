"""The gateway form: cut an LLM request's tools down to those routed for its user turn."""

from toolgate.gateway.filter import FilteredRequest, IndexInProgress, ToolFilter, filter_off_loop

__all__ = ["FilteredRequest", "IndexInProgress", "ToolFilter", "filter_off_loop"]

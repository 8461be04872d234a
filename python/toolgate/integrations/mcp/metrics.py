"""Prometheus metrics of the MCP proxy, served at ``/metrics`` over HTTP.

Searches and calls are counted and timed as the proxy answers them; how many upstream tools
are indexed and which upstream servers answer are read when the metrics are scraped. Each
proxy has a registry of its own (not the process-wide default), so two proxies in one
process, tests among them, count apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_asgi_app

__all__ = ["ProxyMetrics"]

#: How a call through the proxy went: its label values, as :meth:`McpProxy.call_tool` says.
CALL_OUTCOMES = ("ok", "tool_error", "refused", "input_required", "too_large", "failed")


class ProxyMetrics:
    """The proxy's counters, histograms and gauges, in a registry of their own.

    ``servers`` are the upstream servers' names (from the config: a bounded set of label
    values); ``answering(server)`` says whether one answers now, and ``tools()`` how many
    upstream tools are indexed; both are asked at each scrape.
    """

    def __init__(
        self,
        servers: Iterable[str] = (),
        *,
        answering: Callable[[str], bool] | None = None,
        tools: Callable[[], int] | None = None,
    ) -> None:
        """See the class docstring."""
        self.registry = CollectorRegistry()
        self._searches = Counter(
            "toolgate_searches",
            "search_tools calls, by outcome (ok, or invalid: the query was refused)",
            ["outcome"],
            registry=self.registry,
        )
        self._search_seconds = Histogram(
            "toolgate_search_seconds", "Time to answer a search_tools call", registry=self.registry
        )
        self._calls = Counter(
            "toolgate_tool_calls",
            "Upstream tool calls through the proxy, by server and outcome "
            f"({', '.join(CALL_OUTCOMES)})",
            ["server", "outcome"],
            registry=self.registry,
        )
        self._call_seconds = Histogram(
            "toolgate_tool_call_seconds",
            "Time to answer an upstream tool call, by server",
            ["server"],
            registry=self.registry,
        )
        if answering is not None:
            up = Gauge(
                "toolgate_upstream_up",
                "Whether the upstream server answers (1) or not (0)",
                ["server"],
                registry=self.registry,
            )
            for server in servers:
                up.labels(server).set_function(_flag(answering, server))
        if tools is not None:
            indexed = Gauge(
                "toolgate_upstream_tools", "Upstream tools indexed", registry=self.registry
            )
            indexed.set_function(lambda: float(tools()))

    def searched(self, ok: bool, seconds: float) -> None:
        """Count one search, answered (``ok``) or refused for its query."""
        self._searches.labels("ok" if ok else "invalid").inc()
        self._search_seconds.observe(seconds)

    def called(self, server: str, outcome: str, seconds: float) -> None:
        """Count one call for ``server`` (``""``: none, a name no tool has) and how it went,
        one of :data:`CALL_OUTCOMES`."""
        self._calls.labels(server, outcome).inc()
        self._call_seconds.labels(server).observe(seconds)

    def asgi_app(self) -> Any:
        """The ASGI app that serves the metrics in Prometheus' text format."""
        return make_asgi_app(self.registry)


def _flag(answering: Callable[[str], bool], server: str) -> Callable[[], float]:
    return lambda: 1.0 if answering(server) else 0.0

"""The gateway's Prometheus metrics (``GET /metrics``), with ``prometheus-client``.

Each :class:`Metrics` has its own registry, so several gateways in one process (tests) do not
collide. With several workers, set ``PROMETHEUS_MULTIPROC_DIR`` (``toolgate gateway
--workers N`` does): the client library then keeps each worker's values in files there, and
``/metrics`` sums them over the workers.
"""

from __future__ import annotations

import os

from toolgate.extras import needs_extra

with needs_extra("gateway", "toolgate.gateway"):
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Histogram,
        generate_latest,
    )

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# Filtering takes a millisecond or so when the tools are indexed, seconds when they are new.
_FILTER_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 30)


class Metrics:
    """Counters and histograms of requests, tools, tokens, filter time and upstream status."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "toolgate_gateway_requests", "Requests answered, by endpoint and status.",
            ["endpoint", "status"], registry=r,
        )  # fmt: skip
        self.tools_in = Counter(
            "toolgate_gateway_tools_in", "Function tools the requests carried.", ["endpoint"],
            registry=r,
        )  # fmt: skip
        self.tools_out = Counter(
            "toolgate_gateway_tools_out", "Function tools forwarded after filtering.",
            ["endpoint"], registry=r,
        )  # fmt: skip
        self.tokens_saved = Counter(
            "toolgate_gateway_schema_tokens_saved",
            "Schema tokens of the tools filtered out, as the provider counts them.",
            ["endpoint"], registry=r,
        )  # fmt: skip
        self.filter_seconds = Histogram(
            "toolgate_gateway_filter_seconds", "Time to filter one request's tools.",
            ["endpoint"], buckets=_FILTER_BUCKETS, registry=r,
        )  # fmt: skip
        self.upstream = Counter(
            "toolgate_gateway_upstream_responses", "Upstream answers, by upstream and status.",
            ["upstream", "status"], registry=r,
        )  # fmt: skip
        self.upstream_errors = Counter(
            "toolgate_gateway_upstream_errors",
            "Upstream calls that failed, before or during their answer: connect, timeout, reset.",
            ["upstream", "kind"], registry=r,
        )  # fmt: skip
        self.tool_calls = Counter(
            "toolgate_gateway_tool_calls",
            "Tool calls in answers, by verdict (ok, tool_not_available, unknown_tool, ...).",
            ["endpoint", "verdict"], registry=r,
        )  # fmt: skip
        self.no_tool = Counter(
            "toolgate_gateway_no_tool",
            "Requests routed to no tool: the router judged that none of their tools was needed.",
            ["endpoint"], registry=r,
        )  # fmt: skip
        self.blocked = Counter(
            "toolgate_gateway_answers_blocked",
            "Answers an enforce route turned into an error for calling a tool not sent.",
            ["endpoint"], registry=r,
        )  # fmt: skip
        self.lessons_dropped = Counter(
            "toolgate_gateway_lessons_dropped",
            "Checked calls not learned from: the learning queue was full (a slow store) or "
            "closed (the gateway stopping).",
            registry=r,
        )  # fmt: skip
        self.unfiltered = Counter(
            "toolgate_gateway_unfiltered",
            "Model calls passed through with their tools unfiltered: a path not filtered.",
            ["upstream"], registry=r,
        )  # fmt: skip

    def render(self) -> bytes:
        """The metrics in Prometheus' text format; summed over workers in multiprocess mode."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)

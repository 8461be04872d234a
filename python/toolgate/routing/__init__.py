"""Routing: the Router and its parts (build and store, rows, query forms, history, state,
results, stats).

The layer above promotion, verify and telemetry: a Router promotes and verifies through them
and reports to telemetry, while none of them needs a router (they take its results as they
are). Allow and deny patterns, which promotion applies too, live in
:mod:`toolgate.catalog.scopes`.
"""

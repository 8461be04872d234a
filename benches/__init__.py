"""Benchmarks and the evaluation harness: token accounting, routing quality, speed at scale.

``python -m benches.report`` (``make bench-report``) measures into ``benches/results/`` (JSON and
plots) and writes ``docs/results.md`` and the README's results section from it.
"""

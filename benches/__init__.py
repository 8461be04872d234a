"""Benchmarks and the evaluation harness: token accounting, routing quality, speed at scale.

``python -m benches.report`` (``make bench-report``) regenerates every table and plot under
``benches/results/`` and the README's results section.
"""

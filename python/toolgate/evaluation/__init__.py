"""Offline tools: routing metrics, evaluation on labelled queries, calibration."""

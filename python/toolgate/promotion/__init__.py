"""Promotion: the active set of a turn, the discovery pool, full schemas and budgets."""

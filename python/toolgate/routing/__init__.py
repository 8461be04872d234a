"""Routing: the Router and its parts (store, rows, query forms, history, scopes, state, results)."""

"""Servers as a second-level signal: how near a request is to what each server is for.

A tool's own text says what it does; the server it comes from says what the tool is for, and
a task's tools often come from one server ("find the ticket, assign it to me, and close it").
Each server's vector is the mean of its tools' index rows, made unit length. With
``RouterConfig.server_weight`` above 0, each of the ranking's best ``k + SERVER_DEPTH`` tools
gains that weight times its server's cosine with the query, and the best ``k`` are taken again.
A catalog of one server has nothing to tell apart and is left as ranked.

>>> servers = ServerVectors.of(
...     np.eye(3, dtype=np.float32).__getitem__, ["mail", "mail", "files"]
... )
>>> servers.names
('files', 'mail')
>>> [round(float(score), 3) for score in servers.scores(np.array([0, 1, 0], np.float32))]
[0.0, 0.707]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from toolgate import _toolgate
from toolgate.embedding.normalise import normalised
from toolgate.routing.feedback import LiftedRow, relabel_copies

__all__ = ["SERVER_DEPTH", "ServerVectors"]

#: How far past the top ``k`` the server signal looks for tools to lift.
SERVER_DEPTH = 30


class ServerVectors:
    """One unit vector per server (``names``, sorted), and the server of each row."""

    def __init__(self, names: tuple[str, ...], matrix: np.ndarray, owner: np.ndarray) -> None:
        self.names = names
        self._matrix = matrix
        self._owner = owner

    @classmethod
    def of(
        cls, vectors: Callable[[Sequence[int]], np.ndarray], servers: Sequence[str]
    ) -> ServerVectors | None:
        """The server vectors of rows whose index vectors ``vectors`` reads and whose servers
        are ``servers`` (in row order); ``None`` for fewer than two servers."""
        names = sorted(set(servers))
        if len(names) < 2:
            return None
        column = {name: at for at, name in enumerate(names)}
        owner = np.asarray([column[server] for server in servers], dtype=np.int64)
        rows = np.asarray(vectors(list(range(len(servers)))), dtype=np.float32)
        sums = np.zeros((len(names), rows.shape[1]), dtype=np.float32)
        np.add.at(sums, owner, rows)
        return cls(tuple(names), normalised(sums), owner)

    def scores(self, vector: np.ndarray) -> np.ndarray:
        """Each server's cosine with the query ``vector``, in the order of :attr:`names`."""
        scores: np.ndarray = self._matrix @ np.asarray(vector, dtype=np.float32)
        return scores

    def lifted(
        self, ranked: Sequence[_toolgate.RoutedRow], vector: np.ndarray, *, weight: float
    ) -> list[_toolgate.RoutedRow]:
        """``ranked`` with each row's fused score plus ``weight`` times its server's cosine
        with ``vector``, best first (ties keep the ranking's order).

        Near copies (the same tool on several servers, ``copy_of``) are lifted too: which
        server the request means is what tells them apart. A copy lifted above the tool it
        copies trades places with it in the labels: that tool becomes the copy.
        """
        if not ranked:
            return []
        server = self.scores(vector)
        rows: list[Any] = [
            LiftedRow(r.row, r.fused + weight * float(server[self._owner[r.row]]), r.dense,
                      r.bm25, r.copy_of)
            for r in ranked
        ]  # fmt: skip
        rows.sort(key=lambda r: -r.fused)
        return relabel_copies(rows)

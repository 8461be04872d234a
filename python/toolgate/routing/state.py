"""Agent state and the compilation of tool preconditions to the core's bitmasks.

Each distinct precondition in a catalog (a scope, a tool that must have run, a milestone) gets
one flag bit. A tool's row in the index stores the bits it requires; at route time the caller's
:class:`State` becomes the bits it satisfies, and the core admits a row only when every required
bit is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from toolgate.catalog.tool import Tool, satisfied_by_run
from toolgate.errors import InvalidInputError

__all__ = ["FlagVocabulary", "State"]


_FIELDS = ("scopes", "tools_run", "milestones")


@dataclass(frozen=True)
class State:
    """What the agent holds right now.

    ``scopes`` are granted permissions (``"github:write"``), ``tools_run`` ids of tools that
    have already run this session, ``milestones`` workflow points reached (``"plan_confirmed"``).
    """

    scopes: frozenset[str] = field(default_factory=frozenset)
    tools_run: frozenset[str] = field(default_factory=frozenset)
    milestones: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        # Whatever was passed (a list, a tuple, None), held as a frozenset of strings, as
        # coerce reads a mapping: a list left as given compared unequal and had no hash, and
        # a lone string granted one scope per letter.
        for key in _FIELDS:
            object.__setattr__(self, key, _entries(getattr(self, key), key))

    @classmethod
    def coerce(cls, state: State | Mapping[str, Iterable[str]] | None) -> State:
        """Accept a :class:`State`, a mapping with the same keys, or ``None`` (holds nothing)."""
        if state is None:
            return cls()
        if isinstance(state, State):
            return state
        if not isinstance(state, Mapping):
            raise InvalidInputError(
                f"state must be a toolgate.State or a mapping, got {type(state).__name__}"
            )
        unknown = set(state) - {"scopes", "tools_run", "milestones"}
        if unknown:
            raise InvalidInputError(
                f"state has unknown keys {sorted(unknown)}; expected scopes, tools_run, milestones"
            )
        given: dict[str, Any] = {
            key: state.get(key) for key in ("scopes", "tools_run", "milestones")
        }
        return cls(**given)  # each read by __post_init__

    def items(self) -> Iterable[str]:
        """Every satisfied precondition as a ``kind:value`` key."""
        yield from (f"scope:{s}" for s in self.scopes)
        # A tool that ran is recorded by id (``verdict.tool_id``); ``gh/list_issues`` also
        # meets a precondition naming ``list_issues``, but no other id.
        yield from (f"tool:{key}" for ran in self.tools_run for key in satisfied_by_run(ran))
        yield from (f"milestone:{m}" for m in self.milestones)


def _entries(value: object, key: str) -> frozenset[str]:
    """``value``, the ``key`` field of a state, as a frozenset of strings; ``None`` (JSON
    null) holds nothing."""
    if isinstance(value, frozenset) and all(isinstance(entry, str) for entry in value):
        return value
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidInputError(
            f"state[{key!r}] must be a list of strings, got {type(value).__name__}"
        )
    return frozenset(_strings(value, key))


def _strings(values: Iterable[object], key: str) -> list[str]:
    """``values`` if each is a string; made text, a null would meet a precondition 'None'."""
    strings: list[str] = []
    for position, value in enumerate(values):
        if not isinstance(value, str):
            kind = type(value).__name__
            raise InvalidInputError(f"state[{key!r}][{position}] must be a string, got {kind}")
        strings.append(value)
    return strings


def tool_requirements(tool: Tool) -> list[str]:
    """A tool's preconditions as ``kind:value`` keys."""
    return [
        *(f"scope:{s}" for s in tool.requires_scopes),
        *(f"tool:{t}" for t in tool.requires_tools),
        *(f"milestone:{m}" for m in tool.requires_milestones),
    ]


@dataclass(frozen=True)
class FlagVocabulary:
    """The mapping between precondition keys and flag bits for one catalog."""

    keys: tuple[str, ...]

    @classmethod
    def from_tools(cls, tools: Sequence[Tool]) -> FlagVocabulary:
        """Number every distinct precondition in first-seen order, so bits are deterministic."""
        seen: dict[str, None] = {}
        for tool in tools:
            for key in tool_requirements(tool):
                seen.setdefault(key, None)
        return cls(tuple(seen))

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {key: i for i, key in enumerate(self.keys)}

    @property
    def words(self) -> int:
        """u64 words per row mask."""
        return (len(self.keys) + 63) // 64

    def masks(self, tools: Sequence[Tool]) -> np.ndarray | None:
        """An (N, words) uint64 array of the bits each tool requires; ``None`` when no tool
        requires anything, so the core can skip gating altogether."""
        if not self.keys:
            return None
        position = self._positions
        out = np.zeros((len(tools), self.words), dtype=np.uint64)
        for row, tool in enumerate(tools):
            for key in tool_requirements(tool):
                bit = position[key]
                out[row, bit // 64] |= np.uint64(1) << np.uint64(bit % 64)
        return out

    def flags(self, state: State) -> np.ndarray:
        """The flag numbers ``state`` satisfies, as a uint32 array. Unknown items are ignored."""
        position = self._positions
        bits = sorted({position[key] for key in state.items() if key in position})
        return np.asarray(bits, dtype=np.uint32)

    def describe(self, bits: Iterable[int]) -> list[str]:
        """Flag numbers back to ``kind:value`` keys, for gated-out reasons."""
        return [self.keys[b] for b in bits if 0 <= b < len(self.keys)]

"""Shared benchmark plumbing: a table of best times that is printed as ratios at the end.

Benchmarks record ``(group, name) -> best seconds per call`` through the ``ratio_table``
fixture; the terminal summary prints each group with every entry's ratio to the group's
references (faiss, the read probe), so speeds are only ever compared within one run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# Every peer runs on one thread, as toolgate does by default; this must precede numpy's import.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import pytest  # noqa: E402  (after the thread settings above)


@dataclass
class RatioTable:
    """Best time per call of each benchmark, by group, in recording order."""

    references: tuple[str, ...]
    groups: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def record(self, group: str, name: str, seconds: float) -> None:
        """Keeps the best time seen for `name` in `group`."""
        entries = self.groups.setdefault(group, {})
        entries[name] = min(seconds, entries.get(name, float("inf")))

    def lines(self) -> list[str]:
        """The table as text: time per call and the ratio to each reference present."""
        out = ["ratios (best of rounds; ratio < 1 means faster than the reference)"]
        for group, entries in self.groups.items():
            out.append(group)
            refs = [(ref, entries[ref]) for ref in self.references if ref in entries]
            for name, seconds in sorted(entries.items(), key=lambda kv: kv[1]):
                ratios = "  ".join(f"{seconds / t:6.2f}x {ref}" for ref, t in refs)
                out.append(f"  {name:<32} {seconds * 1e6:10.2f} us  {ratios}")
        return out + self.notes


_TABLE = pytest.StashKey[RatioTable]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_TABLE] = RatioTable(
        references=(
            "faiss IndexFlatIP",
            "read probe",
            "route + promote",
            "client.call_tool",
            "proxy in memory",
            "upstream directly",
            "Rust SchemaCache",
            "unguarded build",
        )
    )


@pytest.fixture(scope="session")
def ratio_table(pytestconfig: pytest.Config) -> RatioTable:
    """The run's table of best times."""
    return pytestconfig.stash[_TABLE]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    table = config.stash.get(_TABLE, None)
    if table is None or not (table.groups or table.notes):
        return
    terminalreporter.write_line("")
    for line in table.lines():
        terminalreporter.write_line(line)

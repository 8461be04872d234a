"""Near-duplicate tools: pairs linked at a cosine, grouped, reported by the router and CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from toolgate import InvalidInputError, Router
from toolgate.cli.parser import main
from toolgate.embedding.embedder import Embedder
from toolgate.routing import near_duplicates
from toolgate.routing.near_duplicates import near_duplicate_groups


def rows_at(angles_deg: list[float]) -> np.ndarray:
    """Unit vectors in a plane at these angles (cosine of two = cos of the angle between)."""
    radians = np.radians(angles_deg)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1).astype(np.float32)


def test_tools_linked_directly_or_through_others_form_one_group() -> None:
    # 0 and 8 degrees apart: cos 0.990; 8 and 16: 0.990; 0 and 16: 0.961; 90 stands alone.
    rows = rows_at([0, 8, 90, 16, 91])
    ids = ["a/x", "b/x", "a/y", "c/x", "b/y"]
    groups = near_duplicate_groups(rows, ids, threshold=0.98)
    assert [g.ids for g in groups] == [("a/x", "b/x", "c/x"), ("a/y", "b/y")]
    chain = groups[0]
    assert chain.cosine == pytest.approx(np.cos(np.radians(8)), abs=1e-6)
    assert chain.highest == pytest.approx(np.cos(np.radians(8)), abs=1e-6)
    assert groups[1].highest == pytest.approx(np.cos(np.radians(1)), abs=1e-6)
    # A stricter cosine cuts the chain; no pair at all gives no group.
    assert [g.ids for g in near_duplicate_groups(rows, ids, threshold=0.999)] == [("a/y", "b/y")]
    assert near_duplicate_groups(rows_at([0, 45, 90]), ["a", "b", "c"], threshold=0.9) == []


def test_every_pair_is_found_across_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Blocks of 50 rows, with twins 300 rows apart, so most pairs cross blocks: the result
    # must equal the brute-force pairs.
    n = 600
    monkeypatch.setattr(near_duplicates, "_BLOCK_CELLS", 50 * n)
    rng = np.random.default_rng(7)
    base = rng.normal(size=(n // 2, 16)).astype(np.float32)
    rows = np.concatenate([base, base + rng.normal(scale=0.01, size=base.shape)])
    ids = [f"s/t{i}" for i in range(len(rows))]
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    cosines = unit @ unit.T
    expected = {
        tuple(sorted((ids[i], ids[j])))
        for i, j in zip(*np.nonzero(np.triu(cosines, 1) >= 0.99), strict=True)
    }
    groups = near_duplicate_groups(rows, ids, threshold=0.99)
    found = {tuple(sorted(g.ids)) for g in groups}
    assert found == expected
    assert len(found) == n // 2


def test_exact_copies_meet_a_threshold_of_one() -> None:
    # float32 gives two copies of a row a cosine of 0.99999994 about half the time.
    rng = np.random.default_rng(3)
    for dim in (8, 384):
        for _ in range(50):
            row = rng.normal(size=dim).astype(np.float32)
            other = rng.normal(size=dim).astype(np.float32)
            groups = near_duplicate_groups(np.stack([row, other, row]), ["a", "b", "c"], 1.0)
            assert [g.ids for g in groups] == [("a", "c")]
            assert groups[0].cosine == groups[0].highest == 1.0
    # numpy numbers are thresholds too
    rows = rows_at([0, 1])
    assert near_duplicate_groups(rows, ["a", "b"], np.float32(0.99))
    assert not near_duplicate_groups(rows, ["a", "b"], np.int64(1))


def test_bad_input_is_named() -> None:
    rows = rows_at([0, 1])
    for bad in (0.0, 1.5, float("nan"), True, "0.9"):
        with pytest.raises(InvalidInputError, match="threshold must be a cosine in"):
            near_duplicate_groups(rows, ["a", "b"], threshold=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"one vector per id \(3\).*\(2, 2\)"):
        near_duplicate_groups(rows, ["a", "b", "c"])
    # A zero row (nothing embedded) links with nothing rather than dividing by zero.
    zero = np.zeros((2, 2), dtype=np.float32)
    assert near_duplicate_groups(zero, ["a", "b"]) == []


ISSUE = "Open a new issue in a GitHub repository, with a title, a body, labels and assignees."
TOOLS = [
    # The same server configured twice, and a tool registered again under another name.
    {"server": "github", "name": "create_issue", "description": ISSUE},
    {"server": "github-work", "name": "create_issue", "description": ISSUE},
    {"server": "github", "name": "open_issue", "description": ISSUE},
    {"server": "mail", "name": "send_email", "description": "Send an email to someone."},
    {"server": "wx", "name": "get_weather", "description": "Current weather for a city."},
]
COPIES = ["github/create_issue", "github-work/create_issue", "github/open_issue"]


def test_the_router_finds_tools_registered_twice(embedder: Embedder) -> None:
    router = Router.from_tools(TOOLS, embedder=embedder)
    groups = router.near_duplicates()
    assert [list(g.ids) for g in groups] == [COPIES]
    assert 0.95 <= groups[0].cosine <= groups[0].highest <= 1.0
    # Server and tool names are part of what is compared: at 0.99 only the copy of the
    # same tool on a second server is left.
    strict = router.near_duplicates(0.99)
    assert [list(g.ids) for g in strict] == [COPIES[:2]]


def test_stats_lists_near_duplicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: Embedder
) -> None:
    tools = tmp_path / "tools.jsonl"
    tools.write_text("\n".join(json.dumps(t) for t in TOOLS), encoding="utf-8")
    assert main(["stats", "--tools", str(tools), "--near-duplicates", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["near_duplicates"]
    assert report["cosine"] == 0.95
    assert report["tools"] == 3
    assert report["groups"][0]["ids"] == COPIES
    # As text: each group on a line of its own, under the report's other figures.
    assert main(["stats", "--tools", str(tools), "--near-duplicates"]) == 0
    lines = capsys.readouterr().out.splitlines()
    groups = lines.index("  groups")
    assert lines[groups - 3 : groups] == ["near_duplicates", "  cosine  0.95", "  tools   3"]
    assert json.loads(lines[groups + 1])["ids"] == COPIES
    assert main(["stats", "--tools", str(tools), "--near-duplicates", "1.5"]) == 2
    assert "threshold must be a cosine in (0, 1], got 1.5" in capsys.readouterr().err

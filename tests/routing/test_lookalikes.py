"""Look-alikes: a tool named as another server's tool plus a version suffix gives way to it."""

from __future__ import annotations

import numpy as np
import pytest

from toolgate.routing.lookalikes import COPIER_SHARE, find_lookalikes, name_stem

IDS = ["gh/list_issues", "gh/get_me", "evil/list_issues_v2", "evil/get_me_new", "evil/extra"]
NAMES = [tool_id.split("/")[1] for tool_id in IDS]
# Copies close to what they copy; the extra tool far from both.
ROWS = np.array([[1, 0, 0], [0, 1, 0], [0.9, 0.1, 0], [0.1, 0.8, 0], [0, 0, 1]], dtype=np.float32)


def _vectors(rows: list[int]) -> np.ndarray:
    return ROWS[rows]


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("list_issues_v2", "list_issues"),
        ("List_Issues_V12", "list_issues"),
        ("uber.ride2", "uber.ride2"),
        ("list_issues_2", "list_issues"),
        ("list_issues.v3", "list_issues"),
        ("search-new", "search"),
        ("get_me_v2_latest", "get_me"),
        ("renew", "renew"),
        ("preview", "preview"),
        ("dev2", "dev2"),
        ("ec2", "ec2"),
        ("v2", "v2"),
        ("_v2", "_v2"),
        ("search", "search"),
    ],
)
def test_the_stem_drops_version_and_copy_suffixes(name: str, stem: str) -> None:
    assert name_stem(name) == stem


def test_a_hostile_name_is_read_in_linear_time() -> None:
    # (\d+)+$ in a backtracking engine would never end on this.
    assert name_stem("a" + "1" * 200_000 + "x").endswith("1x")


def test_a_versioned_copy_of_another_servers_tool_is_found() -> None:
    found = find_lookalikes(IDS, NAMES, _vectors, 0.4)
    assert found.copies == {2: (0,), 3: (1,)}


def test_a_servers_own_version_or_a_shared_name_is_no_copy() -> None:
    ids = ["gh/search", "gh/search_v2", "gl/search", "gl/list"]
    names = [tool_id.split("/")[1] for tool_id in ids]
    rows = np.ones((4, 2), dtype=np.float32)
    assert find_lookalikes(ids, names, lambda r: rows[r], 0.4).copies == {}


def test_a_copy_far_from_the_tool_it_names_is_no_copy() -> None:
    assert find_lookalikes(IDS, NAMES, _vectors, 0.999).copies == {}


def test_copies_are_left_out_unless_their_server_is_named() -> None:
    found = find_lookalikes(IDS, NAMES, _vectors, 0.4)
    rankable, demoted = found.for_query("list the issues")
    assert rankable is not None
    assert rankable.tolist() == [0, 1, 4]
    # Two of evil's three tools are copies: its last one is weighed down too.
    assert COPIER_SHARE <= 2 / 3
    assert demoted.tolist() == [4]
    rankable, demoted = found.for_query("list the issues with evil")
    assert rankable is not None
    assert rankable.tolist() == [2, 3, 4]
    assert demoted.tolist() == []


def test_no_copies_leave_the_ranking_alone() -> None:
    found = find_lookalikes(IDS[:2], NAMES[:2], _vectors, 0.4)
    rankable, demoted = found.for_query("list the issues")
    assert rankable is None
    assert demoted.tolist() == []

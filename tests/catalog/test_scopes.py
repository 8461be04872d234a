"""Allow and deny patterns resolved to rows: every rule at once, and in one pass over the tools."""

from __future__ import annotations

import fnmatch

from toolgate.catalog.scopes import ScopeMatcher

IDS = ["gh/create_issue", "gh/Delete_Repo", "repos/delete", "fs/repos/delete", "fs/read"]
NAMES = ["create_issue", "Delete_Repo", "delete", "repos/delete", "read"]
EXPOSED = ["gh__create_issue", "gh__Delete_Repo", "repos__delete", "fs__repos_delete", "read"]


def _reference(patterns: list[str], deny: bool) -> list[int]:
    """The rules of toolgate.catalog.scopes, one pattern and one tool at a time."""
    rows = set()
    for pattern in patterns:
        for row, (tool_id, name, shown) in enumerate(zip(IDS, NAMES, EXPOSED, strict=True)):
            if deny:
                texts = [name, shown, tool_id] if "/" in pattern else [name, shown]
                folded = pattern.casefold()
                if any(fnmatch.fnmatchcase(t.casefold(), folded) for t in texts):
                    rows.add(row)
            elif fnmatch.fnmatchcase(tool_id if "/" in pattern else name, pattern):
                rows.add(row)
    return sorted(rows)


def test_literals_and_globs_follow_each_rule() -> None:
    matcher = ScopeMatcher(IDS, NAMES, EXPOSED)
    lists = [
        ["gh/create_issue", "read"],
        ["delete_repo", "GH__DELETE_REPO"],  # case and exposed names: deny only
        ["repos/delete"],  # an id, and in a deny list a name too
        ["*delete*", "gh/*"],
        ["fs/*", "?ead", "[cd]*"],
        ["GH/*_ISSUE", "no_such_tool", "x/[y"],
    ]
    for patterns in lists:
        for deny in (False, True):
            assert matcher.rows(patterns, deny=deny).tolist() == _reference(patterns, deny), (
                patterns,
                deny,
            )


def test_a_long_list_of_literals_and_globs() -> None:
    # A list of the size a pattern-at-a-time scan took minutes on: the same rows either way.
    n = 8000
    matcher = ScopeMatcher([f"s/tool_{i}" for i in range(n)], [f"tool_{i}" for i in range(n)])
    patterns = [f"s/tool_{i}" for i in range(0, n, 2)] + [f"tool_{i}?" for i in range(100)]
    denied = matcher.rows(patterns, deny=True)
    allowed = matcher.rows(patterns)
    assert denied.tolist() == allowed.tolist()
    # Every even tool, and tool_10 to tool_999 (a prefix of one to two digits, and one more).
    assert denied.tolist() == [i for i in range(n) if i % 2 == 0 or 10 <= i < 1000]

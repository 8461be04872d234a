"""The README's quickstart runs as written and completes a turn."""

from __future__ import annotations

import re
from pathlib import Path

from toolgate import Promotion, Verdict

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quickstart_routes_promotes_and_verifies_a_call() -> None:
    found = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert found is not None, "README.md has no python block"
    namespace: dict[str, object] = {}
    exec(compile(found.group(1), str(README), "exec"), namespace)
    promotion, verdict = namespace["promotion"], namespace["verdict"]
    assert isinstance(promotion, Promotion)
    assert isinstance(verdict, Verdict)
    assert "create_issue" in promotion.pool_text
    assert verdict.ok, verdict
    assert verdict.tool_id == "github/create_issue"

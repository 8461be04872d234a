"""Preconditions for a server you do not own: a host-side overrides file.

GitHub's MCP server says nothing of who may call what, so ``state={"scopes": [...]}`` gates
none of its tools until the host declares it. ``github.overrides.json`` does, by tool name
(an entry may also be an id, ``server/name``): every tool the server marks as not read-only
requires the ``github:write`` scope, a destructive one ``github:admin`` too, and
``merge_pull_request`` the ``review_approved`` milestone. Overrides win over what a tool
says of itself, and McpRouter(overrides=...) keeps them when a server lists again.

    python examples/host_overrides.py github-mcp-server.tools-list.json  # its tools/list
"""

import json
import sys
from pathlib import Path

from toolgate import Catalog, Router

if len(sys.argv) != 2:
    sys.exit(f"usage: {sys.argv[0]} TOOLS_LIST_JSON  (the GitHub MCP server's tools/list)")
overrides = json.loads(Path(__file__).with_name("github.overrides.json").read_text())
catalog = Catalog.load(sys.argv[1], server="github", overrides=overrides)
router = Router.from_catalog(catalog)

query = "delete the file old.txt from acme/web"
reader = router.route(query, state={"scopes": ["github:read"]}, top_k=5)
admin = router.route(query, state={"scopes": ["github:write", "github:admin"]}, top_k=5)
for who, result in (("reader", reader), ("admin", admin)):
    gated = {g.id: g.reason for g in result.gated_out}
    print(f"{who}: routed {list(result.ids)}; gated out {gated}")

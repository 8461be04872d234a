"""Synthetic catalogs for the benches: the paper's 120-tool testbed and scale top-ups.

:func:`table2_tools` builds the Tool Attention paper's Table 2 testbed: six servers (GitHub 30
tools, Filesystem 10, Database 20, Slack 15, Web 10, Jira 35) whose tool definitions average
520 / 180 / 410 / 290 / 220 / 470 cl100k tokens, about 47,300 in all, measured with the harness's
own serialiser (:func:`benches.tokens.tool_line`). Names are ``verb_object``; parameters are
plausible ones for the server, padded with filter parameters until each tool reaches a target
drawn around its server's average. :func:`table2_tasks` writes single-step and multi-step tasks
(one to three tools, across servers) from phrase templates, with their gold tools. Everything is
deterministic (seed 42, as in the paper).

:func:`topup_tools` makes extra tools for scale tests past the ~7,200 real ones, by recombining
real tools' names, descriptions and parameters, so BM25 sees realistic vocabulary.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benches.tokens import TokenCounter, tool_line

SEED = 42


@dataclass(frozen=True)
class ServerSpec:
    """One testbed server: its tools' objects and verbs, and the paper's size figures."""

    name: str
    tools: int
    avg_tokens: int
    domain: str
    objects: tuple[str, ...]
    verbs: tuple[str, ...]
    context: tuple[str, ...]
    params: tuple[tuple[str, str, str], ...]


SERVERS = (
    ServerSpec(
        "github",
        30,
        520,
        "repo, issue, PR operations",
        ("issue", "pull_request", "branch", "release", "commit", "workflow_run"),
        ("create", "get", "list", "update", "search"),
        ("in the payments repo", "on the api-gateway repository", "for the mobile app repo"),
        (
            ("owner", "string", "Account that owns the repository (a user or an organisation)."),
            ("repo", "string", "Repository name, without the owner."),
            ("title", "string", "Short title shown in lists and notifications."),
            ("body", "string", "Markdown text of the item."),
            ("state", "string", "open, closed or all."),
            ("labels", "array", "Label names to apply; unknown labels are created."),
            ("assignees", "array", "Logins of the users to assign."),
        ),
    ),
    ServerSpec(
        "filesystem",
        10,
        180,
        "read/write/search files",
        ("file", "directory"),
        ("read", "write", "list", "search", "move"),
        ("under the project folder", "in my home directory"),
        (
            ("path", "string", "Absolute path of the file or directory."),
            ("content", "string", "Text to write, UTF-8."),
            ("pattern", "string", "Glob pattern, such as **/*.py."),
        ),
    ),
    ServerSpec(
        "database",
        20,
        410,
        "query, schema, write",
        ("table", "row", "index", "view", "migration"),
        ("create", "describe", "list", "drop"),
        ("in the analytics database", "on the production Postgres"),
        (
            ("database", "string", "Database name; the connection's default when omitted."),
            ("schema", "string", "Schema that holds the object, such as public."),
            ("sql", "string", "SQL text; parameters as $1, $2, ..."),
            ("timeout_ms", "integer", "Statement timeout in milliseconds."),
        ),
    ),
    ServerSpec(
        "slack",
        15,
        290,
        "message, channel, search",
        ("message", "channel", "reaction"),
        ("post", "list", "search", "delete", "update"),
        ("in the #incidents channel", "to the team channel", "in last week's threads"),
        (
            ("channel", "string", "Channel id or name, such as #general."),
            ("text", "string", "Message text in Slack mrkdwn."),
            ("thread_ts", "string", "Timestamp of the parent message to reply in its thread."),
        ),
    ),
    ServerSpec(
        "web",
        10,
        220,
        "search, fetch, extract",
        ("page", "links"),
        ("search", "fetch", "extract", "summarize", "screenshot"),
        ("about the outage", "from the vendor's documentation site"),
        (
            ("url", "string", "Absolute http or https URL."),
            ("query", "string", "Search terms."),
            ("max_results", "integer", "Most results to return."),
        ),
    ),
    ServerSpec(
        "jira",
        35,
        470,
        "issue CRUD, workflow",
        ("ticket", "sprint", "epic", "board", "worklog", "transition", "component"),
        ("create", "get", "list", "update", "delete"),
        ("in the PLATFORM project", "for the checkout team", "on the current sprint"),
        (
            ("project_key", "string", "Key of the Jira project, such as PLAT."),
            ("summary", "string", "One-line summary of the item."),
            ("description", "string", "Longer description in Atlassian wiki markup."),
            ("assignee", "string", "Account id of the assignee."),
            ("priority", "string", "Highest, High, Medium, Low or Lowest."),
        ),
    ),
)

_ATTRIBUTES = (
    "id",
    "name",
    "status",
    "owner",
    "created_after",
    "created_before",
    "updated_after",
    "priority",
    "tags",
    "visibility",
    "format",
    "locale",
    "region",
    "team",
    "author",
    "reviewer",
    "milestone",
    "version",
    "source",
    "target",
    "parent",
    "category",
    "size",
)
_VERB_PHRASES: Mapping[str, tuple[str, ...]] = {
    "create": ("create a new {o}", "open a {o}", "add a {o}"),
    "get": ("show me the {o}", "look up the {o}", "fetch the details of the {o}"),
    "list": ("list all {os}", "show every {o} we have", "what {os} are there"),
    "update": ("update the {o}", "change the {o}", "edit the {o}"),
    "delete": ("delete the {o}", "remove the {o}", "get rid of the {o}"),
    "search": ("search for {os} mentioning the crash", "find {os} about the login bug"),
    "read": ("read the {o}", "print the contents of the {o}"),
    "write": ("write the notes to a {o}", "save the report as a {o}"),
    "move": ("move the {o}", "rename the {o}"),
    "describe": ("describe the {o}", "show the columns of the {o}"),
    "drop": ("drop the {o}", "permanently remove the {o}"),
    "post": ("post a {o}", "send a {o}"),
    "fetch": ("download the {o}", "fetch the {o}"),
    "extract": ("extract the text of the {o}", "pull the tables out of the {o}"),
    "summarize": ("summarize the {o}", "give me the gist of the {o}"),
    "screenshot": ("take a screenshot of the {o}", "capture an image of the {o}"),
}


def _words(identifier: str) -> str:
    return identifier.replace("_", " ")


def _tool_names(spec: ServerSpec) -> list[tuple[str, str, str]]:
    """``(name, verb, object)`` for the server's tools, verbs cycling over objects."""
    pairs = [(v, o) for o in spec.objects for v in spec.verbs]
    if len(pairs) < spec.tools:
        raise ValueError(f"{spec.name}: {len(pairs)} verb/object pairs for {spec.tools} tools")
    return [(f"{v}_{o}", v, o) for v, o in pairs[: spec.tools]]


def _description(spec: ServerSpec, verb: str, obj: str) -> str:
    words = _words(obj)
    return (
        f"{verb.capitalize()} a {words} on the {spec.name} server ({spec.domain}). "
        f"Returns the {words} as JSON with its id, timestamps and links, or a structured error "
        f"naming the parameter that was rejected."
    )


def _filter_params(obj: str) -> Iterator[tuple[str, dict[str, Any]]]:
    words = _words(obj)
    for attribute in _ATTRIBUTES:
        yield (
            f"{obj}_{attribute}",
            {
                "type": "string",
                "description": (
                    f"Only match a {words} whose {_words(attribute)} equals this value. "
                    f"Leave it out to match any {_words(attribute)}."
                ),
            },
        )


def _schema(spec: ServerSpec) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name, kind, description in spec.params:
        prop: dict[str, Any] = {"type": kind, "description": description}
        if kind == "array":
            prop["items"] = {"type": "string"}
        properties[name] = prop
    return {"type": "object", "properties": properties, "required": [spec.params[0][0]]}


def _definition(name: str, description: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


def table2_tools(seed: int = SEED) -> list[dict[str, Any]]:
    """The 120 tools as JSONL-shaped dicts (``server``, ``name``, ``description``,
    ``inputSchema``), each padded to a token target around its server's average."""
    rng = random.Random(seed)
    count = TokenCounter("cl100k_base")
    tools: list[dict[str, Any]] = []
    for spec in SERVERS:
        for name, verb, obj in _tool_names(spec):
            description = _description(spec, verb, obj)
            schema = _schema(spec)
            # A filter parameter adds ~30 tokens: stop half of one short, so means land on target.
            target = spec.avg_tokens * rng.uniform(0.8, 1.2) - 15
            extra = _filter_params(obj)
            while count(tool_line(_definition(name, description, schema))) < target:
                key, prop = next(extra)
                schema["properties"][key] = prop
            tools.append(
                {"server": spec.name, "name": name, "description": description,
                 "inputSchema": schema}
            )  # fmt: skip
    return tools


@dataclass(frozen=True)
class Task:
    """One synthetic task: the user's words and the ids of the tools it needs."""

    qid: str
    query: str
    gold: tuple[str, ...]


def _step(rng: random.Random, spec: ServerSpec, verb: str, obj: str) -> str:
    words = _words(obj)
    phrase = rng.choice(_VERB_PHRASES[verb]).format(o=words, os=f"{words}s")
    return f"{phrase} {rng.choice(spec.context)}"


def table2_tasks(count: int = 500, seed: int = SEED) -> list[Task]:
    """``count`` tasks: 60% need one tool, 30% two and 10% three (on different servers)."""
    rng = random.Random(seed)
    by_server = {spec.name: (spec, _tool_names(spec)) for spec in SERVERS}
    tasks = []
    for number in range(count):
        draw = rng.random()
        steps = 1 if draw < 0.6 else 2 if draw < 0.9 else 3
        servers = rng.sample(sorted(by_server), steps)
        phrases, gold = [], []
        for server in servers:
            spec, names = by_server[server]
            name, verb, obj = rng.choice(names)
            phrases.append(_step(rng, spec, verb, obj))
            gold.append(f"{server}/{name}")
        text = ", then ".join(phrases)
        tasks.append(Task(f"tb{number}", text[0].upper() + text[1:] + ".", tuple(gold)))
    return tasks


def topup_tools(
    real: Sequence[Mapping[str, Any]], count: int, seed: int = SEED
) -> list[dict[str, Any]]:
    """``count`` synthetic tools on ``synthetic-*`` servers, each mixing two real tools' name
    parts, first sentences and parameters (so term statistics stay realistic)."""
    rng = random.Random(seed)
    out = []
    for number in range(count):
        first, second = rng.choice(real), rng.choice(real)
        name_a = str(first["name"]).split("_")[0]
        name_b = str(second["name"]).split("_")[-1]
        description = (
            str(first.get("description", "")).split(". ")[0]
            + ". "
            + str(second.get("description", "")).split(". ")[0]
        ).strip()
        schema = first.get("inputSchema") or {"type": "object", "properties": {}}
        out.append(
            {
                "server": f"synthetic-{number % 500}",
                "name": f"{name_a}_{name_b}_{number}",
                "description": description or f"Synthetic tool {number}.",
                "inputSchema": schema,
            }
        )
    return out

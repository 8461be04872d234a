"""Token accounting: what each tool-loading method puts into one request, counted exactly.

Every method is rendered by the same serialiser, :func:`render`: the tool-related system text
(a summary pool, a CLI prompt, or nothing), then one compact JSON line per tool definition in
OpenAI Chat form (``{"type": "function", "function": {...}}``, exposed names included), then any
tool output the method needs the model to read. Counts come from tiktoken (``cl100k_base`` and
``o200k_base``) on that text. Lines end in a newline that closes a tiktoken pre-token, so the
count of a request equals the sum of its parts; :func:`count_request` relies on that (a test
checks it) to count each tool once.

The methods (the Tool Attention paper's baselines, section 6.4):

* ``B1 full schema``: every tool's definition, every turn;
* ``B2 static pruning``: a fixed curated subset (30 tools, as the paper's curator picks);
* ``B3 simple retrieval``: the top-10 tools by plain MiniLM cosine on ``name: description``
  (:class:`benches.plain.PlainCosine`), full definitions, no pool;
* ``B4 CLI lazy``: a CLI prompt and one shell tool; the model runs ``--list`` once (its output
  stays in the conversation) and ``--help`` for each tool it needs (perfect discovery assumed);
* ``Tool Attention``: the full summary pool (every tool's name and summary) + the top-10 of the
  same cosine above 0.28; a second row counts the pool without the names, as the paper's
  reference code does, to show what that omission is worth;
* ``toolgate default``: :func:`toolgate.promotion.promote.promote_tools` output for the default
  route: the constant-size digest and its ``tool_search`` tool, and the compact schemas of the
  tools adaptive selection shows.

Prompt caching: the part of a request that is identical every turn (system text and fixed
tool lines) is a cacheable prefix. ``steady cached`` bills it at :data:`CACHE_READ_FACTOR` of the
input price and everything else in full; cache writes are billed as ordinary input (OpenAI does
so; Anthropic charges 1.25x for writes, which would raise the first turn by a quarter of the
prefix).
"""

from __future__ import annotations

import json
import math
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from toolgate.catalog.catalog import Catalog
from toolgate.formats.tokens import count_text
from toolgate.promotion.pool import render_pool
from toolgate.promotion.promote import Promotion

if TYPE_CHECKING:
    from benches.plain import PlainCosine

ENCODINGS = ("cl100k_base", "o200k_base")
#: Share of the input price billed for prompt-cache reads (Anthropic and current OpenAI: 10%).
CACHE_READ_FACTOR = 0.1
#: The turn at which rho is reported, as in the paper's Table 3.
RHO_TURN = 30
#: Task tokens (user, assistant and tool-output text) per turn assumed for rho.
TASK_TOKENS_PER_TURN = 500
#: System-prompt tokens outside the tools assumed for rho (0 reproduces the paper's B1-B3 rho).
SYSTEM_TOKENS = 0
#: Tools the curator keeps for B2, as in the paper (30 of 120).
STATIC_PRUNING_SIZE = 30
#: Full schemas retrieved by B3 and Tool Attention (the paper's k).
RETRIEVAL_K = 10
#: Tool Attention's ISO threshold (the paper's theta).
TOOL_ATTENTION_THRESHOLD = 0.28

METHODS = (
    "B1 full schema",
    "B2 static pruning",
    "B3 simple retrieval",
    "B4 CLI lazy",
    "Tool Attention",
    "Tool Attention, pool without names",
    "toolgate default",
)

CLI_PROMPT = (
    "You can use tools through the `mcp` command-line program, run with the shell tool.\n"
    "- `mcp --list` prints every tool as `name: summary`.\n"
    "- `mcp --help NAME` prints a tool's parameters as JSON Schema.\n"
    "- `mcp NAME --json '{...}'` calls a tool with its arguments and prints the result.\n"
    "List the tools first, read a tool's help before calling it, and never guess parameters."
)
_SHELL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run one shell command and return its standard output and error.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command line."}},
            "required": ["command"],
        },
    },
}


@dataclass(frozen=True)
class Request:
    """The tool-related content one method sends for one turn.

    ``system`` and ``stable_tools`` are identical every turn (the cacheable prefix);
    ``turn_tools`` and ``turn_text`` change per turn; ``first_turn_text`` is sent once, on the
    first turn, and stays in the conversation. ``visible`` holds the ids whose full schema the
    model sees this turn (``None`` when the model discovers tools itself).
    """

    method: str
    system: str = ""
    stable_tools: tuple[Mapping[str, Any], ...] = ()
    turn_tools: tuple[Mapping[str, Any], ...] = ()
    first_turn_text: str = ""
    turn_text: str = ""
    visible: frozenset[str] | None = field(default=None)

    @cached_property
    def stable_lines(self) -> tuple[str, ...]:
        """The serialised stable tool lines (rendered once: B1 repeats them every query)."""
        return tuple(tool_line(d) for d in self.stable_tools)

    @cached_property
    def turn_lines(self) -> tuple[str, ...]:
        """The serialised per-turn tool lines."""
        return tuple(tool_line(d) for d in self.turn_tools)


def tool_line(definition: Mapping[str, Any]) -> str:
    """One tool definition as the serialiser writes it: compact JSON and a newline."""
    return json.dumps(definition, ensure_ascii=False, separators=(",", ":")) + "\n"


def _block(text: str) -> str:
    return text + "\n" if text else ""


def render(request: Request, *, first_turn: bool = False) -> str:
    """The exact text counted for ``request`` on the first turn or a later one."""
    parts = [_block(request.system), *request.stable_lines]
    if first_turn:
        parts.append(_block(request.first_turn_text))
    parts.extend(request.turn_lines)
    parts.append(_block(request.turn_text))
    return "".join(parts)


@dataclass(frozen=True)
class TurnTokens:
    """A request's tokens split into the cacheable prefix, the per-turn part and the once-only
    first-turn part."""

    stable: int
    varying: int
    first_only: int

    @property
    def first_turn(self) -> int:
        """Tokens on the first turn (no cache to read yet)."""
        return self.stable + self.varying + self.first_only

    @property
    def steady(self) -> int:
        """Tokens on every later turn without prompt caching."""
        return self.stable + self.varying

    @property
    def steady_cached(self) -> float:
        """Input-price-equivalent tokens on a later turn with the prefix read from cache."""
        return CACHE_READ_FACTOR * self.stable + self.varying

    @property
    def in_window(self) -> int:
        """Tool-related tokens in the context window at a later turn (first-turn text stays)."""
        return self.stable + self.varying + self.first_only


def rho(tool_tokens: float, turn: int = RHO_TURN) -> float:
    """Effective context utilisation (the paper's eq. 3) at ``turn``.

    C_task = ``turn`` x :data:`TASK_TOKENS_PER_TURN`, C_sys = :data:`SYSTEM_TOKENS`, and the
    tax is the tool tokens in the window at that turn: a stateless request carries one copy of
    the tools, not ``turn`` copies. These assumptions reproduce the paper's rho for B1-B3
    (0.24, 0.56, 0.78) from its own token figures.
    """
    task = turn * TASK_TOKENS_PER_TURN
    return task / (task + tool_tokens + SYSTEM_TOKENS)


class TokenCounter:
    """Counts texts with one encoding, memoising each distinct text (tool lines repeat)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._memo: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        """Tokens in ``text``."""
        if not text:
            return 0
        found = self._memo.get(text)
        if found is None:
            found = self._memo[text] = count_text(text, self.encoding)
        return found

    def request(self, request: Request) -> TurnTokens:
        """Tokens of ``request``, each part counted on its own (see the module docstring)."""
        stable = self(_block(request.system)) + sum(map(self, request.stable_lines))
        varying = sum(map(self, request.turn_lines))
        varying += self(_block(request.turn_text))
        return TurnTokens(stable, varying, self(_block(request.first_turn_text)))


def definitions(catalog: Catalog, ids: Iterable[str]) -> tuple[dict[str, Any], ...]:
    """OpenAI Chat definitions of the tools ``ids``, in the order given."""
    return tuple(catalog[i].to_provider("openai") for i in ids)


def full_schema(catalog: Catalog) -> Request:
    """B1: every full definition every turn."""
    return Request(
        METHODS[0], stable_tools=definitions(catalog, catalog.ids), visible=frozenset(catalog.ids)
    )


def static_pruning(catalog: Catalog, curated: Sequence[str]) -> Request:
    """B2: the curated subset's full definitions every turn."""
    return Request(
        METHODS[1], stable_tools=definitions(catalog, curated), visible=frozenset(curated)
    )


def simple_retrieval(catalog: Catalog, retrieved: Sequence[str]) -> Request:
    """B3: the retrieved tools' full definitions, nothing else."""
    return Request(
        METHODS[2], turn_tools=definitions(catalog, retrieved), visible=frozenset(retrieved)
    )


def cli_list_output(catalog: Catalog) -> str:
    """What ``mcp --list`` prints: one ``name: summary`` line per tool."""
    return "\n".join(f"{t.exposed_name}: {t.summary}" for t in catalog)


def cli_lazy(catalog: Catalog, needed: Sequence[str]) -> Request:
    """B4: the CLI prompt and shell tool, the list once, the help of each needed tool."""
    helps = "\n".join(
        json.dumps(catalog[i].input_schema, ensure_ascii=False, separators=(",", ":"))
        for i in needed
    )
    return Request(
        METHODS[3],
        system=CLI_PROMPT,
        stable_tools=(_SHELL_TOOL,),
        first_turn_text=cli_list_output(catalog),
        turn_text=helps,
    )


def tool_attention(catalog: Catalog, retrieved: Sequence[str]) -> Request:
    """Tool Attention: the full summary pool (names included) + the retrieved definitions."""
    pool, _ = render_pool(catalog, "full")
    return Request(
        METHODS[4],
        system=pool,
        turn_tools=definitions(catalog, retrieved),
        visible=frozenset(retrieved),
    )


def tool_attention_unnamed(catalog: Catalog, retrieved: Sequence[str]) -> Request:
    """Tool Attention as its reference code counts it: pool lines carry summaries, no names.

    Shown only to measure what leaving the names out saves; a model cannot ask for a tool it
    cannot name.
    """
    header = render_pool(catalog, "full")[0].split("\n", 1)[0]
    pool = "\n".join([header, *(f"- {t.summary}" for t in catalog)])
    return Request(
        METHODS[5],
        system=pool,
        turn_tools=definitions(catalog, retrieved),
        visible=frozenset(retrieved),
    )


def toolgate_default(promotion: Promotion, method: str = METHODS[6]) -> Request:
    """toolgate: the promotion's pool and tools; the search tool and pinned tools, which it
    sends first, are the stable prefix."""
    if promotion.format != "openai":
        raise ValueError(f"promotion must be in openai format, got {promotion.format!r}")
    stable = promotion.stable_count
    return Request(
        method,
        system=promotion.pool_text,
        stable_tools=tuple(promotion.tools[:stable]),
        turn_tools=tuple(promotion.tools[stable:]),
        visible=frozenset(promotion.active_ids),
    )


def complete(catalog: Catalog, gold: Sequence[str], visible: Iterable[str]) -> bool:
    """Whether every gold tool (a tool's id, or its name) has its full schema visible. Names
    are the catalog's: an id's part after its first ``/`` is no name when a server's name
    holds one (``team/github/create_issue``)."""
    shown = set(visible)
    return all(
        entry in shown or any(tool.id in shown for tool in catalog.with_name(entry))
        for entry in gold
    )


def curate(
    catalog: Catalog, picks: Iterable[Sequence[str]], size: int = STATIC_PRUNING_SIZE
) -> list[str]:
    """B2's curator: the ``size`` tools picked most often, ties and shortfall in catalog order.

    ``picks`` are per-query tool ids from a curation split disjoint from the evaluation queries
    (the tools those tasks needed, or those routed for them when there is no gold).
    """
    order = {tool_id: i for i, tool_id in enumerate(catalog.ids)}
    tally = Tally(tool_id for chosen in picks for tool_id in dict.fromkeys(chosen))
    ranked = sorted((i for i in tally if i in order), key=lambda i: (-tally[i], order[i]))
    chosen = ranked[:size]
    taken = set(chosen)
    for tool_id in catalog.ids:
        if len(chosen) >= size:
            break
        if tool_id not in taken:
            chosen.append(tool_id)
    return chosen


def gold_ids(catalog: Catalog, gold: Sequence[str]) -> list[str]:
    """Catalog ids that satisfy ``gold`` entries (the first tool per bare name, in order)."""
    out: list[str] = []
    for entry in gold:
        if "/" in entry and entry in catalog:
            out.append(entry)
        elif tools := catalog.with_name(entry):
            out.append(tools[0].id)
    return list(dict.fromkeys(out))


@dataclass
class MethodTally:
    """Running sums of one method's per-query figures on one workload, and its largest
    steady-state request (``most``, per encoding): the bound a turn kept to."""

    method: str
    catalog: Catalog = field(repr=False)
    queries: int = 0
    tokens: dict[str, dict[str, float]] = field(default_factory=dict)
    complete_hits: int = 0
    labelled: int = 0
    schemas: int = 0
    discovery: bool = False
    most: dict[str, int] = field(default_factory=dict)

    def add(self, counts: Mapping[str, TurnTokens], request: Request, gold: Sequence[str]) -> None:
        """Record one query's request (counted per encoding) and whether it is complete."""
        self.queries += 1
        for name, turn in counts.items():
            sums = self.tokens.setdefault(name, {})
            for key, value in _figures(turn).items():
                sums[key] = sums.get(key, 0.0) + value
            self.most[name] = max(self.most.get(name, 0), turn.steady)
        if request.visible is None:
            self.discovery = True
        else:
            self.schemas += len(request.visible)
            if gold:
                self.labelled += 1
                self.complete_hits += complete(self.catalog, gold, request.visible)

    def summary(self) -> dict[str, Any]:
        """Means over the queries; ``complete`` (and its standard error, ``complete se``) is
        ``None`` without gold or for discovery."""
        n = max(self.queries, 1)
        out: dict[str, Any] = {"method": self.method, "queries": self.queries}
        for name, sums in self.tokens.items():
            short = name.split("_")[0]
            for key, value in sums.items():
                out[f"{short} {key}"] = round(value / n, 1)
            out[f"{short} steady max"] = self.most[name]
        cl100k_window = out.get("cl100k window", 0.0)
        out["rho@30"] = round(rho(cl100k_window), 3)
        out["schemas shown"] = None if self.discovery else round(self.schemas / n, 2)
        out["complete"] = out["complete se"] = None
        if self.labelled and not self.discovery:
            share = self.complete_hits / self.labelled
            out["complete"] = round(share, 4)
            out["complete se"] = round(standard_error(share, self.labelled), 4)
        return out


def standard_error(share: float, n: int) -> float:
    """The binomial standard error of a share measured on ``n`` queries."""
    return math.sqrt(share * (1.0 - share) / n)


def _figures(turn: TurnTokens) -> dict[str, float]:
    return {
        "first turn": turn.first_turn,
        "steady": turn.steady,
        "steady cached": turn.steady_cached,
        "window": turn.in_window,
    }


RequestBuilder = Callable[[str, Sequence[str]], list[Request]]


def account(
    catalog: Catalog,
    queries: Iterable[tuple[str, Sequence[str]]],
    build: RequestBuilder,
    encodings: Sequence[str] = ENCODINGS,
) -> list[dict[str, Any]]:
    """Mean figures per method over ``queries`` (text, gold) of ``catalog``'s tools, with
    ``build`` giving the requests of every method for one query, in the order ``build``
    gives them."""
    counters = [TokenCounter(e) for e in encodings]
    tallies: dict[str, MethodTally] = {}
    for text, gold in queries:
        for request in build(text, gold):
            counts = {c.encoding: c.request(request) for c in counters}
            tallies.setdefault(request.method, MethodTally(request.method, catalog)).add(
                counts, request, gold
            )
    return [tally.summary() for tally in tallies.values()]


def method_requests(
    catalog: Catalog, cosine: PlainCosine, default: Any, curated: Sequence[str]
) -> RequestBuilder:
    """The :data:`METHODS` requests for one query over ``catalog``.

    ``cosine`` is the plain MiniLM ranking B3 and Tool Attention retrieve with
    (:class:`benches.plain.PlainCosine`) and ``default`` a router with toolgate's default
    configuration. B4's model reads the help of each gold tool, or of the best cosine match
    when the query has no gold.
    """
    from toolgate.promotion.promote import promote_tools

    b1, b2 = full_schema(catalog), static_pruning(catalog, curated)

    def build(text: str, gold: Sequence[str]) -> list[Request]:
        retrieved = cosine.top(text, RETRIEVAL_K)
        attended = cosine.top(text, RETRIEVAL_K, TOOL_ATTENTION_THRESHOLD)
        promotion = promote_tools(catalog, default.route(text), format="openai")
        needed = gold_ids(catalog, gold) or retrieved[:1]
        return [
            b1,
            b2,
            simple_retrieval(catalog, retrieved),
            cli_lazy(catalog, needed),
            tool_attention(catalog, attended),
            tool_attention_unnamed(catalog, attended),
            toolgate_default(promotion),
        ]

    return build

"""Tokens against completeness: the front each method draws, and what compact schemas save.

On the Table 2 testbed and every labelled set of ``shared/data`` (BFCL single-turn, MetaTool
multi-tool and single-tool), every point is a method's mean tool tokens per turn (cl100k,
steady state, :mod:`benches.tokens`' serialiser) against its complete (the share of queries
whose every gold tool has its full schema in the request):

* ``B3 top-k`` for k = 1 ... 10: plain MiniLM cosine top-k on each tool's ``name:
  description`` (:class:`benches.plain.PlainCosine`), full schemas, no pool;
* ``Tool Attention``: the full summary pool and the same cosine's top-10 above theta = 0.28;
* ``toolgate top-k`` for k = 1 ... 10: toolgate's fused ranking cut at k, with the digest,
  search tool and compact schemas (what the ranking alone allows at each count);
* ``toolgate ceiling k`` for k = 1 ... 10: the default configuration with ``top_k = k``, a
  ceiling under adaptive selection;
* ``toolgate default``: the default configuration as shipped.

Each set is measured on every query with gold when it has at most :data:`QUERIES` of them (the
testbed, the MCP tasks, MetaTool multi-tool), else on a seeded sample of :data:`QUERIES` (BFCL,
MetaTool single-tool); every completeness in the summary table carries its binomial standard
error, sqrt(p (1 - p) / n).

Tokens per turn against N count B3, Tool Attention and toolgate's default over the GitHub MCP
server (117 tools) and the shared registries cut or topped up to 1,000 ... 10,000 tools
(:func:`benches.bench_route.scale_catalog`), on dev-set queries, with the largest turn.
Compaction counts every tool of a catalog in each provider's own serialisation
(:meth:`toolgate.catalog.tool.Tool.token_count`) with and without ``compact``; strict mode
checks that OpenAI strict schemas stay strict once compacted. Each part prints alone:

    .venv/bin/python -m benches.front sets        # the front and the goal on every set
    .venv/bin/python -m benches.front scale       # tokens per turn against N
    .venv/bin/python -m benches.front compaction  # tokens saved per catalog and provider
    .venv/bin/python -m benches.front strict      # strict-mode validity after compaction
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benches import mcp_tasks, quality, tokens
from benches.plain import PlainCosine
from benches.tables import markdown
from benches.testbed import table2_tasks, table2_tools
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.evaluation.evaluate import LabelledQuery, load_queries
from toolgate.formats.compact import compact_schema, is_strict
from toolgate.formats.raw import JsonDict
from toolgate.formats.schema_walk import map_named_subschemas
from toolgate.promotion.promote import promote_tools
from toolgate.routing.router import Router, RouterConfig

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SEED = 42
#: Relevant queries per set: a set with no more is measured whole, a larger one on a seeded
#: sample of this many (``make bench-report`` measures the front in a few minutes with it).
QUERIES = 1_000
CEILINGS = tuple(range(1, 11))
SCALE = (1_000, 2_500, 5_000, 10_000)
SCALE_QUERIES = 40
SCALE_METHODS = ("B3 simple retrieval", "Tool Attention", "toolgate default")
PROVIDERS = ("openai", "anthropic", "gemini", "mcp")
COMPACTION_CATALOGS = (
    ("GitHub MCP server", DATA / "catalogs" / "github-mcp-server.tools-list.json"),
    ("mcpm registry", DATA / "catalogs" / "mcpm-registry.jsonl"),
    ("Docker MCP registry", DATA / "catalogs" / "docker-mcp-registry.jsonl"),
    ("BFCL single-turn", DATA / "eval" / "bfcl-single-turn" / "tools.jsonl"),
    ("MetaTool", DATA / "eval" / "metatool" / "tools.jsonl"),
)


#: The labelled sets of ``shared/data/eval`` by their names in the tables.
LABELS = {
    "bfcl-single-turn": "BFCL single-turn",
    "metatool multi-tool": "MetaTool multi",
    "metatool single-tool": "MetaTool single",
}


def labelled_sets() -> list[tuple[str, Catalog, list[LabelledQuery]]]:
    """The labelled workloads, the testbed and the MCP tasks first: catalog and queries with
    gold."""
    testbed = Catalog.from_tools(table2_tools())
    tasks = [LabelledQuery(t.qid, t.query, t.gold) for t in table2_tasks()]
    tools, mcp = mcp_tasks.load()
    out = [("Table 2 testbed", testbed, tasks), ("MCP tasks", Catalog.from_tools(tools), mcp)]
    for eval_set in quality.eval_sets(DATA / "eval"):
        catalog, _ = quality.load_catalog(eval_set.tools)
        relevant = [q for q in load_queries(eval_set.queries) if q.gold]
        out.append((LABELS.get(eval_set.name, eval_set.name), catalog, relevant))
    return out


def front_builder(catalog: Catalog, cosine: PlainCosine, default: Router) -> tokens.RequestBuilder:
    """Every point's request for one query (see the module docstring)."""

    def build(text: str, gold: Sequence[str]) -> list[tokens.Request]:
        ranked = cosine.top(text, max(CEILINGS))
        out = [
            replace(tokens.simple_retrieval(catalog, ranked[:k]), method=f"B3 top-{k}")
            for k in CEILINGS
        ]
        attended = cosine.top(text, tokens.RETRIEVAL_K, tokens.TOOL_ATTENTION_THRESHOLD)
        out.append(tokens.tool_attention(catalog, attended))
        fused = default.route(text, top_k=max(CEILINGS), adaptive=False).ids
        for k in CEILINGS:
            promotion = promote_tools(catalog, fused[:k], format="openai")
            out.append(tokens.toolgate_default(promotion, f"toolgate top-{k}"))
        for k in CEILINGS:
            promotion = promote_tools(catalog, default.route(text, top_k=k), format="openai")
            out.append(tokens.toolgate_default(promotion, f"toolgate ceiling {k}"))
        promotion = promote_tools(catalog, default.route(text), format="openai")
        out.append(tokens.toolgate_default(promotion))
        return out

    return build


def measure_front(embedder: Embedder, n: int = QUERIES) -> list[dict[str, Any]]:
    """Each labelled set's points, on every relevant query of a set of at most ``n``, else on
    ``n`` drawn with the seed."""
    workloads = []
    for name, catalog, queries in labelled_sets():
        cosine = PlainCosine(catalog, embedder)
        default = Router.from_catalog(catalog, embedder=embedder)
        drawn = quality.sample(queries, n, SEED)
        build = front_builder(catalog, cosine, default)
        rows = tokens.account(catalog, ((q.query, q.gold) for q in drawn), build, ("cl100k_base",))
        workloads.append({"set": name, "tools": len(catalog), "queries": len(drawn), "rows": rows})
    return workloads


def measure_scale(embedder: Embedder) -> list[dict[str, Any]]:
    """Tool tokens per turn of B3, Tool Attention and toolgate's default against N."""
    from benches.bench_route import TopUpEmbedder, query_pool, real_tools, scale_catalog

    github, _ = quality.load_catalog(DATA / "catalogs" / "github-mcp-server.tools-list.json")
    texts = query_pool()[:SCALE_QUERIES]
    real = real_tools()
    # The top-up embedder reads real tools through its own cache and mixes the others; a
    # router's cache would hand it batches of top-ups alone.
    catalogs: list[tuple[Catalog, Any, bool]] = [(github, embedder, True)]
    catalogs += [(scale_catalog(n, real), TopUpEmbedder(), False) for n in SCALE]
    rows = []
    for catalog, embed, cache in catalogs:
        cosine = PlainCosine(catalog, embed, cache=cache)
        default = Router.from_catalog(catalog, embedder=embed, cache=cache)
        counted = tokens.account(
            catalog,
            ((text, ()) for text in texts),
            scale_builder(catalog, cosine, default),
            ("cl100k_base",),
        )
        figures = {row["method"]: row["cl100k steady"] for row in counted}
        ours = next(r for r in counted if r["method"] == SCALE_METHODS[-1])
        rows.append(
            {
                "N": len(catalog),
                **figures,
                "toolgate default, cached": ours["cl100k steady cached"],
                "toolgate default, largest turn": ours["cl100k steady max"],
            }
        )
    return rows


def scale_builder(catalog: Catalog, cosine: PlainCosine, default: Router) -> tokens.RequestBuilder:
    """B3's, Tool Attention's and toolgate's default request for one query."""

    def build(text: str, gold: Sequence[str]) -> list[tokens.Request]:
        ranked = cosine.top(text, tokens.RETRIEVAL_K)
        attended = cosine.top(text, tokens.RETRIEVAL_K, tokens.TOOL_ATTENTION_THRESHOLD)
        promotion = promote_tools(catalog, default.route(text), format="openai")
        return [
            tokens.simple_retrieval(catalog, ranked),
            tokens.tool_attention(catalog, attended),
            tokens.toolgate_default(promotion),
        ]

    return build


def measure_compaction() -> list[dict[str, Any]]:
    """Tokens of every tool of each catalog, full and compact, in each provider's form (each
    tool's own tokens, without the once-per-request overhead), and as the JSON lines the front
    counts (one compact JSON line per OpenAI definition)."""
    rows = []
    count = tokens.TokenCounter("cl100k_base")
    for name, path in COMPACTION_CATALOGS:
        catalog, _ = quality.load_catalog(path)
        row: dict[str, Any] = {"catalog": name, "tools": len(catalog)}
        for provider in PROVIDERS:
            full = sum(t.token_count(provider) for t in catalog)
            small = sum(t.token_count(provider, compact=True) for t in catalog)
            row[provider] = _saving(full, small)
        full = sum(count(tokens.tool_line(t.to_provider("openai"))) for t in catalog)
        small = sum(count(tokens.tool_line(t.to_provider("openai", compact=True))) for t in catalog)
        row["JSON lines"] = _saving(full, small)
        rows.append(row)
    return rows


def _saving(full: int, small: int) -> str:
    return f"{full:,} -> {small:,} ({1 - small / full:.1%})"


def measure_strict() -> list[dict[str, Any]]:
    """OpenAI strict mode through compaction, over every tool of each catalog: the schemas
    strict as given, and every schema made strict (:func:`strict_form`), that stay strict."""
    rows = []
    for name, path in COMPACTION_CATALOGS:
        catalog, _ = quality.load_catalog(path)
        given = [t for t in catalog if is_strict(t.input_schema)]
        made = [(t, strict_form(t.input_schema)) for t in catalog]
        made = [(t, schema) for t, schema in made if is_strict(schema)]
        rows.append(
            {
                "catalog": name,
                "tools": len(catalog),
                "strict as given": len(given),
                "still strict": sum(
                    is_strict(compact_schema(t.input_schema, name=t.name, strict=True))
                    for t in given
                ),
                "made strict": len(made),
                "made strict, still strict": sum(
                    is_strict(compact_schema(schema, name=t.name, strict=True))
                    for t, schema in made
                ),
            }
        )
    return rows


def strict_form(schema: Any) -> Any:
    """``schema`` as OpenAI's strict mode wants it: every object closed and requiring all its
    properties (what a client that sends tools strict does to them)."""

    def close(node: JsonDict, _name: str | None) -> JsonDict:
        if node.get("type") == "object" or "properties" in node:
            node = {**node, "additionalProperties": False}
            node["required"] = list(node.get("properties") or {})
        return node

    return map_named_subschemas(schema, close)


STRICT_COLUMNS = (
    "catalog", "tools", "strict as given", "still strict", "made strict",
    "made strict, still strict",
)  # fmt: skip


def points(workload: dict[str, Any], prefix: str) -> list[tuple[float, float]]:
    """(tokens, complete) of the rows whose method starts with ``prefix``, in order."""
    return [
        (row["cl100k steady"], row["complete"])
        for row in workload["rows"]
        if row["method"].startswith(prefix)
    ]


#: The curves of the plot: each method's points by prefix, and the line style.
CURVES = (("B3 top-", "o-"), ("toolgate top-", "d--"), ("toolgate ceiling ", "s-"))


def plot_front(workloads: list[dict[str, Any]], path: Path) -> None:
    """One panel per set: B3's curve, toolgate's ceilings, Tool Attention, the default."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4), dpi=100)
    for ax, workload in zip(axes, workloads, strict=True):
        for prefix, style in CURVES:
            xs, ys = zip(*points(workload, prefix), strict=True)
            ax.plot(xs, ys, style, label=prefix.strip().replace(" top-", " top-k"))
        for method, marker in (("Tool Attention", "^"), ("toolgate default", "*")):
            ((x, y),) = points(workload, method)
            ax.plot([x], [y], marker, markersize=12 if marker == "*" else 8, label=method)
        ax.set_xscale("log")
        ax.set(xlabel="cl100k tool tokens per turn", ylabel="complete", title=workload["set"])
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def goal_met(b3: dict[str, Any], ours: dict[str, Any]) -> bool:
    """Whether ``ours`` is at least as complete as ``b3`` in at most half its tokens, both
    measured on the same queries."""
    if b3.get("queries") != ours.get("queries"):
        raise ValueError(
            f"B3 was measured on {b3.get('queries')} queries and toolgate on "
            f"{ours.get('queries')}: the goal compares the two on the same queries"
        )
    return bool(
        ours["complete"] >= b3["complete"] and ours["cl100k steady"] <= b3["cl100k steady"] / 2
    )


def complete_text(row: dict[str, Any]) -> str:
    """A row's completeness with its standard error (a stored run may predate it)."""
    se = row.get("complete se")
    return f"{row['complete']:.3f}" + ("" if se is None else f" ± {se:.3f}")


def front_rows(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The default against B3's top-10 on each set: tokens, completeness with its standard
    error, and whether the goal is met."""
    out = []
    for workload in workloads:
        rows = {row["method"]: row for row in workload["rows"]}
        b3, ours = rows["B3 top-10"], rows["toolgate default"]
        out.append(
            {
                "set": workload["set"],
                "tools": workload["tools"],
                "queries": workload["queries"],
                "B3 top-10 tokens": f"{b3['cl100k steady']:,.0f}",
                "B3 top-10 complete": complete_text(b3),
                "toolgate default tokens": f"{ours['cl100k steady']:,.0f}",
                "toolgate default complete": complete_text(ours),
                "tokens vs B3": f"{ours['cl100k steady'] / b3['cl100k steady']:.2f}x",
                "schemas shown": ours["schemas shown"],
                "goal met": "yes" if goal_met(b3, ours) else "no",
            }
        )
    return out


FRONT_COLUMNS = (
    "set", "tools", "queries", "B3 top-10 tokens", "B3 top-10 complete",
    "toolgate default tokens", "toolgate default complete", "tokens vs B3", "schemas shown",
    "goal met",
)  # fmt: skip
POINT_COLUMNS = ("method", "schemas shown", "complete", "cl100k steady", "cl100k steady cached")


def measure_all(embedder: Embedder, n: int, results: Path) -> dict[str, Any]:
    """Every measurement of this module (``n`` as :func:`measure_front` takes it), and the
    front plot written to ``results``."""
    measured = {
        "sets": measure_front(embedder, n),
        "scale": measure_scale(embedder),
        "compaction": measure_compaction(),
        "strict": measure_strict(),
    }
    plot_front(measured["sets"], results / "front.png")
    return measured


#: Renders rows as a markdown table with the given columns (``benches.report.markdown``).
Table = Callable[[Sequence[dict[str, Any]], Sequence[str]], str]


SCALE_COLUMNS = (
    "N", *SCALE_METHODS, "toolgate default, cached", "toolgate default, largest turn",
)  # fmt: skip
COMPACTION_COLUMNS = ("catalog", "tools", *PROVIDERS, "JSON lines")


def front_text(measured: dict[str, Any], table: Table) -> str:
    """The section: the default against B3, the plot, every point, N, compaction, strict."""
    parts = [
        "Every method through `benches/tokens.py`'s serialiser (cl100k tool tokens per turn, "
        "steady state; *complete*: every gold tool's full schema is in the request). B3 is "
        "plain MiniLM cosine top-k on each tool's `name: description` (the router's int8 "
        "model, nothing else of toolgate's: `benches/plain.py`) with full schemas and no "
        "pool; Tool Attention adds the summary pool to that cosine's top-10 above "
        f"{tokens.TOOL_ATTENTION_THRESHOLD}; *toolgate top-k* is toolgate's "
        "fused ranking cut at k; *toolgate ceiling k* is the default configuration "
        "(constant-size digest, `tool_search` tool, compact schemas, adaptive selection) with "
        "`top_k = k` as its ceiling, and *toolgate default* is `top_k = "
        f"{RouterConfig().top_k}`; every toolgate point carries the digest and search tool. "
        "*goal met*: complete at least B3 top-10's in at most half its tokens, on the same "
        "queries. Every query with gold of a set that has at most "
        f"{QUERIES:,}, a seeded sample of {QUERIES:,} of a larger one; ± is the binomial "
        "standard error, sqrt(p (1 - p) / n) (`python -m benches.front sets`).",
        table(front_rows(measured["sets"]), FRONT_COLUMNS),
        "![tokens against completeness](../benches/results/front.png)",
    ]
    for workload in measured["sets"]:
        parts.append(
            f"**{workload['set']}**: {workload['tools']:,} tools, {workload['queries']} "
            "queries\n\n" + table(workload["rows"], POINT_COLUMNS)
        )
    parts.append(
        "Tool tokens per turn against N (cl100k, steady state, the mean and the largest turn; "
        "*cached* bills the stable prefix at prompt-cache rates), on dev-set queries: the "
        "GitHub MCP server, then the shared registries cut or topped up "
        "(`benches.bench_route.scale_catalog`; `python -m benches.front scale`):"
    )
    parts.append(table(measured["scale"], SCALE_COLUMNS))
    parts.append(
        "Tokens saved by compact schemas: every tool of each catalog in each provider's own "
        "serialisation (`Tool.token_count`, without the once-per-request overhead) and as the "
        "JSON lines above (`python -m benches.front compaction`):"
    )
    parts.append(table(measured["compaction"], COMPACTION_COLUMNS))
    if "strict" in measured:
        parts.append(
            "OpenAI strict mode through compaction: the schemas strict as given, and every "
            "schema closed and fully required as a strict client sends it, that are still "
            "strict once compacted (`python -m benches.front strict`):"
        )
        parts.append(table(measured["strict"], STRICT_COLUMNS))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Measure one part and print its tables (``make bench-report`` measures them all)."""
    parser = argparse.ArgumentParser(prog="python -m benches.front", description=__doc__)
    parser.add_argument("part", choices=("sets", "scale", "compaction", "strict"))
    parser.add_argument(
        "--queries",
        type=int,
        default=QUERIES,
        help="relevant queries per set: a set with no more is measured whole",
    )
    args = parser.parse_args(argv)
    if args.part in ("compaction", "strict"):
        rows = measure_compaction() if args.part == "compaction" else measure_strict()
        columns = COMPACTION_COLUMNS if args.part == "compaction" else STRICT_COLUMNS
        print(markdown(rows, columns))
        return 0
    embedder = Embedder(precision=RouterConfig().precision, progress=False)
    if args.part == "scale":
        print(markdown(measure_scale(embedder), SCALE_COLUMNS))
        return 0
    workloads = measure_front(embedder, args.queries)
    print(markdown(front_rows(workloads), FRONT_COLUMNS))
    for workload in workloads:
        print(f"\n{workload['set']}: {workload['tools']:,} tools, {workload['queries']} queries")
        print(markdown(workload["rows"], POINT_COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The benchmark harness counts what it claims to: baselines, serialiser, rho, testbed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from benches import front, mcp_tasks, report, tokens
from benches.plain import PlainCosine, bm25_fields
from benches.quality import RANKINGS, eval_sets, routers_for, sample
from benches.tables import markdown
from benches.testbed import SERVERS, table2_tasks, table2_tools, topup_tools

from tests.shared_data import DATA, require
from toolgate._toolgate import Bm25
from toolgate.catalog.catalog import Catalog
from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.evaluation.evaluate import LabelledQuery
from toolgate.formats.compact import compact_schema, is_strict
from toolgate.formats.tokens import encoding
from toolgate.promotion.promote import promote_tools
from toolgate.routing.router import Router, RouterConfig

EVAL_ROOT = DATA / "eval"


def tiktoken_count(text: str, name: str = "cl100k_base") -> int:
    """The reference: tiktoken on the whole text at once."""
    return len(encoding(name).encode_ordinary(text))


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.from_tools(
        [
            {"server": "git", "name": "create_issue", "description": "Open an issue. Long.",
             "inputSchema": {"type": "object", "properties": {
                 "title": {"type": "string", "description": "Issue title."},
                 "body": {"type": "string"}}, "required": ["title"]}},
            {"server": "git", "name": "list_issues", "description": "List open issues.",
             "inputSchema": {"type": "object", "properties": {"state": {"enum": ["open", "all"]}}}},
            {"server": "fs", "name": "read_file", "description": "Read a file from disk.",
             "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
            {"server": "chat", "name": "create_issue", "description": "Report a chat problem.",
             "inputSchema": {"type": "object", "properties": {}}},
        ]
    )  # fmt: skip


def every_method(catalog: Catalog) -> list[tokens.Request]:
    ids = catalog.ids
    promotion = promote_tools(catalog, [ids[2], ids[0]], format="openai")
    return [
        tokens.full_schema(catalog),
        tokens.static_pruning(catalog, ids[:2]),
        tokens.simple_retrieval(catalog, [ids[2], ids[0]]),
        tokens.cli_lazy(catalog, [ids[0]]),
        tokens.tool_attention(catalog, [ids[2], ids[0]]),
        tokens.tool_attention_unnamed(catalog, [ids[2], ids[0]]),
        tokens.toolgate_default(promotion),
    ]


def test_full_schema_is_the_sum_of_every_counted_full_schema(catalog: Catalog) -> None:
    expected = sum(
        tiktoken_count(json.dumps(t.to_provider("openai"), separators=(",", ":")) + "\n")
        for t in catalog
    )
    turn = tokens.TokenCounter("cl100k_base").request(tokens.full_schema(catalog))
    assert turn.steady == turn.first_turn == expected
    assert turn.varying == 0


@pytest.mark.parametrize("name", tokens.ENCODINGS)
def test_counting_by_parts_equals_counting_the_rendered_request(
    catalog: Catalog, name: str
) -> None:
    counter = tokens.TokenCounter(name)
    for request in every_method(catalog):
        turn = counter.request(request)
        assert turn.first_turn == tiktoken_count(tokens.render(request, first_turn=True), name)
        assert turn.steady == tiktoken_count(tokens.render(request), name), request.method


def test_every_method_serialises_a_tool_identically(catalog: Catalog) -> None:
    reference = {t.exposed_name: tokens.tool_line(t.to_provider("openai")) for t in catalog}
    for request in every_method(catalog):
        for line in (*request.stable_lines, *request.turn_lines):
            name = json.loads(line)["function"]["name"]
            if name in reference:
                assert line == reference[name], request.method
            else:  # the CLI's shell tool or toolgate's search tool, never a catalog tool
                assert request.method in ("B4 CLI lazy", "toolgate default")


def test_methods_show_the_schemas_they_promise(catalog: Catalog) -> None:
    b1, b2, b3, b4, attention, unnamed, default = every_method(catalog)
    assert b1.visible == frozenset(catalog.ids)
    assert b2.visible == frozenset(catalog.ids[:2])
    assert b3.visible == attention.visible == frozenset({catalog.ids[0], catalog.ids[2]})
    assert b4.visible is None
    assert not b4.turn_tools
    assert default.visible == frozenset({catalog.ids[0], catalog.ids[2]})
    # Tool Attention's pool names every tool, so the model can ask for any of them.
    for tool in catalog:
        assert f"- {tool.exposed_name}: " in attention.system
        assert tool.exposed_name not in unnamed.system
    counter = tokens.TokenCounter("cl100k_base")
    assert counter.request(unnamed).steady < counter.request(attention).steady


def test_cli_lazy_lists_once_and_reads_help_per_needed_tool(catalog: Catalog) -> None:
    request = tokens.cli_lazy(catalog, [catalog.ids[0]])
    first, later = tokens.render(request, first_turn=True), tokens.render(request)
    for tool in catalog:
        assert f"{tool.exposed_name}: {tool.summary}" in first
        assert f"{tool.exposed_name}: " not in later
    assert '"title"' in later
    assert '"path"' not in later


def test_caching_bills_only_the_stable_prefix_at_the_read_factor() -> None:
    turn = tokens.TurnTokens(stable=1_000, varying=300, first_only=50)
    assert turn.first_turn == 1_350
    assert turn.steady == 1_300
    assert turn.steady_cached == pytest.approx(1_000 * tokens.CACHE_READ_FACTOR + 300)
    assert turn.in_window == 1_350


def test_rho_reproduces_the_papers_table_3_from_its_token_figures() -> None:
    # Table 3: B1 47,312 -> 0.24, B2 11,865 -> 0.56, B3 4,082 -> 0.78.
    assert tokens.rho(47_312) == pytest.approx(0.24, abs=0.005)
    assert tokens.rho(11_865) == pytest.approx(0.56, abs=0.005)
    assert tokens.rho(4_082) == pytest.approx(0.78, abs=0.01)
    assert tokens.rho(0) == 1.0


def test_complete_matches_names_and_ids(catalog: Catalog) -> None:
    visible = ["git/create_issue", "fs/read_file"]
    assert tokens.complete(catalog, ["create_issue", "read_file"], visible)
    assert tokens.complete(catalog, ["git/create_issue"], visible)
    assert not tokens.complete(catalog, ["chat/create_issue"], visible)
    assert not tokens.complete(catalog, ["read_file", "list_issues"], visible)
    assert tokens.gold_ids(catalog, ["create_issue", "fs/read_file", "nope"]) == [
        "git/create_issue",
        "fs/read_file",
    ]


def test_complete_reads_a_tools_name_from_the_catalog_not_its_id() -> None:
    # A name was guessed as what follows an id's first "/": under a server named
    # "team/github", create_issue's was "github/create_issue".
    catalog = Catalog.from_tools(
        [
            {"server": "team/github", "name": "create_issue", "description": "Open an issue."},
            {"server": "web", "name": "github/create_issue", "description": "Open one on the web."},
        ]
    )
    assert tokens.complete(catalog, ["create_issue"], ["team/github/create_issue"])
    assert not tokens.complete(catalog, ["github/create_issue"], ["team/github/create_issue"])
    assert tokens.complete(catalog, ["github/create_issue"], ["web/github/create_issue"])
    rows = tokens.account(
        catalog,
        [("open an issue", ["create_issue"])],
        lambda text, gold: [tokens.simple_retrieval(catalog, ["team/github/create_issue"])],
    )
    assert rows[0]["complete"] == 1.0


def test_curator_keeps_the_most_needed_then_fills_in_catalog_order(catalog: Catalog) -> None:
    picks = [["fs/read_file"], ["fs/read_file", "git/list_issues"], ["x/unknown"]]
    assert tokens.curate(catalog, picks, size=3) == [
        "fs/read_file",
        "git/list_issues",
        "git/create_issue",
    ]


def test_account_averages_per_method(catalog: Catalog) -> None:
    def build(text: str, gold: Any) -> list[tokens.Request]:
        chosen = [catalog.ids[0]] if "issue" in text else [catalog.ids[2]]
        return [tokens.full_schema(catalog), tokens.simple_retrieval(catalog, chosen)]

    queries = [("open an issue", ["create_issue"]), ("read", ["list_issues"])]
    rows = tokens.account(catalog, queries, build)
    by_method = {row["method"]: row for row in rows}
    assert by_method["B1 full schema"]["complete"] == 1.0
    assert by_method["B3 simple retrieval"]["complete"] == 0.5
    counter = tokens.TokenCounter("cl100k_base")
    expected = (
        counter.request(tokens.simple_retrieval(catalog, [catalog.ids[0]])).steady
        + counter.request(tokens.simple_retrieval(catalog, [catalog.ids[2]])).steady
    ) / 2
    assert by_method["B3 simple retrieval"]["cl100k steady"] == pytest.approx(expected, abs=0.05)
    largest = max(
        counter.request(tokens.simple_retrieval(catalog, [catalog.ids[i]])).steady for i in (0, 2)
    )
    assert by_method["B3 simple retrieval"]["cl100k steady max"] == largest


def test_strict_form_closes_every_object_and_compaction_keeps_it_strict() -> None:
    generated = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "title": "add_noteArguments",
        "properties": {
            "text": {"type": "string", "title": "Text"},
            "tags": {"type": "object", "properties": {"pinned": {"type": "boolean"}}},
        },
        "required": [],
    }
    strict = front.strict_form(generated)
    assert strict["additionalProperties"] is False
    assert strict["required"] == ["text", "tags"]
    assert strict["properties"]["tags"]["required"] == ["pinned"]
    assert "additionalProperties" not in generated  # the input is not modified
    compacted = compact_schema(strict, name="add_note", strict=True)
    assert is_strict(compacted)
    assert "$schema" not in compacted
    assert "title" not in compacted["properties"]["text"]


def front_workload(
    b3: tuple[float, float], ours: tuple[float, float], queries: tuple[int, int] = (100, 100)
) -> dict[str, Any]:
    """A set's front with B3's and the default's (tokens, complete) on ``queries``."""
    rows = [
        {"method": method, "queries": n, "cl100k steady": tokens_, "complete": complete,
         "complete se": 0.04, "schemas shown": 3}
        for method, (tokens_, complete), n in zip(
            ("B3 top-10", "toolgate default"), (b3, ours), queries, strict=True
        )
    ]  # fmt: skip
    return {"set": "s", "tools": 10, "queries": queries[0], "rows": rows}


def test_goal_needs_both_completeness_and_half_the_tokens() -> None:
    cases = [((1000, 0.8), (500, 0.8)), ((1000, 0.8), (501, 0.9)), ((1000, 0.8), (400, 0.79))]
    met = [row["goal met"] for row in front.front_rows([front_workload(*c) for c in cases])]
    assert met == ["yes", "no", "no"]


def test_goal_compares_the_two_on_the_same_queries() -> None:
    workload = front_workload((1000, 0.8), (500, 0.8), queries=(150, 497))
    with pytest.raises(ValueError, match="same queries"):
        front.front_rows([workload])


def test_front_table_gives_each_completeness_its_standard_error(catalog: Catalog) -> None:
    ids = catalog.ids

    def build(text: str, gold: Any) -> list[tokens.Request]:
        return [tokens.simple_retrieval(catalog, ids[:1] if text == "hit" else ids[1:2])]

    queries = [("hit" if i < 8 else "miss", ("create_issue",)) for i in range(10)]
    (row,) = tokens.account(catalog, queries, build, ("cl100k_base",))
    assert row["complete se"] == pytest.approx((0.8 * 0.2 / 10) ** 0.5, abs=1e-4)
    (shown,) = front.front_rows([front_workload((1000, 0.8), (500, 0.8))])
    assert shown["B3 top-10 complete"] == "0.800 ± 0.040"


def test_testbed_matches_the_papers_table_2() -> None:
    tools = table2_tools()
    catalog = Catalog.from_tools(tools)
    assert len(catalog) == 120
    assert Counter(t.server for t in catalog) == {s.name: s.tools for s in SERVERS}
    counter = tokens.TokenCounter("cl100k_base")
    per_server: dict[str, list[int]] = {}
    for tool in catalog:
        line = tokens.tool_line(tool.to_provider("openai"))
        per_server.setdefault(tool.server, []).append(counter(line))
    for spec in SERVERS:
        mean = sum(per_server[spec.name]) / spec.tools
        assert mean == pytest.approx(spec.avg_tokens, rel=0.2), spec.name
    total = counter.request(tokens.full_schema(catalog)).steady
    assert total == pytest.approx(47_300, rel=0.05)
    assert table2_tools() == tools  # deterministic


def test_table2_tasks_name_real_tools() -> None:
    ids = set(Catalog.from_tools(table2_tools()).ids)
    tasks = table2_tasks(200)
    assert all(task.gold and set(task.gold) <= ids for task in tasks)
    assert {len(task.gold) for task in tasks} == {1, 2, 3}
    assert table2_tasks(200) == tasks


def test_mcp_tasks_need_two_to_five_tools_of_one_or_two_servers(tmp_path: Path) -> None:
    require(mcp_tasks.REGISTRY)
    tools, tasks = mcp_tasks.load()
    ids = set(Catalog.from_tools(tools).ids)
    assert len(tasks) >= 80
    assert len({task.qid for task in tasks}) == len(tasks)
    for task in tasks:
        assert 2 <= len(task.gold) <= 5, task.qid
        assert set(task.gold) <= ids, task.qid
        assert len({tool.split("/")[0] for tool in task.gold}) <= 2, task.qid
    document = json.loads(mcp_tasks.TASKS.read_text(encoding="utf-8"))
    document["servers"].append("no-such-server")
    document["tasks"][0]["gold"].append("fastfs-mcp/no_such_tool")
    broken = tmp_path / "tasks.json"
    broken.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError, match="servers no-such-server"):
        mcp_tasks.load(broken)
    document["servers"].pop()
    broken.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError, match="mcp0: fastfs-mcp/no_such_tool"):
        mcp_tasks.load(broken)


def test_mcp_tasks_measure_every_configuration(catalog: Catalog) -> None:
    """The configurations differ in row centring, which a view of one router cannot change."""
    tools = [
        {"server": t.server, "name": t.name, "description": t.description,
         "inputSchema": t.input_schema}
        for t in catalog
    ]  # fmt: skip
    queries = [LabelledQuery("q1", "read the config file from disk", ("read_file",))]
    figures = mcp_tasks.measure(tools, queries, cache=False)
    assert set(figures) == set(RANKINGS)


def test_topup_tools_form_a_valid_catalog_of_unique_ids() -> None:
    real = table2_tools()
    extra = Catalog.from_tools(topup_tools(real, 300))
    assert len(extra) == 300
    assert all(t.server.startswith("synthetic-") for t in extra)


def test_sample_is_reproducible_and_keeps_file_order() -> None:
    items = [LabelledQuery(str(i), f"q{i}", ()) for i in range(50)]
    drawn = sample(items, 10)
    assert drawn == sample(items, 10)
    assert len(set(drawn)) == 10
    assert [int(q.qid) for q in drawn] == sorted(int(q.qid) for q in drawn)
    assert sample(items, 100) == items


def test_every_eval_set_is_found() -> None:
    require(EVAL_ROOT)
    names = {s.name for s in eval_sets(EVAL_ROOT)}
    assert names == {"bfcl-single-turn", "metatool multi-tool", "metatool single-tool"}


def test_readme_section_is_replaced_between_the_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n\nintro\n\n{report.START}\nold\n{report.END}\n\nafter\n")
    monkeypatch.setattr(report, "README", readme)
    report.write_readme("new table")
    assert (
        readme.read_text() == f"# t\n\nintro\n\n{report.START}\nnew table\n{report.END}\n\nafter\n"
    )
    readme.write_text("# t\n")
    report.write_readme("first")
    assert readme.read_text().endswith(f"{report.START}\nfirst\n{report.END}\n")


def _token_rows(full: float, ours: float, complete: float | None) -> list[dict[str, Any]]:
    return [
        {"method": "B1 full schema", "cl100k steady": full, "complete": complete and 1.0},
        {"method": "B3 simple retrieval", "cl100k steady": 900.0, "complete": complete},
        {"method": "Tool Attention", "cl100k steady": 1_500.0, "complete": complete},
        {"method": "toolgate default", "cl100k steady": ours, "complete": complete},
    ]


@pytest.fixture
def stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A results folder as a measuring run leaves it, and a README with the markers."""
    results = tmp_path / "benches" / "results"
    results.mkdir(parents=True)
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n\n{report.START}\nold\n{report.END}\n\n## Quickstart\n")
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(report, "DOCS_RESULTS", tmp_path / "docs" / "results.md")
    monkeypatch.setattr(report, "README", readme)
    workloads = [
        {"catalog": "synthetic testbed (Table 2)", "tools": 120, "queries": 3, "labelled": True,
         "rows": _token_rows(40_000.0, 4_000.0, 0.75)},
        {"catalog": "mcpm-registry", "tools": 2_237, "queries": 3, "labelled": False,
         "rows": _token_rows(300_000.0, 5_000.0, None)},
    ]  # fmt: skip
    quality = {
        "rows": [
            {"set": "bfcl-single-turn", "config": config, "queries": 7, "ndcg@10": ndcg}
            for config, ndcg in (
                ("BM25 alone", 0.8219),
                ("dense alone", 0.8069),
                ("toolgate default", 0.856),
            )
        ],
        "curve": [{"threshold": 0.3, "queries": 7, "recall@10": 0.9}],
        "samples": [{"set": "bfcl-single-turn", "queries": 7, "of": 9, "tools": 12, "skipped": 1}],
        "defaults": {
            "alpha": 0.65,
            "threshold": None,
            "fusion": "minmax",
            "clause_weight": 1.0,
            "near_copy_cosine": 0.95,
        },
    }
    speed = {
        "timings": [
            {"N": n, "method": method, "median ms": ms, "x python pipeline": ratio}
            for n, method, ms, ratio in (
                (10_000, "toolgate route", 4.367, 0.534), (10_000, "python pipeline", 8.175, 1.0),
                (100_000, "toolgate route", 7.479, 0.578),
            )
        ],
        "tokens_per_turn": [{"N": 10_000, "B1 full schema": 1_000_000.0}],
    }  # fmt: skip
    run = {"stamp": "a test machine", "sections": ["tokens", "quality", "speed"]}
    files = {"tokens.json": workloads, "quality.json": quality, "route.json": speed}
    for name, data in {**files, "report.json": run}.items():
        (results / name).write_text(json.dumps(data))
    return tmp_path


def test_render_writes_the_results_page_and_the_readme_table(stored: Path) -> None:
    report.render()
    page = (stored / "docs" / "results.md").read_text()
    assert page.startswith("# Results\n\nGenerated by `make bench-report` on a test machine.")
    for heading in ("## Token accounting", "## Routing quality", "## Speed and scale"):
        assert f"\n{heading}\n" in page
    assert "bfcl-single-turn: 7 of 9 queries, 12 tools (1 duplicate or invalid skipped)" in page
    assert "](../benches/results/threshold.png)" in page
    readme = (stored / "README.md").read_text()
    head, rest = readme.split(report.START + "\n")
    section, tail = rest.split("\n" + report.END)
    assert head == "# t\n\n"
    assert tail == "\n\n## Quickstart\n"
    assert "| Table 2 testbed | 120 | 40,000 | 4,000 (90% less) | 0.75 / 0.75 |" in section
    assert "mcpm" not in section  # not one of the README's catalogs
    assert "| bfcl-single-turn | 0.822 | 0.807 | 0.856 |" in section
    assert "at N = 10,000 tools: 4.37 ms median" in section
    assert "0.53x the time" in section
    assert "on a test machine." in section


def test_render_leaves_out_speed_a_run_did_not_measure(stored: Path) -> None:
    results = stored / "benches" / "results"
    (results / "report.json").write_text(
        json.dumps({"stamp": "a test machine", "sections": ["tokens", "quality"]})
    )
    report.render()
    assert "Speed and scale" not in (stored / "docs" / "results.md").read_text()
    assert "Router.route" not in (stored / "README.md").read_text()


def test_render_without_measurements_names_the_missing_file(stored: Path) -> None:
    (stored / "benches" / "results" / "quality.json").unlink()
    with pytest.raises(SystemExit, match=r"quality\.json is missing"):
        report.render()


def test_markdown_table_marks_missing_cells() -> None:
    table = markdown([{"a": 1_234, "b": None}], ("a", "b"))
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1,234 | n/a |"]


def test_the_threshold_sweep_router_evaluates(catalog: Catalog) -> None:
    from benches.quality import _WithThreshold

    from toolgate.evaluation.evaluate import evaluate
    from toolgate.routing.router import Router

    router = Router.from_catalog(catalog, cache=None)
    queries = [LabelledQuery("q1", "read the config file from disk", ("read_file",))]
    low = evaluate(_WithThreshold(router, -1.0), queries, top_k=2)
    high = evaluate(_WithThreshold(router, 1.01), queries, top_k=2)
    assert (low["recall@10"], high["recall@10"]) == (1.0, 0.0)


#: Queries for the baselines: one names a tool (the router puts it first), one reads as two
#: intents (the router adds its clause bonus), one needs no tool.
BASELINE_QUERIES = (
    "search the news about rust",
    "hi",
    "run explain_query and then post the plan to slack",
)


def test_b3_is_plain_cosine_on_name_and_description() -> None:
    """Issue 17's B3: MiniLM top-k on "name: description" and nothing else of toolgate's."""
    catalog = demo_catalog()
    embedder = Embedder(precision=RouterConfig().precision, progress=False)
    rows = embedder.embed([f"{tool.name}: {tool.description}" for tool in catalog])
    cosine = PlainCosine(catalog, embedder, cache=False)
    default = Router.from_catalog(catalog, embedder=embedder, cache=None)
    build = front.front_builder(catalog, cosine, default)
    for query in BASELINE_QUERIES:
        order = np.argsort(-(rows @ embedder.embed([query])[0]), kind="stable")
        expected = [catalog.ids[i] for i in order[:10]]
        b3 = next(r for r in build(query, ()) if r.method == "B3 top-10")
        assert [d["function"]["name"] for d in b3.turn_tools] == [
            catalog[i].exposed_name for i in expected
        ]


@pytest.fixture(scope="module")
def baselines() -> dict[str, Any]:
    embedder = Embedder(precision=RouterConfig().precision, progress=False)
    return routers_for(demo_catalog(), embedder, cache=False)


@pytest.mark.parametrize("query", BASELINE_QUERIES)
def test_bm25_alone_ranks_the_tools_that_match_by_bm25_and_nothing_else(
    baselines: dict[str, Any], query: str
) -> None:
    catalog = demo_catalog()
    config = RouterConfig()
    weights = dict(
        zip(("name", "description", "params", "server"), config.bm25_weights, strict=True)
    )
    bm25 = Bm25.build(
        [bm25_fields(tool) for tool in catalog],
        k1=config.bm25_k1, b=config.bm25_b, field_weights=weights,
    )  # fmt: skip
    scores = bm25.scores(query)
    matched = sorted((i for i in range(len(catalog)) if scores[i] > 0), key=lambda i: -scores[i])
    routed = baselines["BM25 alone"].route(query, top_k=5, adaptive=False).ids
    assert list(routed) == [catalog.ids[i] for i in matched[:5]]


@pytest.mark.parametrize("query", BASELINE_QUERIES)
def test_dense_alone_is_b3s_ranking(baselines: dict[str, Any], query: str) -> None:
    embedder = Embedder(precision=RouterConfig().precision, progress=False)
    b3 = PlainCosine(demo_catalog(), embedder, cache=False)
    routed = baselines["dense alone"].route(query, top_k=5, adaptive=False).ids
    assert list(routed) == b3.top(query, 5)

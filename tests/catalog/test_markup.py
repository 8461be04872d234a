"""Descriptions written as Markdown or HTML are indexed as their words."""

from __future__ import annotations

import time

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import bm25_document, embedding_views
from toolgate.catalog.tool import Tool

MARKDOWN = (
    "## determine_body_mass_index\n\nCalculate body mass index given weight and height.<br>\n\n"
    "### Parameters\n- **weight**: Weight in kilograms.\n\n"
    "See [the docs](https://example.com/bmi) for more. <br/><b>Note:</b> <i>beta</i>."
)


def test_summary_is_the_prose_under_a_heading() -> None:
    tool = Tool(server="s", name="determine_body_mass_index", description=MARKDOWN)
    assert tool.summary == "Calculate body mass index given weight and height."


def test_indexed_text_holds_no_tags_or_addresses() -> None:
    tool = Tool(server="s", name="determine_body_mass_index", description=MARKDOWN)
    indexed = bm25_document(tool)["description"]
    views = embedding_views(Catalog([tool]))[0]
    for text in (indexed, *views):
        for mark in ("<br", "<b>", "<i>", "**", "##", "https://", "]("):
            assert mark not in text, (mark, text)
    assert "Weight in kilograms." in indexed
    assert "See the docs for more." in indexed


def test_placeholders_in_angle_brackets_stay() -> None:
    tool = Tool(
        server="s", name="get_repo", description="Reads GET /repos/<owner>/<repo>. Needs a token."
    )
    assert "<owner>/<repo>" in bm25_document(tool)["description"]
    assert tool.summary == "Reads GET /repos/<owner>/<repo>."


def test_a_heading_alone_is_the_summary() -> None:
    assert Tool(server="s", name="t", description="# Get the weather").summary == "Get the weather"


def test_long_runs_of_blanks_read_in_linear_time() -> None:
    # A 100 kB description (a pasted log, a padded table) must not stall a catalog's load:
    # every Tool reads its description through plain_text and prose for its summary.
    blanks = " " * 100_000
    for description in (f"a **b**{blanks}c", f"# a{blanks}b", f"# a{' #' * 50_000}b"):
        started = time.perf_counter()
        Tool(server="s", name="t", description=description)
        assert time.perf_counter() - started < 1, description[:10]


def test_comparisons_that_look_like_tags_stay() -> None:
    # "<b and y>" reads as a <b> tag with two bare attributes; an attribute in a description
    # has a value (href="...", src=...), a comparison does not.
    described = "Keeps rows where x<b and y>c, or where i <i or j> 3."
    tool = Tool(server="s", name="filter_rows", description=described)
    assert bm25_document(tool)["description"] == described
    marked = '<a href="https://x.io" target=_blank>docs</a><br/><td colspan="2">cell</td>'
    assert bm25_document(Tool(server="s", name="t", description=marked))["description"] == (
        "docs\ncell"
    )


def test_double_underscores_inside_a_name_stay() -> None:
    # Markdown reads "__" as emphasis only at a word's edge: "my__special__field" is a name.
    described = "Sets the my__special__field option. Use __strong__ words."
    tool = Tool(server="s", name="t", description=described)
    assert bm25_document(tool)["description"] == (
        "Sets the my__special__field option. Use strong words."
    )


def test_a_number_sign_opening_a_line_of_prose_is_no_heading() -> None:
    # "# of items" is "number of items": a heading's text is a title or a name, never a
    # sentence opening with a lower-case word. Read as a title over the prose, the line was
    # left out of the summary, and the "#" out of the indexed text.
    described = "# of items to return, up to 100.\n\nLists the orders of a shop."
    tool = Tool(server="s", name="list_orders", description=described)
    assert tool.summary == "# of items to return, up to 100."
    assert bm25_document(tool)["description"].startswith("# of items")
    # A title in a word or a name, or marked twice or more, is still a heading.
    for title in ("# Orders", "# list_orders", "# listOrders", "## list orders"):
        titled = Tool(server="s", name="list_orders", description=f"{title}\n\n{described}")
        assert titled.summary == "# of items to return, up to 100.", title

"""A server's boilerplate is left out of what the router indexes for each of its tools."""

from __future__ import annotations

from toolgate.catalog.boilerplate import boilerplate
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import bm25_documents, embedding_views
from toolgate.catalog.tool import Tool

PREAMBLE = "This tool is part of the Acme Platform API v3. All requests require authentication. "
OWN = {
    "get_weather": "Current weather for a city.",
    "get_forecast": "Five-day forecast for a city.",
    "list_alerts": "Severe weather alerts in a region.",
    "get_air": "Air quality index at a place.",
}


def _catalog(own: dict[str, str], preamble: str = PREAMBLE) -> Catalog:
    return Catalog([Tool(server="acme", name=n, description=preamble + d) for n, d in own.items()])


def test_the_row_reads_what_the_tool_does_not_the_preamble() -> None:
    catalog = _catalog(OWN)
    for (summary_view, described), own in zip(embedding_views(catalog), OWN.values(), strict=True):
        assert own in summary_view
        assert "Acme Platform" not in summary_view
        assert described == own
    for document, own in zip(bm25_documents(catalog), OWN.values(), strict=True):
        assert document["description"] == own


def test_a_sentence_few_tools_share_stays() -> None:
    # Two of four tools alike is a pair, not the server's habit.
    own = dict(OWN)
    own["get_weather"] = "Needs a city name. " + own["get_weather"]
    own["get_forecast"] = "Needs a city name. " + own["get_forecast"]
    documents = bm25_documents(_catalog(own, preamble=""))
    assert documents[0]["description"] == own["get_weather"]


def test_a_description_that_is_only_boilerplate_is_kept() -> None:
    catalog = _catalog({**OWN, "ping": ""})
    ping = Tool(server="acme", name="ping", description=PREAMBLE.strip())
    catalog = Catalog([*(t for t in catalog if t.name != "ping"), ping])
    assert bm25_documents(catalog)[-1]["description"] == PREAMBLE.strip()


def test_only_a_preamble_is_left_out() -> None:
    # A sentence shared after the tool's own words is past what the summary and the first
    # embedded tokens read; leaving it out of long descriptions lowered BFCL's nDCG.
    own = {name: text + " Rate limits apply." for name, text in OWN.items()}
    documents = bm25_documents(_catalog(own, preamble=""))
    assert documents[0]["description"] == own["get_weather"]


def test_a_preamble_under_a_title_is_left_out() -> None:
    # "## name" over each description and the preamble: the preamble is not the opening
    # sentence (the title is), yet the row must still read what the tool does, not its title.
    titled = [
        Tool(server="acme", name=n, description=f"## {n}\n\n{PREAMBLE}{d}") for n, d in OWN.items()
    ]
    catalog = Catalog(titled)
    for (summary_view, described), own in zip(embedding_views(catalog), OWN.values(), strict=True):
        assert summary_view.endswith(own), summary_view
        assert "Acme Platform" not in described
    for document in bm25_documents(catalog):
        assert "Acme Platform" not in document["description"]


def test_a_preamble_longer_than_a_summary_is_left_out() -> None:
    # The summary is the preamble's first sentence cut short ("...…"), not the sentence.
    long = "This tool is part of the Acme Platform API v3, " + "which serves many teams, " * 20
    catalog = _catalog(OWN, preamble=long.rstrip(", ") + ". ")
    assert catalog.tools[0].summary.endswith("…")
    for (summary_view, _), own in zip(embedding_views(catalog), OWN.values(), strict=True):
        assert summary_view.endswith(own), summary_view


def test_boilerplate_is_split_into_the_sentences_a_summary_is() -> None:
    # One rule for where a sentence ends: the summary did not end one at "e.g.", while the
    # boilerplate's splitter did, so a shared sentence counted as two fragments.
    preamble = "Covers every region, e.g. EU and US. Needs a key. "
    catalog = _catalog(OWN, preamble=preamble)
    assert boilerplate(catalog) == {
        "acme": frozenset({"Covers every region, e.g. EU and US.", "Needs a key."})
    }
    assert [t.summary for t in catalog] == ["Covers every region, e.g. EU and US."] * len(OWN)
    assert [d["description"] for d in bm25_documents(catalog)] == list(OWN.values())

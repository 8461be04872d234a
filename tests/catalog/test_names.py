"""Exposed names: valid for every provider, unique across catalogs, stable under reordering."""

from __future__ import annotations

import json
import random
import re

import pytest

from tests.shared_data import CATALOGS, require
from toolgate._toolgate._testing import analyze_text
from toolgate.catalog.names import assign_exposed_names, name_words, sanitize_name, split_name
from toolgate.errors import InvalidInputError

DATA = CATALOGS
# Written out here from the providers' documentation, independent of toolgate.catalog.names.
OPENAI_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ANTHROPIC_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$")


def _registry_ids() -> list[tuple[str, str]]:
    ids: dict[tuple[str, str], None] = {}
    for name in ("mcpm-registry.jsonl", "docker-mcp-registry.jsonl"):
        path = DATA / name
        require(path)
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            ids[(row["server"], row["name"])] = None
    return list(ids)


def _assert_valid_and_unique(names: list[str]) -> None:
    for name in names:
        assert OPENAI_RE.match(name), name
        assert ANTHROPIC_RE.match(name), name
        assert GEMINI_RE.match(name), name
    folded = [n.casefold() for n in names]
    assert len(set(folded)) == len(folded)


def test_unique_names_keep_their_name() -> None:
    names = assign_exposed_names([("github", "get_me"), ("slack", "post_message")])
    assert names == ["get_me", "post_message"]


def test_colliding_names_are_qualified_by_server() -> None:
    ids = [("github", "search"), ("slack", "search"), ("slack", "post")]
    assert assign_exposed_names(ids) == ["github__search", "slack__search", "post"]


def test_case_only_collisions_are_qualified() -> None:
    names = assign_exposed_names([("a", "Search"), ("b", "search")])
    assert names == ["a__Search", "b__search"]


def test_a_literal_name_does_not_take_a_qualified_name_over() -> None:
    ids = [("github", "search"), ("gitlab", "search"), ("other", "github__search")]
    names = assign_exposed_names(ids)
    assert names == ["github__search", "gitlab__search", "other__github__search"]


def test_a_literal_name_steps_aside_ignoring_case() -> None:
    ids = [("github", "search"), ("gitlab", "search"), ("other", "GitHub__Search")]
    assert assign_exposed_names(ids)[::2] == ["github__search", "other__GitHub__Search"]


def test_qualified_names_that_meet_get_hashed() -> None:
    # Both prefixed by their own server: neither is the other's, so neither keeps it.
    ids = [("a__b", "x"), ("z", "x"), ("a", "b__x"), ("y", "b__x")]
    names = assign_exposed_names(ids)
    _assert_valid_and_unique(names)
    assert names[0].startswith("a__b__x_")
    assert names[2].startswith("a__b__x_")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("nasa/apod", "nasa_apod"),
        ("21st_magic", "_21st_magic"),
        ("-dash", "_-dash"),
        ("chat-with-${AI_NAME}", "chat-with-_AI_NAME"),
        ("math.sum", "math_sum"),
        ("héllo wörld", "h_llo_w_rld"),
        ("///", "tool"),
    ],
)
def test_sanitize_name(raw: str, expected: str) -> None:
    assert sanitize_name(raw) == expected
    assert GEMINI_RE.match(sanitize_name(raw))


def test_long_names_are_cut_with_a_hash() -> None:
    ids = [("s" * 40, "x" * 70), ("t" * 40, "x" * 70), ("u", "y" * 300)]
    names = assign_exposed_names(ids)
    _assert_valid_and_unique(names)
    assert all(len(n) <= 64 for n in names)


def test_always_qualify() -> None:
    assert assign_exposed_names([("gh", "a"), ("sl", "b")], qualify="always") == ["gh__a", "sl__b"]


def test_bad_qualify_is_rejected() -> None:
    with pytest.raises(InvalidInputError, match="qualify"):
        assign_exposed_names([("a", "b")], qualify="sometimes")


def test_real_registries_get_valid_unique_names() -> None:
    ids = _registry_ids()
    assert len(ids) > 7000
    names = assign_exposed_names(ids)
    _assert_valid_and_unique(names)
    # Names that were unique and already valid are left alone.
    counts: dict[str, int] = {}
    for _, name in ids:
        counts[name.casefold()] = counts.get(name.casefold(), 0) + 1
    for (_, name), exposed in zip(ids, names, strict=True):
        if counts[name.casefold()] == 1 and GEMINI_RE.match(name) and OPENAI_RE.match(name):
            assert exposed == name


def test_assignment_does_not_depend_on_order() -> None:
    ids = _registry_ids()
    reference = dict(zip(ids, assign_exposed_names(ids), strict=True))
    shuffled = ids[:]
    random.Random(7).shuffle(shuffled)
    again = dict(zip(shuffled, assign_exposed_names(shuffled), strict=True))
    assert again == reference


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("getRepo_file.contents", ["get", "Repo", "file", "contents"]),
        ("slack/post-message", ["slack", "post", "message"]),
        ("__HTTP2Get__", ["HTTP2", "Get"]),
        ("a: b\tc", ["a", "b", "c"]),
        ("___", []),
        # An acronym ends before its last capital when a word follows, as BM25 reads names.
        ("getHTTPResponse", ["get", "HTTP", "Response"]),
        ("getVRGame", ["get", "VR", "Game"]),
        ("checkDNSRecord", ["check", "DNS", "Record"]),
        ("AppyPieAIAppBuilder", ["Appy", "Pie", "AI", "App", "Builder"]),
        # A plural acronym stays one word.
        ("listAPIs", ["list", "APIs"]),
        ("instanceIDs", ["instance", "IDs"]),
        # Capitals and lower-case letters of any script, as BM25 reads names.
        ("getÜbersicht", ["get", "Übersicht"]),
        ("ÉtatCivil_äußern", ["État", "Civil", "äußern"]),
        ("создатьЗадачу", ["создать", "Задачу"]),
        ("открытьЖКХСчёт", ["открыть", "ЖКХ", "Счёт"]),
        ("λήψηΚαιρού", ["λήψη", "Καιρού"]),
        ("東京Weather", ["東京Weather"]),  # no case in Han: nothing ends before the capital
    ],
)
def test_name_words_split_on_separators_and_camel_case(name: str, words: list[str]) -> None:
    assert name_words(name, keep_case=True) == words
    assert name_words(name) == [word.lower() for word in words]
    assert split_name(name) == " ".join(word.lower() for word in words)


@pytest.mark.parametrize("name", ["getÜbersicht", "ÉtatCivil", "создатьЗадачу", "λήψηΚαιρού"])
def test_a_name_s_words_in_any_script_are_the_bm25_analyser_s(name: str) -> None:
    # The analyser yields a split word's parts, then the word whole (these stem to themselves).
    words = name_words(name)
    assert analyze_text(name, keep_stop_words=True) == [*words, "".join(words)]

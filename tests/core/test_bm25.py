"""BM25: tokenizer, scores against a pure-Python reference, name look-ups, files, bad input."""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import snowballstemmer
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.shared_data import CATALOGS, require
from toolgate._toolgate import Bm25
from toolgate._toolgate._testing import analyze_text
from toolgate.errors import IndexFormatError, InvalidInputError

# The documented stop-word list, restated here so a change to it is a visible decision.
_STOP_WORD_TEXT = (
    "a an and are as at be been but by can could do does for from had has have how i if in into "
    "is it its me my of on or our please should so that the their them then there these they "
    "this those to was we were what when where which who will with would you your"
)
STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())


def _split_identifier(word: str) -> list[str]:
    parts: list[str] = []
    current = word[0]
    for i in range(1, len(word)):
        prev, cur = word[i - 1], word[i]
        nxt = word[i + 1] if i + 1 < len(word) else ""
        boundary = (
            (prev.islower() and cur.isupper())
            or (prev.isupper() and cur.isupper() and nxt.islower())
            or (prev.isnumeric() != cur.isnumeric())
        )
        if boundary:
            parts.append(current)
            current = cur
        else:
            current += cur
    parts.append(current)
    return parts


_ENGLISH = snowballstemmer.stemmer("english")


def _stem(word: str) -> str:
    # An independent implementation of the same algorithm (snowballstemmer 2.x: Snowball 2's
    # English stemmer, as in rust-stemmers; Snowball 3 changed step 1b, `adding` -> `add`).
    if not (word.isascii() and word.isalpha()):
        return word
    return str(_ENGLISH.stemWord(word))


# Han, kana and Hangul (with their half-width and compatibility forms): runs of them are
# indexed as character pairs.
_CJK = re.compile(
    "([\u1100-\u11ff\u3005\u3007\u3040-\u30ff\u3131-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff66-\uffdc"
    "\U00020000-\U000323af]+)"
)


def _word_terms(word: str) -> list[str]:
    """The raw (not yet lower-cased) terms of one word: its CJK runs' pairs, and its other
    runs' identifier parts (and the run itself when it splits)."""
    out: list[str] = []
    for run in _CJK.split(word):
        if not run:
            continue
        if _CJK.fullmatch(run):
            out += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
        else:
            parts = _split_identifier(run)
            out += parts + ([run] if len(parts) > 1 else [])
    return out


def ref_terms(text: str, *, keep_stop_words: bool = False) -> list[str]:
    """The documented analysis pipeline, written independently of the Rust code."""
    out: list[str] = []
    word = ""
    for ch in unicodedata.normalize("NFKC", text) + " ":
        if ch.isalnum() or unicodedata.category(ch).startswith("M"):
            word += ch
            continue
        if word:
            for raw in _word_terms(word):
                lower = (
                    raw.lower()
                    .replace("ß", "ss")
                    .replace("i\u0307", "i")
                    .replace("\u03c2", "\u03c3")
                )  # final sigma as sigma
                if keep_stop_words or lower not in STOP_WORDS:
                    out.append(_stem(lower))
        word = ""
    return out


FIELDS = ("name", "description", "param_text", "server")
WEIGHT_KEYS = ("name", "description", "params", "server")


def ref_scores(
    docs: Sequence[dict[str, str]],
    query: str,
    *,
    k1: float = 1.2,
    b: float = 0.75,
    weights: dict[str, float] | None = None,
) -> np.ndarray:
    """BM25F with field-weighted term frequencies (a term counting at most twice per field)
    and lengths (every occurrence), in float64."""
    w = {"name": 3.0, "description": 1.0, "params": 1.0, "server": 1.0, **(weights or {})}
    tfs: list[Counter[str]] = []
    lengths: list[float] = []
    for doc in docs:
        tf: Counter[str] = Counter()
        length = 0.0
        for field, key in zip(FIELDS, WEIGHT_KEYS, strict=True):
            if w[key] == 0:
                continue
            counts = Counter(ref_terms(doc.get(field, "")))
            for term, count in counts.items():
                tf[term] += w[key] * min(count, 2)  # type: ignore[assignment]
                length += w[key] * count
        tfs.append(tf)
        lengths.append(length)
    n = len(docs)
    avg = sum(lengths) / n if n else 0.0
    scores = np.zeros(n)
    for term in set(ref_terms(query)):
        df = sum(1 for tf in tfs if tf[term] > 0)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for row, tf in enumerate(tfs):
            f = tf[term]
            if f > 0:
                rel = lengths[row] / avg if avg > 0 else 1.0
                scores[row] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * rel))
    return scores


SMALL_CORPUS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "server": "wx",
        "param_text": "city Name of the city. units Celsius or Fahrenheit.",
    },
    {
        "name": "getForecast",
        "description": "Weather forecast for the next days.",
        "server": "wx",
        "param_text": "city days Number of days.",
    },
    {
        "name": "send_message",
        "description": "Send a Slack message to a channel.",
        "server": "slack",
        "param_text": "channel Channel id. text Message text.",
    },
    {
        "name": "listIssues",
        "description": "List issues in a GitHub repository.",
        "server": "github",
        "param_text": "owner repo state open or closed",
    },
    {
        "name": "create_issue",
        "description": "Create an issue in a GitHub repository.",
        "server": "github",
        "param_text": "owner repo title body labels",
    },
    {"name": "search", "description": "Search the web.", "server": "web", "param_text": "query"},
    {
        "name": "getHTTPResponse",
        "description": "Fetch a URL over HTTP(S).",
        "server": "net",
        "param_text": "url headers",
    },
    {
        "name": "s3_put_object",
        "description": "Upload an object to an S3 bucket.",
        "server": "aws",
        "param_text": "bucket key body",
    },
    {
        "name": "météo_du_jour",
        "description": "Prévisions météo en français.",
        "server": "fr",
        "param_text": "ville",
    },
    {"name": "empty_tool"},
]

QUERIES = [
    "weather in Paris",
    "what is the weather forecast for the next 3 days",
    "send a message to the #general channel on slack",
    "list open issues in my github repos",
    "create an issue titled bug",
    "get http response",
    "put an object into s3 bucket",
    "météo",
    "the of and",
    "",
    "weather weather weather",
]


@pytest.fixture(scope="module")
def small() -> Bm25:
    return Bm25.build(SMALL_CORPUS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("get_weather", ["get", "weather"]),
        ("getWeather", ["get", "weather", "getweath"]),
        ("getHTTPResponse", ["get", "http", "respons", "gethttprespons"]),
        ("list-files.v2/all", ["list", "file", "v", "2", "v2", "all"]),
        ("ipv4Address", ["ipv", "4", "address", "ipv4address"]),
        ("GitHub", ["git", "hub", "github"]),
        ("Entries, boxes and matches", ["entri", "box", "match"]),
        ("translating translations", ["translat", "translat"]),
        ("status analysis access", ["status", "analysi", "access"]),
        ("ÉtatCivil", ["état", "civil", "étatcivil"]),
        ("東京 weather", ["東京", "weather"]),
        # CJK runs index as their character pairs; a lone character as itself.
        ("北京明天的天气", ["北京", "京明", "明天", "天的", "的天", "天气"]),
        ("天気予報をgetWeather", ["天気", "気予", "予報", "報を", "get", "weather", "getweath"]),
        ("에어컨을 켜", ["에어", "어컨", "컨을", "켜"]),
        # NFKC first: NFD accents and full-width forms meet their usual forms; a combining
        # mark stays in its word; sharp s folds to "ss". (Full-width "iPhone15", escaped.)
        (
            "cafe\u0301 \uff49\uff30\uff48\uff4f\uff4e\uff45\uff11\uff15",
            ["café", "phone", "15", "iphone15"],
        ),
        ("ช่วย नमस्ते", ["ช่วย", "नमस्ते"]),
        ("Straße STRAẞE", ["strass", "strass"]),
        # The capital dotted I lower-cases to i and a combining dot: the dot goes.
        ("İSTANBUL İzmir", ["istanbul", "izmir"]),
        # Final sigma folds to sigma, as case folding does: a Greek word in capitals
        # lower-cases to a sigma at its end, and must meet the final sigma it is written with.
        ("\u039f\u0394\u039f\u03a3 \u03bf\u03b4\u03bf\u03c2", ["\u03bf\u03b4\u03bf\u03c3"] * 2),
        ("the of and", []),
        ("", []),
    ],
)
def test_analysis_cases(text: str, expected: list[str]) -> None:
    assert analyze_text(text) == expected
    assert ref_terms(text) == expected


def test_analysis_keeps_stop_words_on_request() -> None:
    assert analyze_text("list_all_the_files", keep_stop_words=True) == [
        "list",
        "all",
        "the",
        "file",
    ]
    assert ref_terms("list_all_the_files", keep_stop_words=True) == ["list", "all", "the", "file"]


# Any text, but characters this Python's Unicode database does not assign yet (the Rust
# tables may be newer) and lone surrogates (not valid UTF-8).
_ANY_TEXT = st.text(st.characters(exclude_categories=["Cn", "Cs"]), max_size=30)
_WORDS = [
    "getWeather",
    "cafe\u0301",
    "İzmir",
    "Straße",
    "北京天气",
    "\uff49\uff30\uff48\uff4f\uff4e\uff45",
]
_WORDS += ["\u01c5", "\u039f\u0394\u039f\u03a3", "\u03bf\u03b4\u03bf\u03c2"]  # ǅ, Greek


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(st.one_of(_ANY_TEXT, st.lists(st.sampled_from(_WORDS), max_size=6).map(" ".join)))
def test_analysis_matches_reference_on_generated_text(text: str) -> None:
    assert analyze_text(text) == ref_terms(text)
    assert analyze_text(text, keep_stop_words=True) == ref_terms(text, keep_stop_words=True)


def test_greek_in_capitals_meets_greek_in_lower_case() -> None:
    # "Road" written as it is in a description, and typed in capitals in a request.
    road, capitals = "\u03bf\u03b4\u03bf\u03c2", "\u039f\u0394\u039f\u03a3"
    index = Bm25.build([{"name": "route", "description": road}, {"name": "other"}])
    assert index.scores(capitals)[0] > 0
    np.testing.assert_array_equal(index.scores(capitals), index.scores(road))


def test_analysis_matches_reference_on_real_text() -> None:
    texts = [d.get(f, "") for d in SMALL_CORPUS for f in FIELDS] + QUERIES
    path = CATALOGS / "docker-mcp-registry.jsonl"
    if path.exists():
        with path.open(encoding="utf-8") as fh:
            for line in itertools.islice(fh, 400):
                tool = json.loads(line)
                texts += [tool["name"], tool.get("description") or ""]
    for text in texts:
        assert analyze_text(text) == ref_terms(text), text


@pytest.mark.parametrize("query", QUERIES)
def test_scores_match_reference(small: Bm25, query: str) -> None:
    got = small.scores(query)
    assert got.dtype == np.float32
    assert got.shape == (len(SMALL_CORPUS),)
    np.testing.assert_allclose(got, ref_scores(SMALL_CORPUS, query), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("k1", "b", "weights"),
    [
        (0.0, 0.0, None),
        (2.0, 1.0, None),
        (1.2, 0.75, {"name": 1.0, "params": 0.0}),
        (0.9, 0.4, {"name": 5.0, "description": 2.0, "params": 0.5, "server": 0.0}),
    ],
)
def test_parameters_match_reference(k1: float, b: float, weights: dict[str, float] | None) -> None:
    index = Bm25.build(SMALL_CORPUS, k1=k1, b=b, field_weights=weights)
    assert index.k1 == pytest.approx(k1)
    assert index.b == pytest.approx(b)
    for query in QUERIES:
        want = ref_scores(SMALL_CORPUS, query, k1=k1, b=b, weights=weights)
        np.testing.assert_allclose(index.scores(query), want, rtol=1e-5, atol=1e-6)


def _catalog(limit: int) -> list[dict[str, str]]:
    path = CATALOGS / "docker-mcp-registry.jsonl"
    require(path)
    docs = []
    with path.open(encoding="utf-8") as fh:
        for line in itertools.islice(fh, limit):
            tool = json.loads(line)
            props = (tool.get("inputSchema") or {}).get("properties") or {}
            params = " ".join(f"{k} {v.get('description', '')}" for k, v in props.items())
            docs.append(
                {
                    "name": tool["name"],
                    "description": tool.get("description") or "",
                    "param_text": params,
                    "server": tool["server"],
                }
            )
    return docs


def test_scores_match_reference_on_a_real_catalog() -> None:
    docs = _catalog(300)
    index = Bm25.build(docs)
    for query in [
        "send an sms",
        "list github pull requests",
        "query the postgres database",
        "create_issue in repo",
        "browser screenshot of a page",
    ]:
        np.testing.assert_allclose(
            index.scores(query), ref_scores(docs, query), rtol=1e-5, atol=1e-6
        )


def test_tuple_documents_equal_dict_documents(small: Bm25) -> None:
    tuples = [tuple(d.get(f, "") for f in FIELDS) for d in SMALL_CORPUS]
    index = Bm25.build(tuples)
    for query in QUERIES:
        np.testing.assert_array_equal(index.scores(query), small.scores(query))
    short = Bm25.build([("get_weather",), ("send_message", "Send a message")])
    assert len(short) == 2


def test_name_has_term(small: Bm25) -> None:
    assert small.name_has_term("slack").tolist() == [2]  # the server is part of the id
    assert small.name_has_term("issue").tolist() == [3, 4]
    assert small.name_has_term("Issues").tolist() == [3, 4]
    assert small.name_has_term("github_issue").tolist() == [3, 4]
    assert small.name_has_term("weather").tolist() == [0]
    assert small.name_has_term("forecast").dtype == np.uint32
    assert small.name_has_term("nothing").tolist() == []
    with pytest.raises(InvalidInputError, match="no letter or digit"):
        small.name_has_term("+-")


def test_rows_named(small: Bm25) -> None:
    assert small.rows_named("get_weather") == [0]
    assert small.rows_named("wx/getForecast") == [1]
    assert small.rows_named("GETFORECAST") == [1]
    assert small.rows_named("getforecast") == [1]
    assert small.rows_named("weather") == []
    duplicated = Bm25.build(
        [
            {"name": "search", "server": "a"},
            {"name": "search", "server": "b"},
            {"name": "Search", "server": "c"},
        ]
    )
    assert duplicated.rows_named("search") == [0, 1]
    assert duplicated.rows_named("SEARCH") == [0, 1, 2]
    assert duplicated.rows_named("b/search") == [1]


@pytest.mark.parametrize(
    ("query", "rows"),
    [
        ("call get_weather for Paris", [0]),
        ("Use `getForecast` then send_message.", [1, 2]),
        ("run GET_WEATHER(city='Oslo')", [0]),
        ("github/create_issue: title is bug", [4]),
        ("search the web for weather", []),  # one-word names are plain English
        ("Search", [5]),  # ... unless the query is nothing but the name
        ("  getHTTPResponse?", [6]),
        ("get weather for Paris", []),
        ("get_weathers", []),
    ],
)
def test_mentioned_names(small: Bm25, query: str, rows: list[int]) -> None:
    assert small.mentioned_names(query) == rows


def test_mentions_among_ten_thousand_names() -> None:
    docs = [{"name": f"tool_{i}_action", "server": f"s{i % 97}"} for i in range(10_000)]
    index = Bm25.build(docs)
    assert index.mentioned_names("please run tool_9999_action and tool_17_action") == [17, 9999]
    assert index.mentioned_names("s3/tool_3_action") == [3]
    assert index.mentioned_names("s4/tool_3_action") == []


def test_exposed_names_are_named_and_mentioned_and_given_again_at_load(tmp_path: Path) -> None:
    exposed = [(0, "wx__get_weather"), (5, "web_search"), (1, "getForecast")]
    index = Bm25.build(SMALL_CORPUS, exposed_names=exposed)
    assert index.mentioned_names("use WX__GET_WEATHER, then **web_search**.") == [0, 5]
    # An exposed name is the model's word for the tool: one plain word counts too.
    index = Bm25.build(SMALL_CORPUS, exposed_names=[(5, "websearch")])
    assert index.mentioned_names("run websearch for news") == [5]
    assert index.rows_named("WebSearch") == [5]
    assert index.rows_named("search") == [5], "the tool's own name still names it"
    index.save(tmp_path / "b.bm25")
    assert Bm25.load(tmp_path / "b.bm25").mentioned_names("run websearch for news") == []
    loaded = Bm25.load(tmp_path / "b.bm25", exposed_names=((5, "websearch"),))
    assert loaded.mentioned_names("run websearch for news") == [5]


@pytest.mark.parametrize(
    ("exposed", "message"),
    [
        ([(99, "x")], "exposed name of row 99, but the index has 10 documents"),
        ([(1, "a"), (1, "b")], "row 1 has two exposed names"),
        ([(2, "")], "row 2 has an empty exposed name"),
        ([(-1, "x")], r"exposed_names\[0\] must be a \(row, name\) pair"),
        ([(0, "x"), ("1", "y")], r"exposed_names\[1\] must be a \(row, name\) pair"),
        ("web_search", r"exposed_names must be a sequence of \(row, name\) pairs, got str"),
        (7, r"exposed_names must be a sequence of \(row, name\) pairs, got int"),
    ],
)
def test_bad_exposed_names_are_named(exposed: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Bm25.build(SMALL_CORPUS, exposed_names=exposed)  # type: ignore[arg-type]


def test_save_load_round_trip(small: Bm25, tmp_path: Path) -> None:
    path = tmp_path / "tools.bm25"
    small.save(path)
    small.save(str(path))  # overwrite in place, through a str path
    loaded = Bm25.load(path)
    assert len(loaded) == len(small)
    assert loaded.field_weights == small.field_weights
    for query in QUERIES:
        np.testing.assert_array_equal(loaded.scores(query), small.scores(query))
    assert loaded.rows_named("slack/send_message") == [2]
    assert loaded.mentioned_names("try s3_put_object") == [7]
    assert loaded.name_has_term("github").tolist() == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tools.bm25"]


def test_empty_index_round_trip(tmp_path: Path) -> None:
    index = Bm25.build([])
    assert len(index) == 0
    assert index.scores("anything").shape == (0,)
    index.save(tmp_path / "empty.bm25")
    assert len(Bm25.load(tmp_path / "empty.bm25")) == 0


@pytest.fixture
def saved(small: Bm25, tmp_path: Path) -> Path:
    path = tmp_path / "tools.bm25"
    small.save(path)
    return path


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:0], "truncated"),
        (lambda b: b[:20], "truncated"),
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\0", "trailing bytes"),
        (lambda b: b"XXXXXXXX" + b[8:], "wrong magic"),
        (lambda b: b[:8] + (99).to_bytes(4, "little") + b[12:], "version 99"),
        # Version 1 stored plural-stripped terms: refused, with the way out.
        (lambda b: b[:8] + (1).to_bytes(4, "little") + b[12:], "rebuild the router"),
        (lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], "checksum mismatch"),
    ],
)
def test_damaged_files_raise_format_errors(saved: Path, damage: object, message: str) -> None:
    assert callable(damage)
    saved.write_bytes(damage(saved.read_bytes()))
    with pytest.raises(IndexFormatError, match=message) as err:
        Bm25.load(saved)
    assert str(saved) in str(err.value)


def _as_version_2(path: Path) -> None:
    """Rewrite the version field of the index file ``path`` to 2 (the checksum covers only
    the payload, which versions 2 to 4 lay out alike)."""
    data = path.read_bytes()
    path.write_bytes(data[:8] + (2).to_bytes(4, "little") + data[12:])


# Written by the version 2 analyser (commit bac152d): Bm25.build of [weather_forecast
# "Weather forecast.", 天気予報 "天気予報を取得します。"], saved.
_OLD_CJK_FILE = Path(__file__).parent.parent / "fixtures" / "bm25" / "v2-cjk.bm25"


def test_older_files_load_when_their_terms_analyse_alike(small: Bm25, tmp_path: Path) -> None:
    # The ASCII terms, and "météo" (NFC already), analyse as they did in version 2.
    path = tmp_path / "latin.bm25"
    small.save(path)
    _as_version_2(path)
    np.testing.assert_array_equal(Bm25.load(path).scores("weather"), small.scores("weather"))


def test_older_files_with_terms_analysed_otherwise_are_refused() -> None:
    # Version 2 kept a CJK run whole: such a file would miss every CJK query analysed now
    # as pairs, and is refused with the way out.
    with pytest.raises(IndexFormatError, match=r'the term "天気予報".*rebuild the router'):
        Bm25.load(_OLD_CJK_FILE)


def test_older_files_with_words_split_at_digits_load(tmp_path: Path) -> None:
    # Version 2 indexed "café2" as café, 2 and café2, as this build does: the whole word
    # analyses to its parts and itself now, and the file still reads alike.
    index = Bm25.build([{"name": "order", "description": "Café2 Ärzte24"}])
    path = tmp_path / "digits.bm25"
    index.save(path)
    _as_version_2(path)
    np.testing.assert_array_equal(Bm25.load(path).scores("café2"), index.scores("café2"))


# Written by the version 5 analyser (commit 37d64e2): Bm25.build of [route "οδος" (Greek
# "road", with its final sigma)], saved.
_OLD_GREEK_FILE = Path(__file__).parent.parent / "fixtures" / "bm25" / "v5-greek.bm25"


def test_older_files_with_a_final_sigma_are_refused() -> None:
    # Version 5 kept a final sigma, which a request typed in capitals never met: the file
    # is refused with the way out, not read to miss queries analysed now.
    with pytest.raises(IndexFormatError, match=r"version 5 holds the term .*rebuild the router"):
        Bm25.load(_OLD_GREEK_FILE)


@pytest.mark.parametrize("fragments", ["ช วย", "नमस ते"], ids=["thai", "devanagari"])
def test_older_files_of_words_cut_at_marks_are_refused(fragments: str, tmp_path: Path) -> None:
    # Version 2 cut "ช่วย" at its tone mark and "नमस्ते" at its virama: each fragment
    # analyses to itself, yet no query analysed now (whole words) meets them.
    path = tmp_path / "marks.bm25"
    Bm25.build([{"name": "help", "description": fragments}]).save(path)
    _as_version_2(path)
    with pytest.raises(IndexFormatError, match=r"version 2 .*rebuild the router"):
        Bm25.load(path)


def test_cjk_queries_meet_cjk_descriptions(tmp_path: Path) -> None:
    # No spaces in the request: it meets the tool through the character pairs they share.
    index = Bm25.build(
        [
            {"name": "get_weather", "description": "查询指定城市的天气预报"},
            {"name": "book_train", "description": "预订火车票"},
        ]
    )
    scores = index.scores("帮我查一下北京明天的天气")
    assert scores[0] > 0
    assert scores[1] == 0
    assert index.scores("我想买明天去杭州的火车票")[1] > 0


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"nope\.bm25"):
        Bm25.load(tmp_path / "nope.bm25")


def test_saving_into_a_missing_directory_fails_cleanly(small: Bm25, tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"dir\.bm25"):
        small.save(tmp_path / "no" / "such" / "dir.bm25")


@pytest.mark.parametrize(
    ("docs", "kwargs", "message"),
    [
        ([{"description": "x"}], {}, r"docs\[0\] has no \"name\""),
        ([{"name": "a"}, {"name": "b", "params": "x"}], {}, r"docs\[1\] has unknown key"),
        ([{"name": 3}], {}, r"docs\[0\]\[\"name\"\] must be a str, got int"),
        ([{"name": "a\udc80"}], {}, r"docs\[0\]\[\"name\"\] is not valid Unicode"),
        ([("a", "b", "c", "d", "e")], {}, "tuple of 5 items"),
        (["get_weather"], {}, r"docs\[0\] must be a dict or a tuple, got str"),
        ("get_weather", {}, "docs must be a sequence"),
        (5, {}, "docs must be a sequence"),
        ([{"name": "  "}], {}, "document 0 has an empty name"),
        ([{"name": "a"}], {"b": 1.5}, r"b must be in \[0, 1\]"),
        ([{"name": "a"}], {"k1": -1.0}, "k1 must be finite"),
        ([{"name": "a"}], {"k1": float("nan")}, "k1 must be finite"),
        ([{"name": "a"}], {"field_weights": {"title": 2.0}}, 'unknown field "title"'),
        ([{"name": "a"}], {"field_weights": (3.0, 1.0)}, "field_weights must be a dict"),
        ([{"name": "a"}], {"field_weights": {"name": -2.0}}, 'field weight "name"'),
        (
            [{"name": "a"}],
            {"field_weights": {"name": 0, "description": 0, "params": 0, "server": 0}},
            "at least one field weight",
        ),
    ],
)
def test_bad_input_is_rejected(docs: object, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Bm25.build(docs, **kwargs)  # type: ignore[arg-type]


def test_threads_share_one_index() -> None:
    docs = _catalog(2000)
    index = Bm25.build(docs)
    queries = [
        "send an sms",
        "list github pull requests",
        "query the postgres database",
        "browser screenshot",
        "create a calendar event",
        "upload a file to s3",
    ]
    expected = {q: index.scores(q) for q in queries}
    failures: list[str] = []

    def work(seed: int) -> None:
        for i in range(60):
            q = queries[(seed + i) % len(queries)]
            if not np.array_equal(index.scores(q), expected[q]):
                failures.append(q)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []

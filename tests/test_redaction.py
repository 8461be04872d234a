"""URLs cut down for logs: no key from a query string, a path or user info gets through."""

from __future__ import annotations

import logging

import pytest
import re2  # type: ignore[import-untyped]

from toolgate.redaction import (
    UrlRedactor,
    _url_pattern,
    redact_logged_urls,
    redact_urls,
    redacted_url,
)


@pytest.mark.parametrize(
    ("url", "cut"),
    [
        ("http://127.0.0.1:9/mcp?api_key=KEY", "http://127.0.0.1:9/..."),
        ("https://mcp.example.com/sk-KEY/mcp", "https://mcp.example.com/..."),
        ("https://user:KEY@mcp.example.com/", "https://mcp.example.com/"),
        ("https://mcp.example.com?key=KEY", "https://mcp.example.com/..."),
        ("http://[::1]:8080", "http://[::1]:8080"),
    ],
)
def test_a_url_keeps_its_scheme_and_host_alone(url: str, cut: str) -> None:
    assert redacted_url(url) == cut


@pytest.mark.parametrize(
    "url",
    [
        "https://bob:pa'ss@mcp.example.com/sk-KEY/mcp",  # a quote is allowed in user info
        'https://u:p"w@mcp.example.com/',
        # A quote before a character no path or query string takes after one: the user
        # info was left whole, and with it the path and the query string after it.
        "https://bob:pa'!KEY@mcp.example.com/sk-KEY/mcp",
        "https://bob:pa':KEY@mcp.example.com/sk-KEY/mcp",
        "https://bob:pa''KEY@mcp.example.com/sk-KEY/mcp",
        "https://mcp.example.com/mcp?api_key=ab'KEY",  # and in a query string
    ],
)
def test_a_quote_inside_a_url_does_not_end_it(url: str) -> None:
    logged = redact_urls(f'HTTP Request: POST {url} "HTTP/1.1 200 OK"')
    assert logged.startswith("HTTP Request: POST https://mcp.example.com/")
    assert not any(secret in logged for secret in ("KEY", "bob", 'p"w'))
    assert logged.endswith(' "HTTP/1.1 200 OK"')


@pytest.mark.parametrize(
    "query",
    [
        "q='!&token=KEY",  # a quote, then punctuation, then the rest of the query string
        "q=it's!&token=KEY",
        "q=a'(b)&token=KEY",
        "q=a';&token=KEY",
        "q=a'.&token=KEY",
        "q=a'?token=KEY",
        "q=a'#token=KEY",
        "q=a'',&token=KEY",
        "q=a'!'&token=KEY",
    ],
)
def test_a_quote_then_punctuation_in_a_query_string_does_not_end_the_url(query: str) -> None:
    # A quote ended the URL unless a letter or one of % & = + / ~ * $ @ - followed it: the
    # rest of the query string, with its token, was left in the log.
    logged = redact_urls(
        f'HTTP Request: POST https://mcp.example.com/mcp?{query} "HTTP/1.1 200 OK"'
    )
    assert logged == 'HTTP Request: POST https://mcp.example.com/... "HTTP/1.1 200 OK"'
    assert redacted_url(f"https://mcp.example.com/mcp?{query}", keep_path=True) == (
        "https://mcp.example.com/mcp?..."
    )


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("see 'https://h.example/sk-1'.", "see 'https://h.example/...'."),
        ("URL('https://h.example/sk-1'), next", "URL('https://h.example/...'), next"),
        ('{"url": "https://h.example/sk-1"}', '{"url": "https://h.example/..."}'),
        (
            "['https://a.example/sk-1','https://b.example/sk-2']",
            "['https://a.example/...','https://b.example/...']",
        ),
        ('<a href="https://h.example/sk-1">x</a>', '<a href="https://h.example/...">x</a>'),
    ],
)
def test_a_quote_closing_a_string_after_a_path_ends_the_url(text: str, cut: str) -> None:
    assert redact_urls(text) == cut


@pytest.mark.parametrize(
    "text",
    [
        '{"url":"https://api.example.com","owner":"ann@example.com"}',  # compact JSON
        "servers=['https://api.example.com','ann@example.com']",
        '[{"url":"https://api.example.com"},{"owner":"ann@example.com"}]',
        '{\\"url\\":\\"https://api.example.com\\",\\"owner\\":\\"ann@example.com\\"}',
    ],
)
def test_a_quote_closing_a_string_ends_the_url_before_any_later_at(text: str) -> None:
    # User info ran to the last '@' across the closing quote: the next field was swallowed
    # as the URL's user info, and the host logged was the e-mail address's.
    assert redact_urls(text) == text


def test_a_url_may_keep_its_path_but_not_its_query_string() -> None:
    url = "https://generativelanguage.googleapis.com/v1beta/models?key=KEY#part"
    assert redacted_url(url, keep_path=True) == (
        "https://generativelanguage.googleapis.com/v1beta/models?..."
    )


@pytest.mark.parametrize(
    "url",
    [
        # A secret file's last newline, kept by ${VAR} expansion in a server's config.
        "https://mcp.example.com/mcp?api_key=KEY\n",
        "https://mcp.example.com/x?ids='1','2'&key=KEY",  # a quote, a comma and a quote
        "https://mcp.example.com/x?key=K EY",
        "https://mcp.example.com/x?key=K<EY",
        " https://mcp.example.com/x?key=KEY",
    ],
)
@pytest.mark.parametrize("keep_path", [False, True])
def test_a_url_not_read_whole_is_cut_all_the_same(url: str, keep_path: bool) -> None:
    # Read as no URL, it came back whole, key and all (a server's config in its repr).
    cut = redacted_url(url, keep_path=keep_path)
    assert "mcp.example.com" in cut
    assert "EY" not in cut


def test_text_that_is_no_url_is_left_as_it_is() -> None:
    assert redacted_url("not a url: /sk-KEY") == "not a url: /sk-KEY"


def test_every_url_in_a_text_is_cut_and_the_text_kept() -> None:
    text = "Redirect to 'https://a.example/sk-1' from http://b.example/mcp?k=2 not followed"
    assert redact_urls(text) == (
        "Redirect to 'https://a.example/...' from http://b.example/... not followed"
    )


def _record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord("httpx2", logging.INFO, __file__, 1, message, args, exc_info)


def test_the_filter_cuts_urls_in_a_records_arguments_and_keeps_the_record() -> None:
    record = _record('HTTP Request: %s %s "%s"', "POST", "http://h.example/sk-KEY/mcp", "200")
    assert UrlRedactor().filter(record)
    assert record.getMessage() == 'HTTP Request: POST http://h.example/... "200"'


def test_the_filter_cuts_urls_in_a_records_exception() -> None:
    record = _record("failed", exc=RuntimeError("for url 'http://h.example/mcp?api_key=KEY'"))
    UrlRedactor().filter(record)
    assert "KEY" not in logging.Formatter().format(record)


def test_a_message_its_arguments_do_not_fit_is_cut_without_them() -> None:
    record = _record("%s %s", "http://h.example/sk-KEY")
    UrlRedactor().filter(record)
    assert record.getMessage() == "%s %s"


def test_the_filter_is_added_to_a_logger_once() -> None:
    name = "tests.redaction.once"
    redact_logged_urls(name)
    redact_logged_urls(name)
    assert len(logging.getLogger(name).filters) == 1


def test_urls_are_found_by_an_engine_linear_in_the_text() -> None:
    # Python's re backtracks: read as a scheme from each of its letters, a run of 40,000
    # letters (the MCP SDK's "Unknown SSE event: <name>") took 27 s, and a quote's lookahead
    # reads on past it. RE2 matches in time linear in the text, whatever the pattern.
    pattern, _ = _url_pattern()
    assert isinstance(pattern, type(re2.compile("")))


@pytest.mark.parametrize(
    "run",
    [
        "a" * 30_000,  # a long run of letters
        "a://" * 7_500,  # of schemes
        "'" * 30_000,  # of quotes
        "https://h.example/" + "'!" * 15_000 + "&token=KEY",  # of quotes staying in a URL
        "https://" + "'," * 15_000 + "@h.example",  # of user info
    ],
)
def test_a_long_run_is_read_to_its_end(run: str) -> None:
    text = f"Unknown SSE event: {run} then https://h.example/sk-KEY"
    cut = redact_urls(text)
    assert cut.endswith(" then https://h.example/...")
    assert "KEY" not in cut


def test_a_lone_surrogate_is_read_and_written_back() -> None:
    # RE2 reads UTF-8, which a lone surrogate (a file name decoded with surrogateescape) has
    # none of: the text may hold one, in a URL or out of it.
    text = "open '/tmp/\udcff' for https://h.example\udcff/sk-KEY\udcff"
    assert redact_urls(text) == "open '/tmp/\udcff' for https://h.example\udcff/..."
    assert redacted_url("https://h.example/\udcff?k=KEY", keep_path=True) == (
        "https://h.example/\udcff?..."
    )

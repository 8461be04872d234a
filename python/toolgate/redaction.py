"""URLs cut down for logs: a URL may hold a key, which nothing toolgate logs may hold.

Keys ride in URLs in three places: the query string (Gemini's ``?key=``, a hosted MCP
server's ``?api_key=``), the path (``https://mcp.example.com/sk-.../mcp``) and the user
info (``https://user:password@host/``). :func:`redacted_url` keeps the scheme and the host
(and, with ``keep_path``, the path) and puts ``...`` in place of the rest;
:class:`UrlRedactor` does it to every URL in the records of the loggers it filters, such as
httpx's ``HTTP Request: POST <url> "HTTP/1.1 200 OK"`` lines at INFO.

>>> redacted_url("https://user:pw@mcp.example.com:8443/sk-123/mcp?api_key=abc")
'https://mcp.example.com:8443/...'
>>> redacted_url("https://generativelanguage.googleapis.com/v1beta/models?key=abc", keep_path=True)
'https://generativelanguage.googleapis.com/v1beta/models?...'
>>> redact_urls("POST http://127.0.0.1:9/mcp?api_key=abc failed")
'POST http://127.0.0.1:9/... failed'
"""

from __future__ import annotations

import logging
import re
from functools import cache
from typing import Any

__all__ = ["UrlRedactor", "redact_logged_urls", "redact_urls", "redacted_url"]

# A URL in running text: it ends at white space or an angle bracket (how messages and reprs
# delimit one), or at a quote closing the string it stands in. Its scheme is read from the
# start of a run of scheme characters (a run starting with a digit is taken whole: "1https").
#
# Quotes may stand in a URL (RFC 3986 allows ' in user info and query strings): a quote
# taken for the URL's end left the rest of its password, path and query string in the log
# (a quote then "!" or "." ended it, and a "?q=a'!&token=..." logged its token). A quote
# closes the string only when what follows it says so: punctuation alone up to white space,
# an angle bracket or the end ("'https://h/x')," ; '"https://h/x"}'), or separators then the
# quote opening the next string ('"https://h","owner":"ann@x"'). User info (which runs to
# the last @ before the path) may hold any quote but the latter: read across, the next
# field of compact JSON was taken for user info, and its host logged.
#
# Deciding a quote looks past it, which Python's re does with lookaheads and backtracking
# (its scheme search had been quadratic on a long run of letters). The pattern is RE2's
# instead, which matches in time linear in the text whatever its input: with no lookahead,
# a quote that goes on is matched with what follows it up to a character that settles it,
# and the text that closes the URL is matched as its "tail" and written back as it was.
_SPACE = r"\t-\r\x1c-\x1f\x85\p{Z}"  # Python's \s (RE2's own is ASCII only)
_QUOTE = "['\"]"
# ASCII punctuation but quotes, angle brackets and "_" (what may follow a closing quote), in
# three kinds: the separators proper between two strings, brackets around them, the rest.
_SEPARATING = ",:"
_BRACKETS = r";(){}\[\]\\"  # with ";" and the "\" of an escaped quote ('\",\"')
_OTHER = r"!#$%&*+./=?@^`|~\-"  # "-" escaped: a class may go on after it
_PUNCTUATION = f"[{_SEPARATING}{_BRACKETS}{_OTHER}]"
_WORD = rf"[^{_SPACE}'\"<>{_SEPARATING}{_BRACKETS}{_OTHER}]"  # letters, digits, "_"...
# A quote then this then a quote: one string closed and the next opened ('","', "'),('").
_BETWEEN_STRINGS = f"[{_BRACKETS}]*[{_SEPARATING}][{_SEPARATING}{_BRACKETS}]*"
# Any other run of punctuation, between two quotes, leaves the first in the URL.
_NOT_BETWEEN = f"(?:[{_BRACKETS}{_OTHER}]*|{_PUNCTUATION}*[{_OTHER}]{_PUNCTUATION}*)"
# A quote closing the string, and what says so: kept out of the URL and written back.
_TAIL = (
    rf"{_QUOTE}(?:[{_SEPARATING}{_BRACKETS}{_OTHER}'\"]*(?:[{_SPACE}<>]|$)"
    f"|{_BETWEEN_STRINGS}{_QUOTE})"
)
# Quotes staying in the URL, each settled by the next, the last by a word character.
_GOES_ON = f"(?:{_QUOTE}{_NOT_BETWEEN})*{_QUOTE}{_PUNCTUATION}*{_WORD}"
# User info: any text but a quote, then separators and brackets, then a quote (after
# quotes and such a run, anything but a quote).
_INFO_OTHER = rf"[^{_SPACE}/?#'\"{_SEPARATING}{_BRACKETS}]"
_INFO_RUN = f"{_QUOTE}+[{_SEPARATING}{_BRACKETS}]*"
_USER_INFO = (
    f"(?:{_INFO_OTHER}|[{_SEPARATING}{_BRACKETS}]|{_INFO_RUN}{_INFO_OTHER})*(?:{_INFO_RUN})?"
)
_URL = (
    r"(?P<scheme>[A-Za-z0-9+.-]+)://"
    rf"(?P<authority>(?:{_USER_INFO}@)?[^{_SPACE}/?#'\"<>]*)"
    rf"(?P<rest>(?:[^{_SPACE}'\"<>]|{_GOES_ON})*)"
    # Quotes settled by a closing one only: the URL's all the same.
    rf"(?:(?P<quoted>(?:{_QUOTE}{_NOT_BETWEEN})*?)(?P<tail>{_TAIL}))?"
)
# A lone surrogate (a file name decoded with surrogateescape) has no UTF-8, which RE2 reads:
# it is read as U+FFFD (one character for one), and the text written back is the original.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_CUT = "..."
# Formats a record's exception the way logging's default formatter does, to redact it.
_FORMATTER = logging.Formatter()


@cache
def _url_pattern() -> tuple[Any, dict[str, int]]:
    """:data:`_URL` compiled by RE2, on first use (importing RE2 costs ``import toolgate``
    tens of milliseconds), and the numbers of its groups (RE2's spans take no name)."""
    import re2  # type: ignore[import-untyped]

    pattern = re2.compile(_URL)
    return pattern, dict(pattern.groupindex)


def redacted_url(url: str, *, keep_path: bool = False) -> str:
    """``url`` as ``scheme://host:port/...``: no user info, and neither path, query string
    nor fragment (with ``keep_path``, the path kept and the rest cut). Text that is no URL
    comes back as it is (with any URL in it cut, as :func:`redact_urls` cuts one)."""
    pattern, read = _url_pattern()[0], _SURROGATE.sub("\ufffd", url)
    if match := pattern.fullmatch(read):
        return _cut(url, match, keep_path=keep_path)
    # A URL not read whole (a secret file's last newline, a quote and a comma in its query
    # string) is one URL all the same: what follows the part read is cut with the rest.
    if match := pattern.match(read):
        cut = _cut(url, match, keep_path=keep_path, tail=False)
        return cut if cut.endswith(_CUT) else f"{cut}{_CUT}"
    return redact_urls(url, keep_path=keep_path)  # text before it: any URL in it is cut


def redact_urls(text: str, *, keep_path: bool = False) -> str:
    """``text`` with each URL in it cut down as :func:`redacted_url` cuts one."""
    if "://" not in text:  # most log records: spares RE2's overhead, tens of microseconds
        return text
    pieces: list[str] = []
    end = 0
    for match in _url_pattern()[0].finditer(_SURROGATE.sub("\ufffd", text)):
        pieces += (text[end : match.start()], _cut(text, match, keep_path=keep_path))
        end = match.end()
    pieces.append(text[end:])
    return "".join(pieces)


def _cut(text: str, match: Any, *, keep_path: bool, tail: bool = True) -> str:
    """The URL ``match`` found in ``text``, cut down; with ``tail``, followed by the text
    closing the string it stood in."""

    def group(name: str) -> str:
        start, end = match.span(_url_pattern()[1][name])
        return text[start:end] if start >= 0 else ""

    host = group("authority").rpartition("@")[2]  # the user info, if any, is dropped
    rest = group("rest") + group("quoted")
    if keep_path:
        path = re.split(r"[?#]", rest, maxsplit=1)[0]
        rest = path if path == rest else f"{path}?{_CUT}"
    elif rest not in ("", "/"):
        rest = f"/{_CUT}"
    return f"{group('scheme')}://{host}{rest}{group('tail') if tail else ''}"


class UrlRedactor(logging.Filter):
    """A logging filter cutting down every URL in a record's message (formatted with its
    arguments) and in its exception's text, as :func:`redact_urls` does; it drops no record.

    The record is changed in place, so every handler sees the redacted text. The exception
    text is set as logging's default formatter writes it (a handler that formats the
    exception itself, ignoring ``exc_text``, is not covered)."""

    def __init__(self, *, keep_path: bool = False) -> None:
        """See the class docstring."""
        super().__init__()
        self.keep_path = keep_path

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record``; keep it."""
        message = _message(record)
        redacted = redact_urls(message, keep_path=self.keep_path)
        if redacted != message or record.args:
            record.msg, record.args = redacted, ()
        if record.exc_info and not record.exc_text:
            text = _FORMATTER.formatException(record.exc_info)
            record.exc_text = redact_urls(text, keep_path=self.keep_path)
        return True


def _message(record: logging.LogRecord) -> str:
    """The record's message; a message its arguments do not fit (which the handler would
    print with the arguments, in its error report) stands without them."""
    try:
        return record.getMessage()
    except Exception:  # any error formatting the message is the caller's bug, not a reason to fail
        return str(record.msg)


def redact_logged_urls(*names: str, keep_path: bool = False) -> None:
    """Add a :class:`UrlRedactor` to each of the loggers ``names`` (those of HTTP clients
    that log the URLs they request), once: calling again adds none."""
    for name in names:
        logger = logging.getLogger(name)
        present = (f for f in logger.filters if isinstance(f, UrlRedactor))
        if not any(f.keep_path == keep_path for f in present):
            logger.addFilter(UrlRedactor(keep_path=keep_path))

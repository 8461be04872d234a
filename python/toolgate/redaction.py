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

__all__ = ["UrlRedactor", "redact_logged_urls", "redact_urls", "redacted_url"]

# A URL in running text: it ends at white space, a quote or an angle bracket (how messages
# and reprs delimit one). Its scheme is read from the start of a run of scheme characters
# only: tried at each letter of a long run (an upstream's text), the search was quadratic.
# A run starting with a digit is taken whole ("1https"): its URL is cut all the same.
# Quotes may stand in a URL though (RFC 3986 allows ' in user info and query strings):
# a quote followed by a character of a URL goes on with it; one that ended the URL left the
# rest of its password, path and query string in the log. User info (which runs to the last
# @ before the path) may hold any character after a quote (RFC 3986's ! ( ) , ; : ' too: a
# password "pa'!ss" left its whole URL in the log), but a quote then separators (, : ; \ and
# brackets) then a quote closes one string and opens the next: read across, the next field of
# compact JSON ('"https://h","owner":"ann@x"') was taken for user info, and its host logged.
_IN_URL = r"(?:[^\s'\"<>]|['\"](?=[\w%&=+/~*$@-]))"
_IN_USER_INFO = r"(?:[^\s'\"/?#]|['\"](?![,:;(){}\[\]\\]+['\"]))"
_URL = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z0-9+.-]+)://"
    rf"(?P<authority>(?:{_IN_USER_INFO}*@)?[^\s/?#'\"<>]*)"
    rf"(?P<rest>{_IN_URL}*)"
)
_CUT = "..."
# Formats a record's exception the way logging's default formatter does, to redact it.
_FORMATTER = logging.Formatter()


def redacted_url(url: str, *, keep_path: bool = False) -> str:
    """``url`` as ``scheme://host:port/...``: no user info, and neither path, query string
    nor fragment (with ``keep_path``, the path kept and the rest cut). Text that is no URL
    comes back as it is."""
    return redact_urls(url, keep_path=keep_path) if _URL.fullmatch(url) else url


def redact_urls(text: str, *, keep_path: bool = False) -> str:
    """``text`` with each URL in it cut down as :func:`redacted_url` cuts one."""
    return _URL.sub(lambda match: _cut(match, keep_path=keep_path), text)


def _cut(match: re.Match[str], *, keep_path: bool) -> str:
    host = match["authority"].rpartition("@")[2]  # the user info, if any, is dropped
    rest = match["rest"]
    if keep_path:
        path = re.split(r"[?#]", rest, maxsplit=1)[0]
        rest = path if path == rest else f"{path}?{_CUT}"
    elif rest not in ("", "/"):
        rest = f"/{_CUT}"
    return f"{match['scheme']}://{host}{rest}"


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

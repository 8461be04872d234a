"""Tags read out of a user's text in time linear in its length, as a lazy regex reads them."""

from __future__ import annotations

import html
import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from toolgate.formats.text_tags import strip_tool_tags, user_query, without_reminders

# What each reads, as the regex each was first written with (each opening tag paired with
# the first closing tag after it); a reminder's opening tag starts the text or a line, or ends
# a line.
_REMINDER = re.compile(
    r"(?:(?<![^\n])<system-reminder>|<system-reminder>(?=\r?\n)).*?</system-reminder>\s*",
    re.DOTALL,
)
_USERQ = re.compile(r"<userq>(.*?)</userq>", re.DOTALL)
_TOOL_TAGS = re.compile(r"<(toolname|tooldescription)>.*?</\1>\s*", re.DOTALL)

_PIECES = st.sampled_from(
    [
        *("<system-reminder>", "</system-reminder>", "<userq>", "</userq>", " ", "\n", "a"),
        *("&amp;", "<toolname>", "</toolname>", "<tooldescription>", "</tooldescription>"),
    ]
)


@given(st.lists(_PIECES, max_size=12).map("".join))
@settings(max_examples=500, deadline=None, derandomize=True, database=None)
def test_tags_are_read_as_the_lazy_regex_reads_them(text: str) -> None:
    assert without_reminders(text) == _REMINDER.sub("", text)
    assert strip_tool_tags(text) == _TOOL_TAGS.sub("", text)
    match = _USERQ.search(text)
    assert user_query(text) == (html.unescape(match.group(1).strip()) if match else None)


def test_opening_tags_left_unclosed_are_read_in_linear_time() -> None:
    # The regex tried each unclosed opening tag to the end of the text: 85 kB of them took
    # seconds, on every route of a request (a reminder) or of a tags catalog (<userq>).
    for text, read in [
        ("<system-reminder>" * 20_000, without_reminders),
        ("<userq>" * 20_000, user_query),
        ("<toolname>" * 20_000, strip_tool_tags),
        ("<toolname>x</toolname>" + "<tooldescription>" * 20_000, strip_tool_tags),
    ]:
        started = time.perf_counter()
        read(text)
        assert time.perf_counter() - started < 1.0, read.__name__


def test_a_reminder_written_inside_a_line_is_the_users_words() -> None:
    # Claude Code writes a reminder as a block: its opening tag starts the text or a line,
    # or its body starts on a line of its own. One the user typed mid-sentence is asked about.
    asks = "Why is <system-reminder>be brief</system-reminder> in my prompt? star the repo"
    assert without_reminders(asks) == asks
    block = "<system-reminder>\nThe todo list is empty.\n</system-reminder>\n"
    for written in (block, f"star the repo\n\n{block}", f"star the repo{block}"):
        assert without_reminders(written) == written.replace(block, "")
    assert without_reminders("star it\n<system-reminder>Be brief.</system-reminder>") == "star it\n"

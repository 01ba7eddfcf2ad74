"""The cheap tests before the detector's regexes never turn away a text the regex would match."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_loop_guard.core import detector, intent

PATTERNS = [
    pytest.param(intent._SLEEP.match, intent._SLEEP_STARTS, id="sleep"),
    pytest.param(intent._SQL_WRITE.match, intent._SQL_STARTS, id="sql write"),
    pytest.param(lambda text: detector._ERROR_TEXT.match(text, 0, 200), detector._ERROR_STARTS, id="error text"),
    pytest.param(detector._NOTHING.fullmatch, detector._NOTHING_STARTS, id="nothing"),
]
"""Each regex as the detector uses it, and the starts it is tested with first."""
WORDS = st.sampled_from(
    ["sleep 5", "Start-Sleep 3", "TIMEOUT /t 2", "insert into t", "UPDATE t SET", "drop table", "grant x on y",
     "Error:", "[ fatal]", "Traceback (most recent call last)", "unknown option", "/bin/bash: line 3: ",
     "zsh: line 1: ", "[]", "{ }", "null", "No results found", "0 results", "Couldn't find", "x"]
)  # fmt: skip
SPACES = st.text(alphabet=" \t\n\r\x0b\x0c\x1c\x85\xa0\u2003\u3000", max_size=3)
ODD = st.characters(codec="utf-8", exclude_categories=("Cs",))
TEXTS = st.one_of(
    st.text(max_size=12),
    st.builds(lambda sp, w: sp + w, SPACES, WORDS),
    st.builds(lambda sp, c, w: sp + c + w[1:], SPACES, ODD, WORDS),
    st.builds(lambda sp, c, w: sp + w[:1] + c + w[2:], SPACES, ODD, WORDS),
)


@pytest.mark.parametrize(("matches", "starts"), PATTERNS)
@given(text=TEXTS)
@settings(max_examples=400, deadline=None)
def test_a_text_the_regex_matches_may_start_so(
    matches: Callable[[str], re.Match[str] | None], starts: tuple[str, ...], text: str
) -> None:
    """A text turned away by its first two characters is one the regex does not match (long s, dotless i...)."""
    if not intent.may_start(text, starts):
        assert matches(text) is None


@pytest.mark.parametrize("text", ["\u017fleep 5", "\u0131nsert into t", "e\u017f", "\u2003Error: no", "", "  "])
def test_texts_outside_ascii_or_blank_go_to_the_regex(text: str) -> None:
    """Case-insensitive regexes match some letters outside ASCII to ASCII ones: such texts are never turned away."""
    assert intent.may_start(text, intent._SLEEP_STARTS + intent._SQL_STARTS + detector._ERROR_STARTS)

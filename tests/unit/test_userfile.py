"""The reader of files a user names: nesting counted outside strings and comments, exactly at the limit."""

from __future__ import annotations

from typing import Literal

import pytest

from mcp_loop_guard.userfile import MAX_DEPTH, line_of, too_deep


@pytest.mark.parametrize(
    ("text", "syntax"),
    [
        ('{"a": "' + "[" * 500 + '"}', "json"),
        ('{"a": "\\"' + "{" * 500 + '"}', "json"),
        ("{ // " + "[" * 500 + "\n}", "json"),
        ("{ /* " + "[" * 500 + " */ }", "json"),
        ("a = '" + "[" * 500 + "'", "toml"),
        ('a = """\n' + "[" * 500 + '\n"""', "toml"),
        ("a = '''" + "{" * 500 + "'''", "toml"),
        ("# " + "[" * 500, "toml"),
        ("[" * MAX_DEPTH + "]" * MAX_DEPTH, "json"),
    ],
)
def test_brackets_in_strings_and_comments_are_not_nesting(text: str, syntax: Literal["json", "toml"]) -> None:
    """Brackets inside strings or comments of either syntax do not count; 100 levels are accepted."""
    assert too_deep(text, syntax) is None


@pytest.mark.parametrize("syntax", ["json", "toml"])
def test_the_first_bracket_past_the_limit_is_found(syntax: Literal["json", "toml"]) -> None:
    """At 101 levels the position of the 101st opening bracket is given, with its line."""
    text = '"[[[" \n' + "[{" * 60 + "}]" * 60
    at = too_deep(text, syntax)
    assert at == len('"[[[" \n') + MAX_DEPTH
    assert line_of(text, at) == 2

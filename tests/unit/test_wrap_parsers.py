"""The span-keeping readers: where JSONC and TOML values sit, and what they hold."""

from __future__ import annotations

import tomllib

import pytest

from mcp_loop_guard.wrap import jsonc, tomlscan
from mcp_loop_guard.wrap.clients import CLIENTS
from mcp_loop_guard.wrap.plan import rewrite
from mcp_loop_guard.wrap.spans import TextSyntaxError, plain


def test_jsonc_values_keep_their_spans() -> None:
    """Every key and value of a JSONC text knows its span, past comments and trailing commas."""
    text = '{ // c\n  "a": [1, "x\\"y", {"b": null},], /* d */ "e": true, }'
    node = jsonc.parse(text)
    assert plain(node) == {"a": [1, 'x"y', {"b": None}], "e": True}
    first = node.pairs[0]
    assert text[first.key_start : first.key_end] == '"a"'
    assert text[first.value.start : first.value.end] == '[1, "x\\"y", {"b": null},]'
    assert [text[item.start : item.end] for item in first.value.items] == ["1", '"x\\"y"', '{"b": null}']


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"a": 1,, "b": 2}', "line 1, column 9: expected a quoted key or }"),
        ('{\n  "a": [1 2]\n}', "line 2, column 11: expected , or ]"),
        ("{'a': 1}", "line 1, column 2: expected a quoted key or }"),
        ('{"a": 1} x', "line 1, column 10: unexpected text after the top value"),
        ('{"a": /* open', "line 1, column 7: a /* comment is never closed"),
        ('{"a": "tab\there"}', "line 1, column 7: a string is not closed or holds an invalid escape"),
    ],
)
def test_jsonc_errors_say_where(text: str, where: str) -> None:
    """What is not JSONC is reported with its line and column."""
    with pytest.raises(TextSyntaxError) as caught:
        jsonc.parse(text)
    assert str(caught.value) == where


def test_toml_sections_pairs_and_every_string_kind() -> None:
    """The TOML reader finds headers (quoted keys too), pairs and array items of every string kind, multi-line too."""
    text = (
        'top = 1\n[mcp_servers."my.server"]  # note\n'
        "command = '''C:\\bin\\x.exe'''\n"
        'args = [\n  """two\nlines""""",  # a comment\n  \'lit\', [1, 2],\n]\n'
        'env = { A = "b", \'c d\' = "e" }\n'
        "when = 1979-05-27 07:32:00Z\n"
        '[[profiles]]\nname = "x"\n'
    )
    sections = tomlscan.sections(text)
    assert [(section.path, section.array) for section in sections] == [
        ((), False),
        (("mcp_servers", "my.server"), False),
        (("profiles",), True),
    ]
    pairs = dict(sections[1].pairs)
    assert pairs[("command",)].value.value == "C:\\bin\\x.exe"
    args = pairs[("args",)].value
    assert [item.value for item in args.items[:2]] == ['two\nlines""', "lit"]
    assert args.items[2].kind == "array"
    assert [pair.key for pair in pairs[("env",)].value.pairs] == ["A", "c d"]
    assert text[pairs[("when",)].value.start : pairs[("when",)].value.end] == "1979-05-27 07:32:00Z"


def test_codex_entries_with_multi_line_strings_and_quoted_names_round_trip() -> None:
    """A quoted server name and multi-line string arguments are copied as written, and unwrap gives them back."""
    text = '[mcp_servers."my.server"]\ncommand = """uvx"""\nargs = [\'\'\'--dir\'\'\', """/a\nb"""]\n'
    wrapped = rewrite(text, CLIENTS["codex"], prefix=("/g/mcp-loop-guard",), undo=False).text
    assert tomllib.loads(wrapped)["mcp_servers"]["my.server"] == {
        "command": "/g/mcp-loop-guard",
        "args": ["--", "uvx", "--dir", "/a\nb"],
    }
    assert rewrite(wrapped, CLIENTS["codex"], prefix=(), undo=True).text == text

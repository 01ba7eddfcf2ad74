"""Hostile client config files for ``wrap``: a FIFO, a device, a huge string, deep nesting, long numbers, garbage.

``wrap`` reads files the user points it at, or finds them in well-known places; any of
them may be malformed, hostile or not a file at all. Whatever it gets, it answers with one
line naming the file and the problem (exit 2) or does its job, and never prints a
traceback, never blocks, and keeps its memory proportional to the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mcp_loop_guard.wrap import jsonc
from mcp_loop_guard.wrap import main as wrap_main
from mcp_loop_guard.wrap.clients import CLIENTS, GENERIC, Client
from mcp_loop_guard.wrap.entries import RefusedError
from mcp_loop_guard.wrap.files import MAX_FILE_BYTES
from mcp_loop_guard.wrap.plan import rewrite
from mcp_loop_guard.wrap.spans import TextSyntaxError
from tests.harness import guard_argv, server_environment

GUARD = ("/usr/local/bin/mcp-loop-guard",)
MIB = 1024 * 1024


async def _wrap(process_marker: str, *args: str) -> tuple[int, list[str]]:
    """``mcp-loop-guard wrap ARGS`` as a process: its exit status and stderr lines."""
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [*guard_argv(), "wrap", "--guard-command", GUARD[0], *args],
            env=server_environment(process_marker, None),
            check=False,
        )
    return done.returncode, done.stderr.decode().splitlines()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("fifo", "not a regular file (a FIFO)"),
        ("device", "not a regular file (a character device)"),
        ("folder", "not a regular file (a folder)"),
        ("large", f"too large ({MAX_FILE_BYTES + 1:,} bytes; the limit is 64 MB)"),
    ],
)
async def test_wrap_refuses_what_is_not_a_small_regular_file(
    kind: str, problem: str, tmp_path: Path, process_marker: str
) -> None:
    """A FIFO (which would block the read forever), a device, a folder, a file over the cap: one line, exit 2."""
    path = tmp_path / "mcp.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        with path.open("wb") as sparse:
            sparse.truncate(MAX_FILE_BYTES + 1)
    assert await _wrap(process_marker, str(path)) == (2, [f"mcp-loop-guard wrap: error: {path}: {problem}"])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("mcp.json", '{"mcpServers": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 100 levels"),
        ("mcp.json", '{"mcpServers": {"a": {"command": "x", "timeout": ' + "9" * 5000 + "}}}", "digits"),
        ("config.toml", "[mcp_servers.a]\ncommand = 'x'\nargs = " + "[" * 100_000 + "]" * 100_000, "line 3: nested"),
        ("config.toml", "[mcp_servers.a]\ncommand = 'x'\ntimeout = " + "9" * 5000, "a number of more than 4300 digits"),
    ],
    ids=["json-deep", "json-digits", "toml-deep", "toml-digits"],
)
async def test_wrap_refuses_deep_nesting_and_endless_numbers_with_one_line(
    name: str, text: str, problem: str, tmp_path: Path, process_marker: str
) -> None:
    """Nesting 100,000 deep or a number of 5,000 digits: one line naming the file and the problem, exit 2."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    status, lines = await _wrap(process_marker, str(path))
    assert status == 2
    assert len(lines) == 1
    assert lines[0].startswith(f"mcp-loop-guard wrap: error: {path}: ")
    assert problem in lines[0]


MEASURED = """\
import pathlib, resource, sys
from mcp_loop_guard.cli import main
status = main(sys.argv[1:])
status_file = pathlib.Path("/proc/self/status")
if status_file.exists():  # this program's own peak: ru_maxrss keeps the forking test process's across exec
    peak = next(int(line.split()[1]) for line in status_file.read_text().splitlines() if line.startswith("VmHWM:"))
else:  # macOS counts bytes
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // (1024 if sys.platform == "darwin" else 1)
print(peak, status, file=sys.stderr)
"""


@pytest.mark.anyio
@pytest.mark.parametrize("write", [False, True], ids=["dry-run", "write"])
async def test_wrap_memory_stays_proportional_to_a_file_with_a_10_mb_string(
    tmp_path: Path, process_marker: str, *, write: bool
) -> None:
    """A server argument of 10 MB is wrapped (dry run or written) with a peak RSS of at most 25 times the file."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "srv", "args": ["y" * 10 * MIB]}}}), encoding="utf-8")
    size = path.stat().st_size
    argv = ["wrap", "--guard-command", GUARD[0], str(path), *(["--write"] if write else [])]
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [sys.executable, "-c", MEASURED, *argv], env=server_environment(process_marker, None), check=False
        )
    peak_kib, status = done.stderr.decode().split()[-2:]
    assert status == "0"
    assert int(peak_kib) * 1024 < 25 * size
    assert json.loads(path.read_text())["mcpServers"]["a"]["command"] == (GUARD[0] if write else "srv")


# --- fuzzing the parsers ---------------------------------------------------------------------

SNIPPETS = [
    "{", "}", "[", "]", '"', "'", ",", ":", "=", "/*", "*/", "//", "#", "\\", "\n", "\r\n", '"""', "'''",
    "\x00", "\x7f", "é", "\ufeff", "\U0001f600", "1e999", "-0", "null", "true", "[[", "]]", " ", '"\\u12"',
    "9" * 40, "[mcp_servers.b]", '"command": ', "command = ", '"args": [', "args = [", "--", "mcp-loop-guard",
]  # fmt: skip
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.sampled_from(["--", "mcp-loop-guard", "uvx"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
entries = st.dictionaries(
    st.sampled_from(["command", "args", "url", "serverUrl", "httpUrl", "headers", "type", "env", "disabled", "oauth"]),
    values,
    max_size=5,
)
json_documents = st.builds(
    lambda servers, section, indent: json.dumps({section: servers}, indent=indent),
    st.dictionaries(st.text("abc-_.", min_size=1, max_size=4), entries, max_size=3),
    st.sampled_from(["mcpServers", "servers", "projects"]),
    st.sampled_from([None, 2, "\t"]),
)
toml_documents = st.builds(
    lambda tables: "".join(
        f"[mcp_servers.{name}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in table.items())
        for name, table in tables.items()
    ),
    st.dictionaries(
        st.text("abc-_", min_size=1, max_size=4),
        st.dictionaries(st.sampled_from(["command", "args", "url", "http_headers", "enabled"]), values, max_size=4),
        max_size=3,
    ),
)
edits = st.lists(st.tuples(st.floats(0, 1), st.integers(0, 4), st.sampled_from(SNIPPETS)), max_size=4)


def _mutated(text: str, changes: list[tuple[float, int, str]]) -> str:
    """``text`` with, at each relative place, a few characters replaced by a snippet."""
    for where, cut, snippet in changes:
        at = int(where * len(text))
        text = text[:at] + snippet + text[at + cut :]
    return text


def _round(text: str, client: Client) -> None:
    """Wrap, then unwrap what was wrapped: each either works or refuses the file, nothing else."""
    for undo in (False, True):
        try:
            wrapped = rewrite(text, client, prefix=GUARD, undo=undo)
        except RefusedError:
            return
        if not undo:
            rewrite(wrapped.text, client, prefix=(), undo=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    document=json_documents,
    changes=edits,
    client=st.sampled_from([client for client in CLIENTS.values() if client.syntax == "json"] + [GENERIC]),
)
@example(document='{"mcpServers": ' + "[" * 5000 + "]" * 5000 + "}", changes=[], client=GENERIC)
def test_json_files_of_any_shape_are_wrapped_or_refused(document: str, changes: Any, client: Client) -> None:
    """Generated mcpServers files with random edits: wrap and unwrap work or raise RefusedError, never anything else."""
    text = _mutated(document, changes)
    with contextlib.suppress(TextSyntaxError):
        jsonc.parse(text)
    _round(text, client)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=toml_documents, changes=edits)
@example(document="[mcp_servers.a]\ncommand = 'x'\n", changes=[(1.0, 0, "args = " + "[" * 5000)])
def test_toml_files_of_any_shape_are_wrapped_or_refused(document: str, changes: Any) -> None:
    """Generated Codex files with random edits: wrap and unwrap work or raise RefusedError, never anything else."""
    _round(_mutated(document, changes), CLIENTS["codex"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=64) | json_documents.map(str.encode), name=st.sampled_from(["mcp.json", "c.toml"]))
def test_the_wrap_command_answers_any_bytes_with_a_status(
    data: bytes, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any bytes in a file: `wrap` and `unwrap` end with status 0 or 2 and at most one error line, no exception."""
    path = tmp_path / name
    path.write_bytes(data)
    for undo in (False, True):
        status = wrap_main(["--guard-command", GUARD[0], str(path)], undo=undo)
        errors = capsys.readouterr().err.splitlines()
        assert status in (0, 2)
        assert len(errors) == (status == 2)

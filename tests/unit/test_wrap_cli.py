"""The wrap and unwrap commands: dry run, --write with backup and atomic replace, finding client files, errors."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from mcp_loop_guard.cli import main as cli_main
from mcp_loop_guard.wrap import files
from mcp_loop_guard.wrap.clients import CLIENTS, paths
from mcp_loop_guard.wrap.guard import GuardNotFoundError, resolve

GUARD = "/opt/guard/bin/mcp-loop-guard"
CONFIG = (
    '{\n  "mcpServers": {\n    "time": {\n      "command": "uvx",\n      "args": ["mcp-server-time"]\n    }\n  }\n}\n'
)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli_main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A Claude Desktop config file with one local server."""
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def test_dry_run_prints_the_report_and_diff_and_writes_nothing(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --write: what would be wrapped, a unified diff on stdout, and the file untouched."""
    status, out, err = _run(capsys, "wrap", "--guard-command", GUARD, str(config))
    assert status == 0, err
    assert f"guard command: {GUARD} (as given with --guard-command)" in out
    assert "  time  wrapped: uvx runs behind the guard" in out
    assert f"--- {config}\n+++ {config}\n" in out
    assert (
        f'-      "command": "uvx",\n-      "args": ["mcp-server-time"]\n'
        f'+      "command": "{GUARD}",\n+      "args": ["--", "uvx", "mcp-server-time"]\n'
    ) in out
    assert "Dry run: nothing written" in out
    assert config.read_text(encoding="utf-8") == CONFIG
    assert list(config.parent.iterdir()) == [config]


def test_write_keeps_a_backup_and_the_file_mode_and_unwrap_restores_the_bytes(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--write leaves a backup holding the original, keeps the permissions; unwrap --write gives back the same bytes."""
    config.chmod(0o600)
    original = config.read_bytes()
    status, out, _ = _run(capsys, "wrap", "--write", "--guard-command", GUARD, str(config))
    assert status == 0
    backups = sorted(config.parent.glob("*.bak-mcp-loop-guard-*"))
    assert len(backups) == 1
    assert backups[0].read_bytes() == original
    assert stat.S_IMODE(backups[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert f"Wrote {config} (backup: {backups[0]}). Restart Claude Desktop" in out
    assert f'"command": "{GUARD}"' in config.read_text(encoding="utf-8")

    status, out, _ = _run(capsys, "wrap", "--write", "--guard-command", GUARD, str(config))
    assert status == 0
    assert "Nothing to wrap: the file stays as it is." in out
    assert len(list(config.parent.glob("*.bak-mcp-loop-guard-*"))) == 1

    status, out, _ = _run(capsys, "unwrap", "--write", str(config))
    assert status == 0
    assert "time  unwrapped: runs uvx directly again" in out
    assert config.read_bytes() == original
    assert len(list(config.parent.glob("*.bak-mcp-loop-guard-*"))) == 2
    assert [path.name for path in config.parent.glob(".*.tmp")] == []


def test_a_symlinked_config_is_written_through_the_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config that is a symlink (dotfiles) stays a symlink; its target gets the change, the backup sits beside it."""
    real = tmp_path / "dotfiles" / "claude.json"
    real.parent.mkdir()
    real.write_text(CONFIG, encoding="utf-8")
    link = tmp_path / "claude_desktop_config.json"
    link.symlink_to(real)
    status, _, _ = _run(capsys, "wrap", "--write", "--guard-command", GUARD, str(link))
    assert status == 0
    assert link.is_symlink()
    assert GUARD in real.read_text(encoding="utf-8")
    assert len(list(real.parent.glob("claude.json.bak-mcp-loop-guard-*"))) == 1


def test_a_bom_and_crlf_file_keeps_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Windows file (UTF-8 BOM, CRLF) is wrapped with CRLF lines and its BOM, and unwraps to the same bytes."""
    path = tmp_path / "mcp.json"
    original = (
        "\ufeff" + CONFIG.replace('"args": ["mcp-server-time"]\n', '"env": {}\n').replace("\n", "\r\n")
    ).encode()
    path.write_bytes(original)
    assert _run(capsys, "wrap", "--write", "--guard-command", GUARD, str(path))[0] == 0
    wrapped = path.read_bytes()
    assert wrapped.startswith(b"\xef\xbb\xbf{\r\n")
    assert b'"command": "/opt/guard/bin/mcp-loop-guard",\r\n      "args": ["--", "uvx"],\r\n' in wrapped
    assert b"\n" not in wrapped.replace(b"\r\n", b"")
    assert _run(capsys, "unwrap", "--write", str(path))[0] == 0
    assert path.read_bytes() == original


def test_a_file_changed_on_disk_meanwhile_is_not_replaced(config: Path) -> None:
    """If the client rewrote its file after wrap read it, wrap writes nothing and says to run it again."""
    loaded = files.load(config)
    config.write_text(CONFIG.replace("uvx", "npx"), encoding="utf-8")
    with pytest.raises(files.FileError, match="changed on disk"):
        files.write(loaded, CONFIG.replace("uvx", "x"), now=datetime(2026, 1, 2, 3, 4, 5).astimezone())
    assert "npx" in config.read_text(encoding="utf-8")
    assert not list(config.parent.glob(".*.tmp"))


def test_backups_never_overwrite_each_other(config: Path) -> None:
    """Two writes in the same second get two backups."""
    moment = datetime(2026, 1, 2, 3, 4, 5).astimezone()
    first = files.write(files.load(config), CONFIG.replace("uvx", "a"), now=moment)
    second = files.write(files.load(config), CONFIG.replace("uvx", "b"), now=moment)
    assert first.name == "claude_desktop_config.json.bak-mcp-loop-guard-20260102T030405"
    assert second.name == "claude_desktop_config.json.bak-mcp-loop-guard-20260102T030405-2"
    assert first.read_text(encoding="utf-8") == CONFIG
    assert "a" in second.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"{ not json",
            "not JSON (comments and trailing commas allowed): line 1, column 3: expected a quoted key or }",
        ),
        (b'{"theme": "dark"}', 'no server section ("mcpServers"): nothing to wrap'),
        (b'{"mcpServers": {"a": ["uvx"]}}', "mcpServers.a: expected an object (a server entry)"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
def test_a_bad_file_is_refused_with_exit_2_and_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    """A file that is not what wrap expects: exit 2, one line naming the file, the key and the problem; untouched."""
    path = tmp_path / "claude_desktop_config.json"
    path.write_bytes(content)
    status, out, err = _run(capsys, "wrap", "--write", "--guard-command", GUARD, str(path))
    assert status == 2
    assert err.startswith(f"mcp-loop-guard wrap: error: {path}: {message}")
    assert err.count("\n") == 1
    assert out == ""
    assert path.read_bytes() == content


def test_a_missing_file_and_bad_usage_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing FILE, both FILE and --client, or neither: exit 2 with a message."""
    missing = tmp_path / "nope.json"
    status, _, err = _run(capsys, "wrap", str(missing))
    assert (status, err.splitlines()[-1]) == (2, f"mcp-loop-guard wrap: error: {missing}: no such file")
    status, _, err = _run(capsys, "wrap", "--client", "cursor", str(missing))
    assert (status, err.splitlines()[-1]) == (2, "mcp-loop-guard wrap: error: give exactly one of FILE or --client")
    status, _, err = _run(capsys, "unwrap")
    assert (status, err.splitlines()[-1]) == (2, "mcp-loop-guard unwrap: error: give exactly one of FILE or --client")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home and current directory for a --client run."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for variable in ("CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(work)
    return home


def test_client_files_are_found_project_first_then_user(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--client takes the project file when the current directory has one, else the user file; --scope picks one."""
    user = home / ".cursor" / "mcp.json"
    user.parent.mkdir()
    user.write_text(CONFIG, encoding="utf-8")
    status, out, _ = _run(capsys, "wrap", "--client", "cursor", "--guard-command", GUARD)
    assert status == 0
    assert out.startswith(f"{user} (Cursor, user scope)\n")
    project = Path.cwd() / ".cursor" / "mcp.json"
    project.parent.mkdir()
    project.write_text(CONFIG, encoding="utf-8")
    assert _run(capsys, "wrap", "--client", "cursor", "--guard-command", GUARD)[1].startswith(
        f"{project} (Cursor, project scope)\n"
    )
    assert _run(capsys, "wrap", "--client", "cursor", "--scope", "user", "--guard-command", GUARD)[1].startswith(
        f"{user} (Cursor, user scope)\n"
    )


def test_a_missing_client_file_names_the_paths_looked_at(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With no config for the client, exit 2 and the paths that were looked at."""
    status, _, err = _run(capsys, "wrap", "--client", "gemini")
    assert status == 2
    assert err.splitlines()[-1] == (
        "mcp-loop-guard wrap: error: no Gemini CLI config file found (looked at: "
        f"{Path.cwd() / '.gemini' / 'settings.json'}, {home / '.gemini' / 'settings.json'})"
    )
    status, _, err = _run(capsys, "wrap", "--client", "windsurf", "--scope", "project")
    assert (status, err.splitlines()[-1]) == (2, "mcp-loop-guard wrap: error: Windsurf has no project config file")


@pytest.mark.parametrize(
    ("platform", "environ", "expected"),
    [
        ("darwin", {}, "home/Library/Application Support/Claude/claude_desktop_config.json"),
        ("win32", {"APPDATA": "/roaming"}, "/roaming/Claude/claude_desktop_config.json"),
        ("linux", {}, "home/.config/Claude/claude_desktop_config.json"),
        ("linux", {"XDG_CONFIG_HOME": "/xdg"}, "/xdg/Claude/claude_desktop_config.json"),
    ],
)
def test_claude_desktop_file_per_platform(platform: str, environ: dict[str, str], expected: str) -> None:
    """Claude Desktop's file is in the platform's user settings folder."""
    found = paths(
        CLIENTS["claude-desktop"], "user", home=Path("home"), cwd=Path("w"), environ=environ, platform=platform
    )
    assert found == (Path(expected),)


def test_client_homes_from_the_environment() -> None:
    """CLAUDE_CONFIG_DIR and CODEX_HOME move those clients' user files; VS Code also has an Insiders file."""
    where = {"home": Path("h"), "cwd": Path("w"), "platform": "linux"}
    environ = {"CLAUDE_CONFIG_DIR": "/cc", "CODEX_HOME": "/cx"}
    assert paths(CLIENTS["claude-code"], "user", environ=environ, **where) == (Path("/cc/.claude.json"),)  # type: ignore[arg-type]
    assert paths(CLIENTS["codex"], "user", environ=environ, **where) == (Path("/cx/config.toml"),)  # type: ignore[arg-type]
    assert paths(CLIENTS["vscode"], "user", environ={}, **where) == (  # type: ignore[arg-type]
        Path("h/.config/Code/User/mcp.json"),
        Path("h/.config/Code - Insiders/User/mcp.json"),
    )


def test_the_guard_command_is_an_absolute_path_from_path(tmp_path: Path) -> None:
    """mcp-loop-guard on PATH is written as its absolute path, so a client with a minimal PATH still finds it."""
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "mcp-loop-guard"
    program.write_text("#!/bin/sh\n", encoding="utf-8")
    program.chmod(0o755)
    found = resolve(None, environ={"PATH": f"/nonexistent{os.pathsep}{folder}"}, executable="/no/python")
    assert found.words == (str(program),)
    assert found.how == "found on PATH"


def test_without_path_the_guard_beside_the_interpreter_is_used_else_an_error(tmp_path: Path) -> None:
    """Off PATH, the console script beside the running Python is written; with none, the error says what to do."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    with pytest.raises(GuardNotFoundError, match="not on PATH: install it, or give --guard-command"):
        resolve(None, environ={"PATH": ""}, executable=str(python))
    beside = python.parent / "mcp-loop-guard"
    beside.write_text("", encoding="utf-8")
    found = resolve(None, environ={"PATH": ""}, executable=str(python))
    assert found.words == (str(beside),)
    assert "beside this Python" in found.how


def test_a_guard_in_uvs_cache_is_refused(tmp_path: Path) -> None:
    """The mcp-loop-guard of a `uvx` run lives in a cache that may be cleared: wrap asks for a lasting command."""
    folder = tmp_path / "uv" / "archive-v0" / "abc123" / "bin"
    folder.mkdir(parents=True)
    (folder / "mcp-loop-guard").write_text("", encoding="utf-8")
    (folder / "mcp-loop-guard").chmod(0o755)
    with pytest.raises(GuardNotFoundError, match='--guard-command "uvx mcp-loop-guard"'):
        resolve(None, environ={"PATH": str(folder)}, executable="/no/python")


@pytest.mark.parametrize(
    ("given", "windows", "words"),
    [
        ("uvx mcp-loop-guard", False, ("uvx", "mcp-loop-guard")),
        ("'/Applications/My Tools/mcp-loop-guard' --warn-threshold 4", False,
         ("/Applications/My Tools/mcp-loop-guard", "--warn-threshold", "4")),
        ('"C:\\Program Files\\guard\\mcp-loop-guard.exe"', True, ("C:\\Program Files\\guard\\mcp-loop-guard.exe",)),
    ],
)  # fmt: skip
def test_guard_command_is_split_like_a_shell_would(given: str, windows: bool, words: tuple[str, ...]) -> None:
    """--guard-command is split into words as the platform's shell would, quotes grouping words."""
    assert resolve(given, executable="/no/python", windows=windows).words == words


def test_the_wrap_package_does_not_load_the_mcp_sdk() -> None:
    """Importing the wrap command loads neither the MCP SDK nor anyio, so it starts fast."""
    code = "import sys, mcp_loop_guard.wrap; print(sorted(m for m in ('mcp', 'anyio', 'pydantic') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_header_needs_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    """--header without --upstream is bad usage."""
    status, _, err = _run(capsys, "--header", "A: b", "--", "x")
    assert status == 2
    assert err.splitlines()[-1] == "mcp-loop-guard: error: --header goes with --upstream URL"


def test_a_proxy_variable_the_guard_cannot_use_stops_it_at_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SOCKS proxy for an HTTPS upstream: bad usage, naming the variable and not its password."""
    monkeypatch.setenv("HTTPS_PROXY", "socks5://user:hunter2@proxy.internal:1080")
    status, out, err = _run(capsys, "--upstream", "https://tools.example.com/mcp")
    assert (status, out) == (2, "")
    assert err.splitlines()[-1] == (
        "mcp-loop-guard: error: HTTPS_PROXY=socks5://proxy.internal:1080: "
        "the guard reaches upstreams through http:// or https:// proxies only"
    )
    assert "hunter2" not in err

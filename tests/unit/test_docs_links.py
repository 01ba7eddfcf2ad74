"""The docs hold together: a short README, relative links that reach a file and an anchor in it, and only
real settings named."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from mcp_loop_guard.registry import REMOVED, global_settings
from tests.docs_text import anchors, guide_files, prose, slug
from tests.harness import REPO_ROOT

README_MAX_LINES = 320
_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _links(path: Path) -> list[tuple[int, str]]:
    """The link targets of a file's prose (not of its code blocks or code spans), with their lines."""
    found: list[tuple[int, str]] = []
    for number, line in prose(path):
        found.extend((number, match["target"]) for match in _LINK.finditer(_CODE_SPAN.sub("", line)))
    return found


def test_the_readme_is_a_short_guide() -> None:
    """README.md stays at most about 300 lines: the rest belongs in docs/."""
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


@pytest.mark.parametrize("path", guide_files(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_relative_link_reaches_a_file_and_its_anchor(path: Path) -> None:
    """Each relative link of README.md and docs/*.md names an existing file, and a heading or anchor in it."""
    broken: list[str] = []
    for number, target in _links(path):
        if _EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(REPO_ROOT)}:{number}: {target}"
        if not linked.exists():
            broken.append(f"{where}: no such file")
        elif anchor and (linked.suffix != ".md" or unquote(anchor) not in anchors(linked)):
            broken.append(f"{where}: no such anchor in {linked.relative_to(REPO_ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_link_checker_knows_githubs_anchors() -> None:
    """Headings turn into GitHub's anchors: punctuation and code marks dropped, spaces to hyphens."""
    assert slug("Traces (OpenTelemetry)") == "traces-opentelemetry"
    assert slug("The `state` command") == "the-state-command"
    assert slug("Wrapping a client's config") == "wrapping-a-clients-config"
    assert slug("Per-server and per-tool rules") == "per-server-and-per-tool-rules"
    assert slug("Patience: time as evidence, not as an exemption") == "patience-time-as-evidence-not-as-an-exemption"


@pytest.mark.parametrize("path", guide_files(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_the_docs_name_only_real_settings_with_their_defaults(path: Path) -> None:
    """Each LOOP_GUARD_* variable a page names is a setting (or a removed one); a limits-table row has its default."""
    text = path.read_text(encoding="utf-8")
    known = {setting.env: setting for setting in global_settings()}
    removed = {f"LOOP_GUARD_{name.upper()}" for name in REMOVED}
    named = set(re.findall(r"LOOP_GUARD_[A-Z][A-Z_]*[A-Z]", text))
    assert named - removed <= set(known), named - removed - set(known)
    rows = re.findall(r"^\| `(LOOP_GUARD_[A-Z_]+)` \| `([^`]+)`", text, flags=re.MULTILINE)
    for variable, default in rows:
        assert default == known[variable].shown_default.split()[0], variable

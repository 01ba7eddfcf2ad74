"""The docs as the tests read them: which files, their fenced blocks, their headings and anchors.

A fenced block opens with a line of three backticks and a language (```sh) and closes with a
line of three backticks. A block that the commands test should not run has a comment on the
line just above it: ``<!-- not run: REASON -->``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.harness import REPO_ROOT

SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
"""Fenced blocks whose lines are commands (in ``console`` blocks: the lines after ``$ ``)."""

NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")
_FENCE = re.compile(r"^```(?P<language>[\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(?P<title>.+?)\s*#*\s*$")
_ANCHOR = re.compile(r"""<a\s+(?:id|name)=["'](?P<id>[^"']+)["']""")


def docs_files() -> list[Path]:
    """README.md, CONTRIBUTING.md and docs/*.md: the files whose commands are run."""
    return [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def guide_files() -> list[Path]:
    """README.md and docs/*.md: the files whose links are checked."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown file."""

    path: Path
    line: int
    """The line number of its opening fence (1-based)."""
    language: str
    lines: tuple[str, ...]
    not_run: str | None
    """The reason given just above it for not running it, if any."""

    @property
    def name(self) -> str:
        """``file:line``, relative to the repository."""
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a file, in order."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    opened: tuple[int, str] | None = None
    body: list[str] = []
    for number, line in enumerate(lines, start=1):
        fence = _FENCE.match(line)
        if opened is None and fence:
            opened, body = (number, fence["language"]), []
        elif opened is not None and line.rstrip() == "```":
            start, language = opened
            above = NOT_RUN.match(lines[start - 2].strip()) if start >= 2 else None
            found.append(Block(path, start, language, tuple(body), above["reason"] if above else None))
            opened = None
        elif opened is not None:
            body.append(line)
    assert opened is None, f"{path}: the block opened at line {opened[0]} is never closed"
    return found


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """The lines outside fenced blocks, with their numbers."""
    inside = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line) or (inside and line.rstrip() == "```"):
            inside = not inside
            continue
        if not inside:
            yield number, line


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a link may name in a file: its headings' (numbered when repeated) and its ``<a id>``s."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose(path):
        if heading := _HEADING.match(line):
            base = slug(heading["title"])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(match["id"] for match in _ANCHOR.finditer(line))
    return found

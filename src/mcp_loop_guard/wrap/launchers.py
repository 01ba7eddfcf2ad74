"""Which program a server entry's command line runs: its command, or the program a launcher starts.

``uvx mcp-server-git``, ``uv run --directory /src/tool server.py``, ``pipx run --spec X tool``,
``npx -y @scope/server /some/folder``, ``python -m package``, ``env A=1 tool`` and Windows'
``cmd /c tool`` all run another program named among their arguments. Only that word names
the program: the launcher's options, their values (a folder, a package source) and the
program's own arguments never do, whatever they are called.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath, PureWindowsPath

__all__ = ["Launched", "launched", "stem"]

_SUFFIX = re.compile(r"\.(exe|cmd|bat|ps1|py)$", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^(python(\d+(\.\d+)?)?w?|py|pypy3?)$")


def _options(spelled: str) -> frozenset[str]:
    return frozenset(spelled.split())


_UV = _options(
    "--from --with --with-editable --with-requirements -w -p --python --index --default-index -i --index-url "
    "--extra-index-url -f --find-links --directory --project --cache-dir --config-file --env-file --package "
    "--extra --group --only-group --no-group -C --config-setting --python-preference --python-platform --color "
    "--index-strategy --keyring-provider --resolution --prerelease --fork-strategy --exclude-newer --link-mode "
    "--refresh-package --reinstall-package --upgrade-package -P --no-binary-package --no-build-package "
    "--allow-insecure-host -b --build-constraints --overrides --constraints -c --constraint"
)
"""``uv``/``uvx`` options that take a value (the next word, unless written ``--opt=value``)."""
_PIPX = _options("--spec --python --index-url -i --pip-args --backend")
_NODE = _options("-p --package -c --call --registry --cache --userconfig -w --workspace --prefix")
_ENV = _options("-u --unset -C --chdir -S --split-string")
_PYTHON_VALUED = frozenset({"-X", "-W", "--check-hash-based-pycs"})

_SUBCOMMANDS: dict[str, tuple[frozenset[str], tuple[tuple[str, ...], ...]]] = {
    "uv": (_UV, (("run",), ("tool", "run"))),
    "pipx": (_PIPX, (("run",),)),
    "npm": (_NODE, (("exec",), ("x",))),
    "pnpm": (_NODE, (("dlx",), ("exec",))),
    "yarn": (_NODE, (("dlx",),)),
    "bun": (_NODE, (("x",),)),
}
"""Launchers that run a program through a subcommand: their valued options, and the subcommand words."""
_DIRECT = {"uvx": _UV, "npx": _NODE, "pnpx": _NODE, "bunx": _NODE, "env": _ENV}
"""Launchers whose first argument that is no option (or option value) is the program."""


@dataclass(frozen=True, slots=True)
class Launched:
    """The program a command line runs: the word naming it and where it is."""

    index: int
    """Its position in the command line (0: the command itself)."""
    name: str
    """The program as named there: a path, a package spec (``tool@1.2``) or a module (``python -m``)."""
    module: bool = False
    """``name`` is a Python module run with ``-m``."""


def stem(word: str) -> str:
    """A program's name without folder and Windows suffix, lower-cased."""
    path: PurePath = PureWindowsPath(word) if "\\" in word else PurePosixPath(word)
    return _SUFFIX.sub("", path.name).lower()


def launched(words: Sequence[str]) -> Launched | None:
    """The program ``words`` (a command and its arguments) runs; None when a launcher names none (``python -c``)."""
    start = 0
    while True:
        found = _through(words, start)
        if found is None or found.module or found.index == start:
            return found
        start = found.index  # the program may be a launcher too: ``uv run python -m tool``


def _through(words: Sequence[str], start: int) -> Launched | None:
    """What ``words[start]`` runs: itself, or the program it launches."""
    name = stem(words[start])
    rest = range(start + 1, len(words))
    if _PYTHON.match(name):
        return _python(words, start)
    if name in _DIRECT:
        return _first_operand(words, start + 1, _DIRECT[name], assignments=name == "env")
    if name == "cmd":
        switch = next((at for at in rest if words[at].lower() in ("/c", "/k")), None)
        return None if switch is None or switch + 1 >= len(words) else Launched(switch + 1, words[switch + 1])
    if name in _SUBCOMMANDS:
        valued, spellings = _SUBCOMMANDS[name]
        at = _skip_options(words, start + 1, valued)
        for spelling in spellings:
            if tuple(words[at : at + len(spelling)]) == spelling:
                return _first_operand(words, at + len(spelling), valued)
        return None
    return Launched(start, words[start])


def _python(words: Sequence[str], start: int) -> Launched | None:
    """``python [options] -m module``, ``python [options] script``; None for ``-c`` or no program."""
    at = start + 1
    while at < len(words):
        word = words[at]
        if word == "-m":
            return Launched(at + 1, words[at + 1], module=True) if at + 1 < len(words) else None
        if word.startswith("-m"):
            return Launched(at, word[2:], module=True)
        if word.startswith("-c") or word == "-":
            return None
        if not word.startswith("-"):
            return Launched(at, word)
        at += 2 if word in _PYTHON_VALUED else 1
    return None


def _first_operand(
    words: Sequence[str], at: int, valued: frozenset[str], *, assignments: bool = False
) -> Launched | None:
    """The first word from ``at`` that is neither an option nor an option's value (nor NAME=value, for ``env``)."""
    at = _skip_options(words, at, valued)
    while assignments and at < len(words) and _ASSIGNMENT.match(words[at]):
        at = _skip_options(words, at + 1, valued)
    return Launched(at, words[at]) if at < len(words) else None


def _skip_options(words: Sequence[str], at: int, valued: frozenset[str]) -> int:
    """Past the options (and their values) from ``at``; past a ``--`` that ends them."""
    while at < len(words) and words[at].startswith("-"):
        word = words[at]
        if word == "--":
            return at + 1
        at += 2 if word in valued else 1
    return at

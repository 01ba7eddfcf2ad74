"""What a call shows of the agent's intent, read from its tool's name, arguments and annotations.

Two things change how repeats are judged. A **wait** (a ``wait`` or ``sleep`` tool, a shell
command that sleeps) between two identical polls is the agent being patient, not looping. A
**write** acknowledged the same way as the one before ("OK", "No results", "1 row
affected") is new work, not the same result again; and after a successful new write, the
world a repeated read looks at may have changed.

Annotations win where a server gives them (``readOnlyHint``). Without them, a shell command that
writes files (``echo ... > f``, ``sed -i``, ``git commit``), then an argument that names the
operation (``{"command": "str_replace"}`` against ``{"command": "view"}``),
then the tool's name (``insert_row``, ``sendEmail``, ``git_commit``), then an argument that
holds an SQL statement changing data or schema.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final

__all__ = ["WAIT_WORDS", "WRITE_WORDS", "may_start", "name_words", "waits", "writes"]

WAIT_WORDS: Final = frozenset({"wait", "sleep", "pause", "delay"})
"""Words of a tool name that make it a waiting tool (``wait``, ``wait_for_job``, ``browser_wait_for``)."""
WRITE_WORDS: Final = frozenset(
    {
        "activate", "add", "alter", "append", "apply", "approve", "archive", "assign", "attach", "book",
        "cancel", "change", "charge", "chmod", "chown", "clear", "close", "comment", "commit", "configure",
        "connect", "create", "deactivate", "delete", "deploy", "detach", "disable", "disconnect", "drop", "edit",
        "enable", "exchange", "grant", "insert", "install", "invite", "kill", "link", "lock", "merge", "mkdir",
        "modify", "mount", "move", "patch", "pay", "post", "publish", "purchase", "push", "put", "reboot",
        "refuel", "refund", "register", "reject", "remove", "rename", "replace", "reply", "reserve", "reset",
        "restart", "restore", "resume", "return", "revoke", "save", "schedule", "send", "set", "start", "stop",
        "submit", "subscribe", "suspend", "switch", "toggle", "transfer", "truncate", "turn", "unlink", "unlock",
        "unmount", "unsubscribe", "update", "upgrade", "upload", "upsert", "write",
    }
)  # fmt: skip
"""Words of a tool name, or of an operation argument, that make a call a write."""
_OPERATION_NAMES: Final = frozenset({"command", "action", "operation", "op", "mode", "method"})
_SHELL_NAMES: Final = frozenset({"command", "cmd", "script", "code", "commands"})
_SHELL_WRITE: Final = re.compile(
    r"(?:^|[^\d<>&|=-])>>?\s*(?!&|/dev/null\b)[\w./~$\"'-]"  # output redirected to a file
    r"|(?:^|[;&|(`]|\$\()\s*(?:sudo\s+)?(?:"
    r"rm|mv|cp|mkdir|rmdir|touch|chmod|chown|ln|tee|patch|truncate|install|unzip|xargs\s+rm"
    r"|sed\s+(?:-\w*\s+)*-i|perl\s+-\w*i|find\b[^;&|]*\s-(?:delete|exec\s+rm)"
    r"|git\s+(?:add|commit|checkout|reset|rm|mv|apply|stash|merge|rebase|cherry-pick|push|restore|switch|revert)"
    r"|(?:pip3?|uv\s+pip|npm|pnpm|yarn|apt(?:-get)?|brew|cargo|go)\s+(?:install|add|i|ci|remove|uninstall)"
    r")\b",
    re.M,
)
"""A shell command that changes files: output redirected to one, or a command that writes (``sed -i``,
``git commit``, ``pip install``...)."""
_SQL_WRITE: Final = re.compile(
    r"\s*(?:(?:insert|replace|merge)\s+(?:or\s+\w+\s+)?into|update\s+\S+\s+set|delete\s+from|truncate\b"
    r"|(?:create|alter|drop)\s+(?:or\s+replace\s+|unique\s+|temp(?:orary)?\s+)*"
    r"(?:table|index|view|schema|database|sequence|function|trigger|type|extension|role|user)"
    r"|(?:grant|revoke)\s+\w+.*\bon\b)",
    re.I | re.S,
)
"""An SQL statement that changes data or schema (a search query that starts with "update" is not one)."""
_SQL_STARTS: Final = ("in", "re", "me", "up", "de", "tr", "cr", "al", "dr", "gr")
_SLEEP: Final = re.compile(
    r"\s*(?:sleep\s+\d+(?:\.\d+)?[smhd]?|start-sleep\b[^;&|]*\d|timeout\s+/t\s+\d+)(?:\s*(?:;|&&|\|\||$))", re.I
)
"""A shell command that sleeps first (``sleep 30``, ``sleep 5 && curl ...``)."""
_SLEEP_STARTS: Final = ("sl", "st", "ti")
_PYTHON_SLEEP: Final = re.compile(r"\btime\.sleep\(\s*\d")
_WORD: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_SHORT: Final = 512


@lru_cache(maxsize=1024)
@functools.lru_cache(maxsize=1024)  # tool names are few and asked about on every call
def name_words(tool: str) -> frozenset[str]:
    """The lower-case words of a tool name: ``wait_for_job``, ``sendEmail``, ``git__push``."""
    return frozenset(word.lower() for word in _WORD.findall(tool))


def waits(tool: str, arguments: Mapping[str, Any] | None) -> bool:
    """The call waits on purpose: a waiting tool, or a command that sleeps."""
    if WAIT_WORDS & name_words(tool):
        return True
    return any(isinstance(value, str) and len(value) <= _SHORT and _sleeps(value) for value in _values(arguments))


def may_start(text: str, starts: tuple[str, ...]) -> bool:
    """Whether ``text``, its leading spaces stripped, may start as a case-insensitive pattern does whose every
    match starts with one of ``starts`` (lower case, one or two characters): a strip before a regex that costs
    ten times more. A text whose first two characters are not both ASCII may (``re.I`` matches the long s
    to ``s``, the dotless i to ``i``), and so may a blank one."""
    head = text.lstrip()[:2]  # the regex's leading \s* skips the same characters
    return not head or not head.isascii() or head.lower().startswith(starts)


def _sleeps(value: str) -> bool:
    """A command that sleeps first, or Python code sleeping."""
    if may_start(value, _SLEEP_STARTS) and _SLEEP.match(value):
        return True
    return "sleep(" in value and _PYTHON_SLEEP.search(value) is not None


def writes(tool: str, arguments: Mapping[str, Any] | None, hints: Mapping[str, Any] | None) -> bool:
    """The call may change things: annotated so, or named or asked as a write when unannotated.

    A shell command says more than its tool's annotations (a shell tool is marked destructive for
    `rm`, not for `grep`): one that writes files is a write, one made only of commands that read is not.
    """
    shell = _shell_command(arguments)
    if shell is not None and (_SHELL_WRITE.search(shell) or _reads_only(shell)):
        return _SHELL_WRITE.search(shell) is not None
    if hints:
        read_only = hints.get("readOnlyHint")
        if read_only is not None:
            return read_only is False
        if hints.get("destructiveHint") is True:
            return True
    for name, value in (arguments or {}).items():
        if not isinstance(value, str) or not value:
            continue
        if name.lower() in _OPERATION_NAMES and len(value) <= _SHORT:
            return bool(WRITE_WORDS & name_words(value.split(None, 1)[0])) or _sql_write(value)
    if WRITE_WORDS & name_words(tool):
        return True
    values = _values(arguments)
    return any(isinstance(value, str) and len(value) <= _SHORT * 8 and _sql_write(value) for value in values)


def _sql_write(value: str) -> bool:
    """An SQL statement that changes data or schema."""
    return may_start(value, _SQL_STARTS) and _SQL_WRITE.match(value) is not None


def _shell_command(arguments: Mapping[str, Any] | None) -> str | None:
    """The shell command a call runs, if an argument holds one (a command with a space in it)."""
    for name, value in (arguments or {}).items():
        if name.lower() in _SHELL_NAMES and isinstance(value, str) and " " in value and len(value) <= _SHORT * 8:
            return value
    return None


def _reads_only(command: str) -> bool:
    """Every command of a shell line only reads (``grep -rn x src | head``, ``cd src && ls``)."""
    for segment in _SEGMENTS.split(command):
        words = segment.split()
        while words and (words[0] in _NEUTRAL or "=" in words[0]):
            words = words[1:]
        if not words or words[0] == "cd":
            continue
        if words[0] == "git":
            if len(words) < 2 or words[1] not in _GIT_READS:
                return False
        elif words[0] not in _READS:
            return False
    return True


_SEGMENTS: Final = re.compile(r"&&|\|\||[;|&\n(){}]")
_NEUTRAL: Final = frozenset({"sudo", "time", "nice", "true", "export", "set", "!"})
_READS: Final = frozenset(
    {
        "ag", "awk", "basename", "cat", "cmp", "column", "cut", "date", "df", "diff", "dirname", "du", "echo",
        "egrep", "env", "fgrep", "file", "find", "grep", "head", "id", "jq", "less", "ls", "more", "nl", "od",
        "printenv", "printf", "ps", "pwd", "readlink", "realpath", "rg", "sed", "sort", "stat", "tail", "test",
        "tr", "tree", "type", "uname", "uniq", "wc", "whereis", "which", "whoami", "xxd", "yq", "[",
    }
)  # fmt: skip
"""Commands that only read (a write among them shows as a redirection, ``sed -i``, ``find -delete``...)."""
_GIT_READS: Final = frozenset(
    {"blame", "diff", "grep", "log", "ls-files", "remote", "rev-parse", "shortlog", "show", "status"}
)


def _values(arguments: Mapping[str, Any] | None) -> list[Any]:
    """Top-level argument values, and the items of top-level lists (a command as an argv list)."""
    if not arguments:
        return []
    found: list[Any] = []
    for value in arguments.values():
        if isinstance(value, list):
            joined = " ".join(item for item in value if isinstance(item, str))
            found.append(joined)
        else:
            found.append(value)
    return found

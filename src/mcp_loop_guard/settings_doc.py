"""``docs/settings.md``, made from the settings registry: ``python -m mcp_loop_guard.settings_doc > docs/settings.md``.

``tests/unit/test_settings_registry.py`` fails when the file and the registry disagree, so a
contributor who changes a setting regenerates the file in the same commit.
"""

from __future__ import annotations

import re
import sys

from mcp_loop_guard.core.setting import Setting, camel
from mcp_loop_guard.registry import GROUPS, REMOVED, SETTINGS

__all__ = ["render"]

_HEADER = """\
# Settings

<!-- Made from the settings registry (src/mcp_loop_guard/core/registry.py for the loop rules,
src/mcp_loop_guard/process_settings.py for the others): edit those, then run
`python -m mcp_loop_guard.settings_doc > docs/settings.md`. -->

Every setting of mcp-loop-guard, once, by group.

Where a setting may be set:

- **global**: a `LOOP_GUARD_*` environment variable, a command-line flag, or a key of a config
  file's top-level `loopGuard` section (camelCase or snake_case: `warnThreshold` or
  `warn_threshold`). Flags win over variables, variables over the file, the file over the
  defaults. `mcp-loop-guard --help` lists the flags by the same groups.
- **per server**: a key of a server's own `loopGuard` section in the config file.
- **per tool**: a key of a pattern's section under `tools`: a server's (patterns over its own
  tool names) or the top-level `loopGuard.tools` (patterns over the names the client sees). See
  [Per-server and per-tool rules](deciding.md#per-server-and-per-tool-rules).

A value that cannot be used stops the guard at start with one message naming the variable, flag
or file key, the value and what is accepted; a key set where it may not be says where it may. A
`LOOP_GUARD_*` variable that is no setting is logged as a warning and ignored.
"""


def render() -> str:
    """The whole of docs/settings.md."""
    parts = [_HEADER, "Groups: " + " · ".join(f"[{title}](#{_anchor(title)})" for title, _ in GROUPS.values()) + "\n"]
    for key, (title, about) in GROUPS.items():
        parts.append(f"## {title[0].upper()}{title[1:]}\n\n{about}\n")
        parts.append("| Setting | Where | Default | Accepted values | Meaning |\n| --- | --- | --- | --- | --- |")
        parts.extend(_row(setting) for setting in SETTINGS if setting.group == key)
        parts.append("")
    removed = ", ".join(f"`{camel(name)}`" for name in REMOVED)
    reasons = "; ".join(sorted(set(REMOVED.values())))
    parts.append(f"## Removed\n\n{removed}: refused in a config file, ignored with a warning as variables; {reasons}.")
    parts.append("")
    return "\n".join(parts)


def _row(setting: Setting) -> str:
    names = [f"`{setting.key}`"]
    if "global" in setting.scopes:
        names += [f"`{setting.env}`", f"`{setting.flag}`"]
    where = ", ".join(label for scope, label in _WHERE if scope in setting.scopes)
    default = setting.shown_default if setting.default in (None, ()) else f"`{setting.shown_default}`"
    meaning = f"{setting.description} {setting.more}".strip()
    cells = ["<br>".join(names), where, default, _plain(setting.accepted), _plain(meaning)]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


_CODE_OR_LINK = re.compile(r"(`[^`]*`|\]\([^)]*\))")


def _plain(text: str) -> str:
    """``text`` with the ``*`` and ``_`` of patterns (``github__*``) kept literal, outside code spans and links."""
    parts = _CODE_OR_LINK.split(text)
    return "".join(part if index % 2 else re.sub(r"([*_])", r"\\\1", part) for index, part in enumerate(parts))


_WHERE = (("global", "global"), ("server", "per server"), ("tool", "per tool"))


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, spaces as dashes, punctuation dropped."""
    return "".join(char for char in title.lower().replace(" ", "-") if char.isalnum() or char in "-_")


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render())

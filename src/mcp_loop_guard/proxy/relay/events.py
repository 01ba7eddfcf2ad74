"""The event log: one JSON line per tool call with its verdict, in the trace format ``replay`` reads.

By default arguments and results are written as their fingerprints (``call``, ``outcome``),
never their values; with ``LOOP_GUARD_LOG_CONTENTS=true`` the values themselves. Lines are
appended with one write each, so several guard processes may share one file.

The file is this user's alone (:mod:`mcp_loop_guard.private_files`): never opened through a
symbolic link, never a FIFO or a device (which could block the guard or take its lines
elsewhere), never one another user could write.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from mcp_loop_guard import codec
from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.private_files import open_private, private_directory

logger = logging.getLogger(__name__)


class EventLog:
    """Appends trace lines to one file."""

    def __init__(self, path: Path, *, contents: bool) -> None:
        """Open ``path`` for appending (created with mode 0600: it may hold contents).

        Its folder is made 0700 when missing; an existing one may be a shared sticky one (``/tmp``).

        Raises:
            UnsafePathError: another user could write or redirect the file (or its folder).
            OSError: the file cannot be opened.
        """
        self.path = path
        self.contents = contents
        if not os.path.lexists(path.parent):
            private_directory(path.parent)
        self._fd = open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, shared_parent=True)
        self._failed = False

    def record(self, line: dict[str, Any], verdict: Verdict) -> None:
        """Write one call's line, with the verdict's action, rule and count."""
        line["verdict"] = verdict.judged.name.lower()
        if verdict.family is not None:
            line["rule"] = verdict.family.value
            line["count"] = verdict.streak
        if verdict.shadow:
            line["shadow"] = True
        try:
            os.write(self._fd, codec.dumps(line) + b"\n")
        except OSError as error:
            if not self._failed:
                logger.warning("cannot write the event log %s: %s; further failures are not logged", self.path, error)
                self._failed = True

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)

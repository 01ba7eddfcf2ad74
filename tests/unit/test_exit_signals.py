"""A guard whose exit is decided ignores stop signals: Python's teardown would give them their default action."""

from __future__ import annotations

import signal
import subprocess
import sys

SCRIPT = """
import signal, sys
from mcp_loop_guard.proxy.upstream import signals
signals.install()
handled = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
signals.exiting()
ignored = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
print(all(callable(h) for h in handled), ignored == [signal.SIG_IGN, signal.SIG_IGN])
signal.raise_signal(signal.SIGTERM)
sys.exit(7)
"""


def test_stop_signals_are_ignored_once_the_exit_is_decided() -> None:
    """After ``exiting()``, SIGINT and SIGTERM are ignored (not the default): a late one leaves the exit status."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, check=False)
    assert done.stdout.split() == ["True", "True"], done.stderr
    assert done.returncode == 7, (done.returncode, done.stderr)
    assert done.returncode != -signal.SIGTERM

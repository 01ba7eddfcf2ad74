"""mcp-proxy (PyPI) in a virtual environment of its own: it pins ``mcp<2``, which the project's cannot hold.

Made once and reused while its pins hold. scripts/test.sh makes it before the tests run
(``python -m tests.interop.mcp_proxy_venv``), as it installs the npm packages; the chain tests'
fixture makes it when it is missing (a developer running pytest alone). A lock keeps two test
runs in one checkout from building it at once.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".venvs" / "mcp-proxy"
REQUIREMENTS = ("mcp-proxy==0.13.0", "mcp==1.30.0")
"""mcp-proxy and the SDK it runs on (it requires mcp<2), pinned."""
INSTALL_TIMEOUT = 180.0
"""Seconds pip may take to install mcp-proxy the first time (about 10 here)."""


class InstallError(RuntimeError):
    """The environment could not be made (the failing command's output in the message)."""


def _run(argv: Sequence[str], timeout: float) -> None:
    try:
        subprocess.run(argv, check=True, capture_output=True, text=True, timeout=timeout)
    except subprocess.CalledProcessError as failed:
        raise InstallError(f"`{' '.join(argv)}` failed:\n{failed.stdout}\n{failed.stderr}") from None


@contextmanager
def _exclusive(path: Path, within: float) -> Iterator[None]:
    """Holds an exclusive lock on path, waiting up to `within` seconds for another test run to release it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        deadline = time.monotonic() + within
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InstallError(f"{path} stayed locked for {within} s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure() -> list[str]:
    """The argv prefix of mcp-proxy, its environment made first when missing or of other pins.

    Raises:
        InstallError: a command failed, or another run held the lock too long.
    """
    python = VENV / "bin" / "python"
    stamp = VENV / "installed.txt"
    wanted = "\n".join(REQUIREMENTS)
    with _exclusive(VENV.parent / "mcp-proxy.lock", INSTALL_TIMEOUT + 60):
        if not (python.exists() and stamp.exists() and stamp.read_text(encoding="utf-8") == wanted):
            shutil.rmtree(VENV, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(VENV)], timeout=120)
            pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            _run([*pip, *REQUIREMENTS], timeout=INSTALL_TIMEOUT)
            stamp.write_text(wanted, encoding="utf-8")
    return [str(python), "-m", "mcp_proxy"]


if __name__ == "__main__":
    try:
        ensure()
    except InstallError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)

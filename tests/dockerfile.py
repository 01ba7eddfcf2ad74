"""The repository's Dockerfile, read as the image would run: the final stage's instructions, its command line.

No container engine runs on the development machines, so tests run the image's command line
here instead, with only what must differ outside a container replaced (paths, ports).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from tests.harness import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"
IMAGE_CONFIG = "/config/mcp.json"
IMAGE_PORT = "8080"


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """The (INSTRUCTION, arguments) pairs of the final stage, continuation lines joined."""
    logical: list[str] = []
    pending = ""
    for raw in dockerfile.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    pairs = [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in logical]
    last_from = max(index for index, (name, _) in enumerate(pairs) if name == "FROM")
    return pairs[last_from:]


def exec_form(arguments: str) -> list[str]:
    """The argv of an exec-form (JSON array) instruction."""
    argv = json.loads(arguments)
    assert isinstance(argv, list), arguments
    assert all(isinstance(part, str) for part in argv), arguments
    return [str(part) for part in argv]


def image_command(dockerfile: Path) -> list[str]:
    """ENTRYPOINT followed by CMD, both in exec form, as the image runs them."""
    found = dict(instructions(dockerfile))
    return exec_form(found["ENTRYPOINT"]) + exec_form(found["CMD"])


def image_environment(dockerfile: Path) -> dict[str, str]:
    """The variables the final stage sets with ENV KEY=VALUE."""
    env: dict[str, str] = {}
    for name, arguments in instructions(dockerfile):
        if name == "ENV":
            for key, value in re.findall(r"(\w+)=(\"[^\"]*\"|\S+)", arguments):
                env[key] = value.strip('"')
    return env


def healthcheck_command(dockerfile: Path) -> list[str]:
    """The exec-form command of HEALTHCHECK."""
    arguments = dict(instructions(dockerfile))["HEALTHCHECK"]
    return exec_form(arguments[arguments.index("CMD") + len("CMD") :].strip())


def localized(command: Sequence[str], config: Path, port: int) -> list[str]:
    """The image's command with the config path and port of this machine; without tini when it is not installed."""
    argv = list(command)
    if argv[:2] == ["tini", "--"] and shutil.which("tini") is None:
        argv = argv[2:]
    assert IMAGE_CONFIG in argv, argv
    argv[argv.index(IMAGE_CONFIG)] = str(config)
    port_flag = argv.index("--port")
    assert argv[port_flag + 1] == IMAGE_PORT, argv
    argv[port_flag + 1] = str(port)
    return argv

"""Command line: ``mcp-loop-guard [OPTIONS] -- COMMAND [ARG...]`` and ``mcp-loop-guard demo``.

Every setting is a flag generated from the Settings declaration, so a new
setting gets its flag, its help text and its environment variable at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

import anyio

from mcp_loop_guard import __version__
from mcp_loop_guard.settings import SettingsError, load_settings, setting_fields

EXIT_USAGE = 2

_EPILOG = """\
examples:
  mcp-loop-guard -- uvx mcp-server-time
  mcp-loop-guard --warn-threshold 4 --ignore-tools 'todo_*' -- npx -y @modelcontextprotocol/server-everything
  mcp-loop-guard demo

exit codes: 0 client closed the session, 1 the upstream could not be started,
2 bad usage or settings, 3 the session was aborted for looping.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-loop-guard",
        description="Guard an MCP server against agents stuck repeating the same tool call.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mcp-loop-guard {__version__}")
    parser.add_argument("--cwd", help="working directory of the upstream command")
    for field in setting_fields():
        flag = "--" + field.name.replace("_", "-")
        default = ",".join(field.default) if isinstance(field.default, tuple) else field.default
        help_text = f"{field.description} (env LOOP_GUARD_{field.name.upper()}, default {default!s})"
        if field.type is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            parser.add_argument(flag, default=None, metavar=field.name.split("_")[-1].upper(), help=help_text)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]: the upstream MCP server")
    return parser


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mcp-loop-guard: %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if level.lower() != "debug":
        # The SDK logs every malformed frame and transport hiccup at length.
        logging.getLogger("mcp").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["demo"]:
        from mcp_loop_guard.demo import run_demo  # noqa: PLC0415 - rich loads only for the demo

        return run_demo(args_list[1:])
    parser = _parser()
    args = parser.parse_args(args_list)
    command: list[str] = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.print_usage(sys.stderr)
        print("mcp-loop-guard: error: give the upstream server command after --", file=sys.stderr)
        return EXIT_USAGE
    overrides: dict[str, Any] = {f.name: getattr(args, f.name) for f in setting_fields()}
    try:
        settings = load_settings(**overrides)
    except SettingsError as exc:
        print(f"mcp-loop-guard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _configure_logging(settings.log_level)

    from mcp_loop_guard.app import serve_stdio  # noqa: PLC0415 - keep --help and errors fast

    return anyio.run(partial(serve_stdio, command, settings, cwd=args.cwd))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

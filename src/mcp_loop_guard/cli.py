"""Command line: ``mcp-loop-guard [OPTIONS] -- COMMAND [ARG...]`` and its subcommands.

Every setting is a flag made from the settings registry (:mod:`mcp_loop_guard.cli_options`),
so a new setting gets its flag, its help text and its environment variable at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import socket
import sys
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from mcp_loop_guard import log_repeats, pydantic_plugins
from mcp_loop_guard.exits import EXIT_START_FAILED, EXIT_USAGE
from mcp_loop_guard.posix import unsupported
from mcp_loop_guard.redaction import program_name

if TYPE_CHECKING:
    from mcp_loop_guard.config import GuardConfig
    from mcp_loop_guard.proxy.upstream.child import ChildProcess, UpstreamStartError

SUBCOMMANDS = ("wrap", "unwrap", "replay", "state", "demo")


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        upstream = getattr(record, "upstream", None)
        if upstream is not None:
            entry["upstream"] = upstream
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _configure_logging(level: str, log_format: str = "text", *, contents: bool = False) -> None:
    from mcp_loop_guard.proxy.upstream.child import relay_stderr_as_logs  # noqa: PLC0415 - see main()

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(log_repeats.FILTER)
    relay_stderr_as_logs(log_format == "json")
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("mcp-loop-guard: %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if not contents:
        # Libraries log frames, bodies and transport hiccups at length, contents included: at
        # debug level that would leak arguments and results, so they stay quiet unless asked.
        for noisy in ("mcp", "uvicorn", "httpx2", "httpcore", "sse_starlette"):
            logging.getLogger(noisy).setLevel(logging.ERROR)


def _early_child(args: Sequence[str]) -> ChildProcess | UpstreamStartError | None:
    """Start the ``-- COMMAND`` upstream before anything else is imported.

    The upstream (often a Python or Node server that takes half a second to start) then
    starts while the guard loads its own modules and settings (over HTTP, its web stack and
    the SDK too), so the client waits for the slower of the two, not for both. A bad setting
    found later stops this child again.
    """
    from mcp_loop_guard.proxy.upstream.child import UpstreamStartError, spawn  # noqa: PLC0415 - see main()

    if "--" not in args:
        return None
    split = list(args).index("--")
    options, command = args[:split], args[split + 1 :]
    if not command or any(flag in options for flag in ("-h", "--help", "--version", "--config", "--upstream")):
        return None
    transport = _option(options, "--transport") or os.environ.get("LOOP_GUARD_TRANSPORT", "stdio")
    if transport.strip().lower() not in ("stdio", "http", "sse"):
        return None
    if transport.strip().lower() != "stdio" and not _port_free(options):
        return None  # the guard will stop at its own bind, and the upstream must not start for nothing
    try:
        return spawn(command, name=program_name(command[0]), cwd=_option(options, "--cwd"), display=shlex.join(command))
    except UpstreamStartError as error:
        return error


def _port_free(options: Sequence[str]) -> bool:
    """Whether the HTTP guard's address (from flags or the environment) can be listened on now."""
    from mcp_loop_guard.proxy.downstream.http.listen import ListenError, listen  # noqa: PLC0415 - standard library

    host = _option(options, "--host") or os.environ.get("LOOP_GUARD_HOST", "127.0.0.1")
    port = _option(options, "--port") or os.environ.get("LOOP_GUARD_PORT", "8080")
    if not port.strip().isdigit():
        return True  # a bad value: the settings check reports it
    try:
        sockets = listen(host, int(port))
    except (ListenError, OverflowError):
        return False
    for sock in sockets:
        sock.close()
    return True


def _option(options: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag VALUE`` or ``--flag=VALUE`` among the options, if given."""
    for index, option in enumerate(options):
        if option == flag and index + 1 < len(options):
            return options[index + 1]
        if option.startswith(flag + "="):
            return option.partition("=")[2]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and (meant := _misspelt(args_list[0])) is not None:
        print(
            f"mcp-loop-guard: error: unknown command `{args_list[0]}`: did you mean `{meant}`? (to guard a program "
            f"of that name, put -- first: mcp-loop-guard -- {shlex.join(args_list)})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args_list[:1] in (["wrap"], ["unwrap"]):
        from mcp_loop_guard.wrap import main as wrap_main  # noqa: PLC0415 - the MCP SDK stays unloaded

        return wrap_main(args_list[1:], undo=args_list[0] == "unwrap")
    if args_list[:1] == ["replay"]:
        return _replay(args_list[1:])
    if args_list[:1] == ["state"]:
        from mcp_loop_guard.state_cli import main as state_main  # noqa: PLC0415 - the MCP SDK stays unloaded

        return state_main(args_list[1:])
    return _on_a_supported_system(args_list)


def _on_a_supported_system(args_list: list[str]) -> int:
    """The demo or the guard (the demo starts the guard too), once the system is one the guard runs on."""
    if (refusal := unsupported(sys.platform)) is not None:
        print(refusal, file=sys.stderr)
        return EXIT_USAGE
    if args_list[:1] == ["demo"]:
        from mcp_loop_guard.demo import run_demo  # noqa: PLC0415 - rich loads only for the demo

        return run_demo(args_list[1:])
    return _guard(args_list)


def _guard(args_list: list[str]) -> int:
    """Start the upstream, then the guard in front of it; whatever happens, no child outlives a failed start."""
    pydantic_plugins.keep_out()  # before the first model is built
    # Loaded once the system is known to be one the guard runs on (they need POSIX).
    from mcp_loop_guard.proxy.upstream import signals  # noqa: PLC0415
    from mcp_loop_guard.proxy.upstream.child import ChildProcess  # noqa: PLC0415

    signals.install()  # before the upstream starts: no signal may kill the guard and leave it running
    first: ChildProcess | None = None
    try:
        early = _early_child(args_list)
        first = early if isinstance(early, ChildProcess) else None
        return _start(args_list, early)
    except signals.Stopped as stopped:
        return 128 + stopped.signum
    finally:
        if first is not None and not first.adopted:
            first.kill_now()
        signals.exiting()
        log_repeats.report_held()


def _misspelt(word: str) -> str | None:
    """The subcommand ``word`` is one edit away from (a letter added, dropped, changed or two swapped), if any.

    Without ``--`` the first word would otherwise be run as the server: ``stat`` for ``state``.
    """
    for command in SUBCOMMANDS:
        if word == command or abs(len(word) - len(command)) > 1:
            continue
        if len(word) == len(command):
            differ = [at for at in range(len(word)) if word[at] != command[at]]
            swapped = len(differ) == 2 and differ[1] == differ[0] + 1 and word[differ[0]] == command[differ[1]]
            if len(differ) == 1 or (swapped and word[differ[1]] == command[differ[0]]):
                return command
        else:
            short, long = sorted((word, command), key=len)
            if any(long[:at] + long[at + 1 :] == short for at in range(len(long))):
                return command
    return None


def _replay(args_list: list[str]) -> int:
    """``replay [OPTIONS] FILE...``: judge recorded traces with these settings; print a timeline or JSON lines."""
    from mcp_loop_guard.cli_options import add_setting_flags  # noqa: PLC0415
    from mcp_loop_guard.config import ConfigError, GuardConfig  # noqa: PLC0415
    from mcp_loop_guard.config_file import load_config  # noqa: PLC0415
    from mcp_loop_guard.plan import plan  # noqa: PLC0415
    from mcp_loop_guard.replay import TraceError, run  # noqa: PLC0415
    from mcp_loop_guard.settings import (  # noqa: PLC0415
        RULE_SETTINGS,
        FileSettings,
        SettingsError,
        load_settings,
        setting_fields,
    )

    fields = [field for field in setting_fields() if field.name in RULE_SETTINGS]
    parser = argparse.ArgumentParser(
        prog="mcp-loop-guard replay",
        usage="mcp-loop-guard replay [OPTIONS] FILE...",
        description="Judge recorded tool calls (trace files, or the event log) as the guard would, with these "
        "settings; `-` reads standard input.",
    )
    parser.add_argument("--config", metavar="FILE", help="an mcpServers JSON file: its loopGuard sections apply")
    parser.add_argument("--json", action="store_true", help="one JSON object per input line instead of a timeline")
    parser.add_argument(
        "--spacing",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="seconds between lines that record no time (`at`), plus their `wait` (default: 1)",
    )
    add_setting_flags(parser, fields)
    parser.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args(args_list)
    overrides = {field.name: getattr(args, field.name) for field in fields}
    try:
        config = load_config(Path(args.config)) if args.config else GuardConfig(None, (), FileSettings({}))
        decided = plan(config, load_settings(config.settings, **overrides))
    except (ConfigError, SettingsError) as exc:
        print(f"mcp-loop-guard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        servers = decided.config.servers
        only = servers[0].name if len(servers) == 1 else ""
        return run(args.files, decided.policies, as_lines=args.json, server=only, spacing=args.spacing)
    except TraceError as exc:
        print(f"mcp-loop-guard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `replay ... | head`: the reader has what it wanted
        _quiet_closed_stdout()
        return 0


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more, for a flag."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        msg = f"expected a number of seconds, 0 or more, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _quiet_closed_stdout() -> None:
    """Point stdout at /dev/null so that Python's flush at exit does not complain of the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _check_proxy_variables(config: GuardConfig) -> None:
    """Stop at start on a proxy variable an HTTP upstream would need and cannot use (stdio-only guards never look)."""
    if any(hasattr(spec, "url") for spec in config.servers):
        from mcp_loop_guard.proxy.upstream.forward_proxy import check_proxy_variables  # noqa: PLC0415

        check_proxy_variables(config.servers)


def _command_line(args_list: list[str]) -> tuple[argparse.Namespace, list[str]] | None:
    """The options and the upstream command; None, with the usage printed, when not exactly one upstream is given.

    The parser, with a flag for every setting, is dropped on return: the guard serves without it.
    """
    from mcp_loop_guard.cli_options import guard_parser  # noqa: PLC0415
    from mcp_loop_guard.settings import setting_fields  # noqa: PLC0415

    parser = guard_parser(setting_fields())
    args = parser.parse_args(args_list)
    command: list[str] = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    sources = [bool(command), args.config is not None, args.upstream is not None]
    if sum(sources) != 1:
        parser.print_usage(sys.stderr)
        print(
            "mcp-loop-guard: error: give exactly one upstream: `-- COMMAND [ARG...]`, --upstream URL or --config FILE",
            file=sys.stderr,
        )
        return None
    if args.header and args.upstream is None:
        parser.print_usage(sys.stderr)
        print("mcp-loop-guard: error: --header goes with --upstream URL", file=sys.stderr)
        return None
    return args, command


def _start(args_list: list[str], early: ChildProcess | UpstreamStartError | None) -> int:
    """Parse, check, and serve."""
    from mcp_loop_guard.app import serve  # noqa: PLC0415 - loaded after the upstream has started
    from mcp_loop_guard.config import ConfigError, command_line_config  # noqa: PLC0415
    from mcp_loop_guard.plan import plan  # noqa: PLC0415
    from mcp_loop_guard.proxy.upstream.child import UpstreamStartError  # noqa: PLC0415 - loaded already
    from mcp_loop_guard.settings import SettingsError, load_settings, setting_fields  # noqa: PLC0415

    parsed = _command_line(args_list)
    if parsed is None:
        return EXIT_USAGE
    args, command = parsed
    overrides: dict[str, Any] = {f.name: getattr(args, f.name) for f in setting_fields()}
    try:
        if args.config is not None:
            from mcp_loop_guard.config_file import load_config  # noqa: PLC0415 - read only by a guard given a file

            config = load_config(Path(args.config))
        else:
            config = command_line_config(args.upstream, args.header, command, args.cwd)
        settings = load_settings(config.settings, **overrides)
        decided = plan(config, settings, overrides)
        _check_proxy_variables(config)
    except (ConfigError, SettingsError) as exc:
        print(f"mcp-loop-guard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    listeners: list[socket.socket] = []
    if settings.transport != "stdio":
        from mcp_loop_guard.proxy.downstream.http.listen import ListenError, listen  # noqa: PLC0415

        try:
            listeners = listen(settings.host, settings.port)
        except ListenError as exc:
            print(f"mcp-loop-guard: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    _configure_logging(settings.log_level, settings.log_format, contents=settings.log_contents)
    if isinstance(early, UpstreamStartError):
        if settings.transport == "stdio":
            logging.getLogger("mcp_loop_guard").error("%s (command: `%s`)", early, early.command_line)
            return EXIT_START_FAILED
        early = None  # over HTTP a broken upstream is reported in /readyz and retried, never fatal
    first = early if early is not None and decided.single_stdio is not None else None
    if first is not None:
        first.adopted = True
    from mcp_loop_guard.proxy.upstream import signals  # noqa: PLC0415 - loaded already

    signals.serving()  # from now on the event loop takes the signals
    return _serve_or_refuse(partial(serve, decided, first, listeners), first)


def _serve_or_refuse(serving: Callable[[], Coroutine[Any, Any, int]], first: ChildProcess | None) -> int:
    """Serve; a state store or event log that cannot be had is one line on stderr and exit 2, no traceback."""
    from mcp_loop_guard.private_files import UnsafePathError  # noqa: PLC0415 - loaded after the upstream has started
    from mcp_loop_guard.store import StoreSetupError  # noqa: PLC0415

    refused: list[BaseException] = []
    try:
        return anyio.run(serving)
    except* (StoreSetupError, UnsafePathError) as group:
        refused = _leaves(group)
    if first is not None:
        first.kill_now()
    print(f"mcp-loop-guard: error: {refused[0]}", file=sys.stderr)
    return EXIT_USAGE


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions in a group, nested groups opened."""
    return [
        leaf
        for error in group.exceptions
        for leaf in (_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    ]


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""The process settings, declared once: how the guard is reached, where it keeps state, what it logs, its limits.

The loop rules are declared in the core (:mod:`mcp_loop_guard.core.registry`); both are listed
together, by group, in :mod:`mcp_loop_guard.registry`.
"""

from __future__ import annotations

from functools import partial
from typing import Final, Literal

from mcp_loop_guard.budgets import SHORT_FORM, BudgetSpec, parse_budgets
from mcp_loop_guard.core.setting import SERVER, Setting
from mcp_loop_guard.setting_checks import (
    Secret,
    check_hosts,
    check_listen_host,
    check_origins,
    check_state,
    check_text,
    check_token,
    check_tokens,
    header_name,
)

__all__ = ["PROCESS"]

_upstreams = partial(Setting, group="upstreams")
_budgets = partial(Setting, group="budgets")
_events = partial(Setting, group="events")
_state = partial(Setting, group="state")
_http = partial(Setting, group="http")
_security = partial(Setting, group="security")
_logging = partial(Setting, group="logging")
_limits = partial(Setting, group="limits")

_MIB = 1024 * 1024
_LIST_HOSTS = "a comma-separated list of host or host:port values (port may be *)"

PROCESS: Final[tuple[Setting, ...]] = (
    _upstreams(
        "watch_config",
        bool,
        False,
        "Reload the --config file whenever it changes (SIGHUP always reloads it).",
        more="See [Reloading the config](operations.md#reloading-the-config).",
    ),
    _budgets(
        "budgets",
        tuple[BudgetSpec, ...],
        (),
        "Caps on one agent's calls, loops or not: search_*=20/3600 allows 20 calls to search_* an hour.",
        scopes=SERVER,
        values=SHORT_FORM,
        rule=True,
        parse=parse_budgets,
        more="A config file gives a list of objects (`tools`, `maxCalls`, `perSeconds`); per server, over the "
        "server's own tool names, on top of the global ones. See [Budgets](deciding.md#budgets).",
    ),
    _events(
        "event_log",
        str | None,
        None,
        "Append one JSON line per tool call and its verdict to this file (for replay).",
        values="a file path",
        unset="none",
        check=check_text,
        more="See [Event log and replay](operations.md#event-log-and-replay).",
    ),
    _state(
        "state",
        str,
        "sqlite",
        "Where loop state lives: sqlite (a file in the user's state directory), sqlite:///path, memory, "
        "or redis://host:port/db (rediss:// too).",
        values="memory, sqlite, sqlite:///path/to/file, redis://host:port/db or rediss://...",
        check=check_state,
        more="Redis needs `pip install 'mcp-loop-guard[redis]'` (without it: exit 2, naming it). See [State "
        "across restarts](state.md).",
    ),
    _state(
        "state_timeout_seconds",
        float,
        0.25,
        "Longest wait for the state store per call before failing open or closed.",
        gt=0,
    ),
    _state(
        "state_fail",
        Literal["open", "closed"],
        "open",
        "When the state store is unavailable: let calls pass (open) or refuse them.",
        more="`open` judges on the state last seen; `closed` refuses (SQLite: from the call after the failed write).",
    ),
    _state(
        "agent_key",
        str | None,
        None,
        "Key of this agent's loop state, instead of one derived from the client process (stdio).",
        values="a non-empty string",
        unset="derived from the client process",
        check=check_text,
    ),
    _http(
        "transport",
        Literal["stdio", "http", "sse"],
        "stdio",
        "How clients reach the guard: stdio, streamable HTTP (/mcp) or SSE (/sse).",
    ),
    _http(
        "host",
        str,
        "127.0.0.1",
        "Address the HTTP server listens on.",
        values="a host name or IP address",
        check=check_listen_host,
    ),
    _http("port", int, 8080, "Port the HTTP server listens on.", ge=1, le=65535),
    _http("stateless", bool, False, "Serve streamable HTTP without sessions (no Mcp-Session-Id)."),
    _http(
        "child_per_session",
        bool,
        False,
        "Start each stdio server anew for every session, with that client's own handshake (its name, roots and log "
        "level reach the server, and the server's requests reach that client), instead of one child that every "
        "session shares. Requests without a session (--stateless, 2026-07-28) still share one.",
    ),
    _http(
        "session_key_header",
        str,
        "X-Loop-Guard-Key",
        "Header keying the loop state of sessionless requests; without it, the client address.",
        values="an HTTP header name",
        check=header_name,
    ),
    _http(
        "sse_ping_seconds",
        float,
        15.0,
        "Seconds of silence after which the guard's own event streams carry a comment, so proxies between it and "
        "the client do not cut them as idle (0: never).",
        ge=0,
        more="Only streams the guard writes itself (its own sessions: in front of one stdio server, or of one legacy "
        "SSE server); clients skip the comment. nginx cuts idle streams after 60 s.",
    ),
    _security(
        "auth_token",
        Secret | None,
        None,
        "Bearer token every HTTP request must carry (Authorization: Bearer ...); prefer the variable.",
        values="a token of visible ASCII characters without spaces",
        unset="no authentication, unless named tokens are set",
        secret=True,
        check=check_token,
        more="Every request but /healthz.",
    ),
    _security(
        "auth_tokens",
        Secret | None,
        None,
        "Named bearer tokens, name:token pairs separated by commas; loop state keys are kept per name.",
        values="name:token pairs separated by commas (names of letters, digits, _ and -)",
        unset="none",
        secret=True,
        check=check_tokens,
    ),
    _security(
        "admin_token",
        Secret | None,
        None,
        "Bearer token of the admin API (/admin/agents: list agents, reset one).",
        values="a token without spaces or control characters",
        unset="no admin API",
        secret=True,
        check=check_token,
    ),
    _security(
        "trust_key_header",
        bool,
        True,
        "Key sessionless loop state by the key header; off: by token name (or client address) only.",
        more="Off, a client cannot choose its agent: give each client its own named token.",
    ),
    _security(
        "allowed_hosts",
        tuple[str, ...],
        (),
        "Comma-separated extra Host values for DNS-rebinding protection (example.com:*).",
        values=_LIST_HOSTS,
        check=check_hosts,
        more="Loopback names are always allowed; other Host values get 421.",
    ),
    _security(
        "allowed_origins",
        tuple[str, ...],
        (),
        "Comma-separated extra Origin values for DNS-rebinding protection (https://app.example.com).",
        values="a comma-separated list of origins like https://app.example.com:* (no path)",
        check=check_origins,
        more="Loopback origins are always allowed; other Origin values get 403.",
    ),
    _logging(
        "log_level",
        Literal["debug", "info", "warning", "error"],
        "info",
        "Least severe log level written to stderr.",
    ),
    _logging(
        "log_format",
        Literal["text", "json"],
        "text",
        "Log lines as text or one JSON object.",
        more="With json, upstreams' stderr lines are records too.",
    ),
    _logging(
        "log_contents",
        bool,
        False,
        "UNSAFE: log tool arguments and results (they may hold secrets); for debugging only.",
        more="They are written to the event log too. The guard warns at start when it is on.",
    ),
    _limits(
        "call_timeout_seconds",
        float | None,
        None,
        "Seconds an upstream request may go without an answer or progress before it is cancelled.",
        gt=0,
        unset="no limit",
        more="The client gets an error saying so. Per server: `callTimeoutSeconds` in its config entry. Requests "
        "that rightly stay open are exempt: a `subscriptions/listen` stream, and `tasks/result`, which waits for "
        "a task bounded by its own time-to-live.",
    ),
    _limits(
        "max_message_bytes",
        int,
        64 * _MIB,
        "Largest JSON-RPC message accepted on a stdio channel (a client request or an upstream result).",
        gt=0,
        more="A larger client message gets -32600; a larger upstream answer is dropped as it streams by and its "
        "call gets an error naming the limit, so memory stays bounded.",
    ),
    _limits(
        "max_request_bytes",
        int,
        4 * _MIB,
        "Largest HTTP request body accepted; larger ones get 413.",
        gt=0,
        more="JSON nested too deeply to read gets 400 with the request's id.",
    ),
    _limits(
        "max_sessions",
        int,
        1000,
        "Live HTTP sessions; when full the least recently used idle one is closed.",
        ge=1,
        more="When every session has a request in flight, `initialize` gets 503 with `Retry-After: 5`.",
    ),
    _limits(
        "max_keys",
        int,
        10_000,
        "Sessionless loop states kept in memory (least recently used dropped).",
        ge=1,
        more="A dropped agent's state stays in a SQLite or Redis store; when every one has a call in flight, the "
        "request gets 503 with `Retry-After: 5`.",
    ),
    _limits(
        "max_connections",
        int,
        500,
        "Concurrent HTTP connections; more get 503 at once.",
        ge=1,
        more="Also kept 64 below the open-file limit. At the cap the oldest connection still waiting for a complete "
        "request is closed to make room, or else the newcomer gets 503 with `Retry-After: 1`.",
    ),
    _limits(
        "header_timeout_seconds",
        float,
        10.0,
        "Seconds a client may take to send an HTTP request's line and headers.",
        gt=0,
        more="Also how long a kept-alive connection may wait before its next request.",
    ),
    _limits(
        "body_timeout_seconds",
        float,
        30.0,
        "Seconds a client may take to send an HTTP request's body after its headers.",
        gt=0,
        more="Then 408, and a second later the connection is closed if the body is still coming.",
    ),
    _limits(
        "max_pending_requests",
        int,
        64,
        "Upstream requests (sampling, roots, ping) awaiting one client at once.",
        ge=1,
        more="Over stdio too; the excess is answered upstream with an error.",
    ),
    _limits(
        "health_interval_seconds",
        float,
        10.0,
        "Seconds between an HTTP guard's pings of an idle HTTP or SSE upstream, to notice it went away.",
        gt=0,
        more="Also how long a ping may take. `/readyz` then reports the upstream down, and the guard reconnects.",
    ),
    _limits(
        "session_idle_seconds",
        float,
        1800.0,
        "Idle seconds after which HTTP sessions and keyed loop states expire.",
        gt=0,
        more="Also how long a stored loop state outlives its agent's last call (stdio included).",
    ),
)

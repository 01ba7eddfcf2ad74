"""The HTTP front door, as plain ASGI wrappers: Host/Origin, bearer tokens, body limits and time.

Every request passes these before anything keeps state for it: a request refused here
(421/403 for a foreign Host or Origin, 401 without a valid token, 413 for a body too large,
408 for a body too slow, 400 for JSON nested too deeply to read) creates no session and no
loop state. A valid token's name is put in the request scope: sessionless loop state is kept
per token name.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_loop_guard import codec
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.wire.messages import INVALID_REQUEST, top_level_id
from mcp_loop_guard.settings import Settings

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings

_LOCAL_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"]
_LOCAL_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
TOKEN_NAME = "mcp-loop-guard.token"  # noqa: S105 - a scope key, not a secret
"""Scope state key holding the name of the token a request was accepted with."""
RETRY_AFTER_BUSY = 5
"""Seconds a client refused for lack of room (503) is told to wait."""


@dataclass(frozen=True, slots=True)
class HostRules:
    """The Host and Origin values a request may carry (``*`` as a port matches any)."""

    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]


def security_settings(settings: Settings) -> HostRules:
    """Host/Origin checks, always on: loopback names plus whatever the operator allowed."""
    return HostRules(
        allowed_hosts=(*_LOCAL_HOSTS, *settings.allowed_hosts),
        allowed_origins=(*_LOCAL_ORIGINS, *settings.allowed_origins),
    )


def transport_security(rules: HostRules) -> TransportSecuritySettings:
    """The same rules for the SDK's server transports, which check them again on the paths they serve."""
    from mcp.server.transport_security import TransportSecuritySettings  # noqa: PLC0415 - only SDK paths load the SDK

    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(rules.allowed_hosts),
        allowed_origins=list(rules.allowed_origins),
    )


async def reply(
    send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = (), request_id: object = None
) -> None:
    """A JSON-RPC error as the whole HTTP response."""
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": INVALID_REQUEST, "message": message}})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})


def retry_after(seconds: int) -> list[tuple[bytes, bytes]]:
    """The header telling a refused client when to try again."""
    return [(b"retry-after", str(seconds).encode())]


async def sessions_busy(send: Send) -> None:
    """503: the session limit is reached and every session has a request in flight."""
    await reply(send, 503, replies.TOO_MANY_SESSIONS, retry_after(RETRY_AFTER_BUSY))


def header(scope: Scope, name: bytes) -> bytes | None:
    """One request header (first occurrence), by lower-case name."""
    return next((value for key, value in scope["headers"] if key == name), None)


def trace_headers(scope: Scope) -> dict[str, str] | None:
    """The W3C trace context a request carries in its headers (``traceparent``, ``tracestate``), if any."""
    found = {key: value.decode("latin-1") for key, value in scope["headers"] if key in (b"traceparent", b"tracestate")}
    return {key.decode(): value for key, value in found.items()} or None


class HostGuard:
    """Host and Origin must be loopback or allowed, on every path but ``/healthz`` (a liveness probe)."""

    def __init__(self, app: ASGIApp, security: HostRules, open_paths: Sequence[str] = ()) -> None:
        """``open_paths``: paths answered whatever the Host."""
        self.app = app
        self.hosts = list(security.allowed_hosts)
        self.origins = list(security.allowed_origins)
        self.open_paths = tuple(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """421 for a foreign Host, 403 for a foreign Origin."""
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        host = (header(scope, b"host") or b"").decode("latin-1")
        if not _matches(host, self.hosts):
            await reply(send, 421, replies.HOST_NOT_ALLOWED)
            return
        origin = header(scope, b"origin")
        if origin is not None and not _matches(origin.decode("latin-1"), self.origins):
            await reply(send, 403, replies.ORIGIN_NOT_ALLOWED)
            return
        await self.app(scope, receive, send)


def _matches(value: str, allowed: Sequence[str]) -> bool:
    if not value:
        return False
    return any(value == entry or (entry.endswith(":*") and value.startswith(entry[:-1])) for entry in allowed)


class AuthGuard:
    """Every request but the open paths must carry ``Authorization: Bearer <token>`` (any case) when tokens are set."""

    def __init__(self, app: ASGIApp, tokens: Mapping[str, str], open_paths: Sequence[str] = ()) -> None:
        """``tokens``: name -> token; empty turns authentication off."""
        self.app = app
        self.tokens = [(name, token.encode()) for name, token in tokens.items()]
        self.open_paths = tuple(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """401 unless one of the tokens matches (every token is compared, in constant time)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        name = self.token_name(header(scope, b"authorization"))
        if self.tokens and name is None and scope["path"] not in self.open_paths:
            await reply(send, 401, replies.TOKEN_REQUIRED, [(b"www-authenticate", b"Bearer")])
            return
        scope.setdefault("state", {})[TOKEN_NAME] = name or ""
        await self.app(scope, receive, send)

    def token_name(self, given: bytes | None) -> str | None:
        """The name of the token ``given`` carries, or None."""
        if not self.tokens or given is None:
            return None
        scheme, _, presented = given.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        presented = presented.strip()
        found: str | None = None
        for name, token in self.tokens:
            if hmac.compare_digest(presented, token):
                found = name
        return found


class BodyGuard:
    """A request body must fit the limit (413), arrive in time (408), and be JSON the guard can read.

    The body is read here, whole (it is bounded), and handed on as one chunk. JSON nested too
    deeply for any parser gets its JSON-RPC error with the request's own id (400), instead of
    an answer nobody can match to the request.
    """

    def __init__(self, app: ASGIApp, limit: int, timeout: float, json_paths: Sequence[str] = ()) -> None:
        """``json_paths``: paths whose POST bodies are JSON-RPC messages."""
        self.app = app
        self.limit = limit
        self.timeout = timeout
        self.json_paths = tuple(json_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read, check, then pass the request on with its body replayed."""
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(send)
            return
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(self.timeout) as slow:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.limit:
                    await self._too_large(send)
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        if slow.cancelled_caught:
            await reply(send, 408, replies.body_too_slow(self.timeout))
            return
        body = b"".join(chunks)
        if scope["path"].rstrip("/") in self.json_paths and body:
            problem = _unreadable(body)
            if problem is not None:
                await reply(send, 400, replies.invalid_request(problem), request_id=top_level_id(body))
                return
        await self.app(scope, _replay(body, receive), send)

    async def _too_large(self, send: Send) -> None:
        await reply(send, 413, replies.body_too_large(self.limit))


def _unreadable(body: bytes) -> str | None:
    """Why the body cannot be read as JSON for depth reasons, or None (other problems are the SDK's to answer)."""
    try:
        codec.loads(body)
    except RecursionError:
        return "nested too deeply to read"
    except ValueError:
        return None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def token_of(scope: Scope) -> str:
    """The name of the token the request was accepted with ("" without tokens)."""
    state: Any = scope.get("state") or {}
    return str(state.get(TOKEN_NAME, ""))

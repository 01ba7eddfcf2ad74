"""HTTP front door: bearer token, body size limit, DNS-rebinding settings. Plain ASGI wrappers."""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_loop_guard.settings import Settings

_LOCAL_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"]
_LOCAL_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def security_settings(settings: Settings) -> TransportSecuritySettings:
    """Host/Origin checks, always on: loopback names plus whatever the operator allowed."""
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*_LOCAL_HOSTS, *settings.allowed_hosts],
        allowed_origins=[*_LOCAL_ORIGINS, *settings.allowed_origins],
    )


async def _reply(send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class AuthGuard:
    """Every request must carry ``Authorization: Bearer <token>`` when a token is configured."""

    def __init__(self, app: ASGIApp, token: str | None, open_paths: Sequence[str] = ()) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None
        self.open_paths = tuple(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.expected is None or scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        if not hmac.compare_digest(given, self.expected):
            await _reply(
                send, 401, "Unauthorized: a valid bearer token is required", [(b"www-authenticate", b"Bearer")]
            )
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse bodies over the limit with 413 and a message that says so, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(send)
            return
        seen = 0
        started = rejected = False

        async def limited_receive() -> Message:
            nonlocal seen, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit and not started:
                    # Answer now; the app sees the client go away and whatever it sends is dropped.
                    rejected = True
                    await self._too_large(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if rejected:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited_receive, guarded_send)

    async def _too_large(self, send: Send) -> None:
        await _reply(
            send,
            413,
            f"Request body too large: the limit is {self.limit} bytes (LOOP_GUARD_MAX_REQUEST_BYTES)",
        )

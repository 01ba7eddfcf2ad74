"""``--stateless`` requests to a server that gives each client a session: over sessions of the guard's own.

Such a server refuses a request that names no session, so the guard keeps sessions of its own
there (opened with its own ``initialize``, offering no client capabilities) and sends each
request over one that has nothing else in flight: requests numbered alike never meet, and a
request and its answer cross as their bytes, judged as any other keyed request. A client's
``initialize`` goes to the server as it came (the session it opens there is ended at once); its
answer comes back without a session id and without ``tasks``, whose later requests could land
on another session. Idle sessions are ended after a while, and all of them when the guard stops.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from starlette.types import Message as ASGIMessage
from starlette.types import Receive, Scope, Send

from mcp_loop_guard import codec
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.exchanges import Exchange, Relaying
from mcp_loop_guard.proxy.downstream.http.middleware import reply
from mcp_loop_guard.proxy.downstream.http.replies import handshake, json_reply, read_answer, read_posted
from mcp_loop_guard.proxy.upstream.exchange import HttpExchange, UpstreamHttpError
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.messages import Message

logger = logging.getLogger(__name__)

SESSION = b"mcp-session-id"
VERSION = b"mcp-protocol-version"
IDLE_SECONDS = 60.0
"""A session of the guard's own unused this long is ended (the server's own idle limit is longer)."""
END_TIMEOUT = 5.0


@dataclass(eq=False)
class PooledSession:
    """One session of the guard's own at the server."""

    session_id: bytes
    version: bytes
    last_used: float = field(default_factory=time.monotonic)

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        """What names the session in a request."""
        return [(SESSION, self.session_id), (VERSION, self.version)]


class SessionPool:
    """The guard's own sessions at one server: as many as requests in flight, up to ``limit``."""

    def __init__(self, upstream: HttpExchange, limit: int, max_message_bytes: int) -> None:
        """Sessions are opened at ``upstream`` on demand."""
        self.upstream = upstream
        self.limit = max_message_bytes
        self.idle: list[PooledSession] = []
        self.room = anyio.Semaphore(limit)

    async def acquire(self) -> PooledSession:
        """A session with nothing in flight: the one used last, or a new one.

        Raises:
            UpstreamHttpError: a new session could not be opened.
        """
        await self.room.acquire()
        if self.idle:
            return self.idle.pop()
        try:
            opened = await handshake(self.upstream, self.limit)
            if opened.session_id is None:
                raise UpstreamHttpError("the server opened no session")
            session = PooledSession(opened.session_id, opened.version.encode())
            initialized = codec.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
            async with self.upstream.send("POST", [*session.headers, *_POSTED], initialized):
                pass
        except BaseException:
            self.room.release()
            raise
        return session

    def release(self, session: PooledSession, *, gone: bool = False) -> None:
        """A session's request is answered; ``gone``: the server no longer knows it."""
        self.room.release()
        if not gone:
            session.last_used = time.monotonic()
            self.idle.append(session)

    async def expire(self, idle: float = IDLE_SECONDS) -> None:
        """End the sessions unused for ``idle`` seconds."""
        cutoff = time.monotonic() - idle
        stale = [session for session in self.idle if session.last_used < cutoff]
        self.idle = [session for session in self.idle if session.last_used >= cutoff]
        await self.end(stale)

    async def aclose(self) -> None:
        """End every idle session (the guard is stopping)."""
        stale, self.idle = self.idle, []
        await self.end(stale)

    async def end(self, sessions: Sequence[PooledSession]) -> None:
        """DELETE them at the server, all at once and within ``END_TIMEOUT`` (a server that hangs holds nothing up)."""

        async def end(session: PooledSession) -> None:
            try:
                async with self.upstream.send("DELETE", session.headers):
                    pass
            except UpstreamHttpError as error:
                logger.debug("could not end a session of the guard's own upstream: %s", error)

        with anyio.move_on_after(END_TIMEOUT):
            async with anyio.create_task_group() as tg:
                for session in sessions:
                    tg.start_soon(end, session)


_POSTED = [(b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]


class PoolRelaying(Relaying, Protocol):
    """What the pooled requests need of the relay: its upstream and its keyed agents too."""

    upstream: HttpExchange
    agents: Agents


class Pooled:
    """Requests without a session, sent over the guard's own sessions."""

    def __init__(self, relay: PoolRelaying, pool: SessionPool) -> None:
        """Requests are judged by ``relay``'s keyed agents and relayed to its upstream."""
        self.relay = relay
        self.pool = pool
        self.serving: dict[tuple[int, wire.RequestId], PooledSession] = {}
        """The session each request in flight went over, by its agent and id (for its cancellation)."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One request to ``/mcp``: a POST, relayed; a GET or DELETE has no session to stream or end."""
        if scope["method"] != "POST":
            await reply(send, 405, replies.NO_SESSIONS_STATELESS_REQUESTS, [(b"allow", b"POST")])
            return
        posted = await read_posted(receive, send)
        if posted is None:
            return
        body, parsed = posted
        message = parsed if isinstance(parsed, Message) else None
        if message is not None and message.method == "initialize":
            await self._initialize(scope, body, message, send)
        elif message is not None and message.is_request:
            await self._request(scope, send, body, message)
        elif message is not None and message.method == "notifications/cancelled":
            await self._cancel(scope, body, message, send)
        else:  # the rest concerns a session the client does not have (its own initialized one included)
            await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})

    async def _request(self, scope: Scope, send: Send, body: bytes, message: Message) -> None:
        keyed = await self.relay.agents.admit(scope, send)
        if keyed is None:
            return
        ident = message.id
        assert ident is not None
        key = (id(keyed), ident)
        keyed.in_flight += 1
        try:
            for retry in (False, True):  # a session the server forgot (it restarted) is replaced once
                try:
                    session = await self.pool.acquire()
                except UpstreamHttpError as error:
                    failed = wire.error(ident, wire.INTERNAL_ERROR, f"upstream unavailable: {error}")
                    await json_reply(send, 200, failed)
                    return
                self.serving[key] = session
                status: list[int] = []
                headers = _with_session(scope["headers"], session)
                sent = _sessionless(send, status, hold_not_found=not retry)
                exchange = Exchange(self.relay, {**scope, "headers": headers}, sent, body, message, None, keyed.judge)
                answered = False
                try:
                    await exchange.run()
                    answered = True
                finally:
                    self.serving.pop(key, None)
                    self.pool.release(session, gone=status == [404] or not answered)
                    if not answered:  # cut short: the server may still work on it, so the session is not reused
                        with anyio.CancelScope(shield=True):
                            await self.pool.end([session])
                if status != [404]:
                    return
                logger.info("the server no longer knows a session of the guard's own; the request goes over another")
        finally:
            keyed.in_flight -= 1

    async def _cancel(self, scope: Scope, body: bytes, message: Message, send: Send) -> None:
        """A cancellation goes over the session its request went over (if that is still in flight)."""
        keyed = await self.relay.agents.admit(scope, send)
        if keyed is None:
            return
        requested = (message.body.get("params") or {}).get("requestId")
        session = self.serving.get((id(keyed), requested)) if isinstance(requested, str | int) else None
        if session is not None:
            try:
                async with self.relay.upstream.send("POST", _with_session(scope["headers"], session), body):
                    pass
            except UpstreamHttpError as error:
                logger.debug("could not pass a cancellation on: %s", error)
        await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async def _initialize(self, scope: Scope, body: bytes, message: Message, send: Send) -> None:
        """The client's ``initialize``, answered by the server itself; the session it opened there is ended."""
        headers = [(key, value) for key, value in scope["headers"] if key not in (SESSION, VERSION)]
        try:
            async with self.relay.upstream.send("POST", headers, body) as response:
                opened = response.header(SESSION)
                try:
                    answer = await read_answer(response, message.id, self.relay.settings.max_message_bytes)
                except ValueError:
                    answer = None
                status = response.status_code
        except UpstreamHttpError as error:
            await json_reply(send, 200, wire.error(message.id, wire.INTERNAL_ERROR, f"upstream unavailable: {error}"))
            return
        if opened is not None:
            version = (answer or {}).get("result", {}).get("protocolVersion")
            ended = [(SESSION, opened), *([(VERSION, str(version).encode())] if version else [])]
            with anyio.move_on_after(END_TIMEOUT):
                try:
                    async with self.relay.upstream.send("DELETE", ended):
                        pass
                except UpstreamHttpError as error:
                    logger.debug("could not end the session an initialize opened upstream: %s", error)
        if answer is None:
            await json_reply(send, 502, wire.error(message.id, wire.INTERNAL_ERROR, f"upstream answered {status}"))
            return
        await json_reply(send, 200, Message(_without_tasks(answer)))


def _without_tasks(answer: dict[str, Any]) -> dict[str, Any]:
    """``initialize``'s answer without the ``tasks`` capability: a task's later requests need its session."""
    result = answer.get("result")
    if not isinstance(result, dict) or not isinstance(capabilities := result.get("capabilities"), dict):
        return answer
    kept = {name: value for name, value in capabilities.items() if name != "tasks"}
    return {**answer, "result": {**result, "capabilities": kept}}


def _with_session(headers: Sequence[tuple[bytes, bytes]], session: PooledSession) -> list[tuple[bytes, bytes]]:
    return [*((key, value) for key, value in headers if key not in (SESSION, VERSION)), *session.headers]


def _sessionless(send: Send, status: list[int], *, hold_not_found: bool) -> Send:
    """``send``, with the guard's own session id left out of the answer and its status noted.

    ``hold_not_found``: a 404 (the server does not know the session) is kept from the client,
    so the request can go over another session.
    """

    async def sending(message: ASGIMessage) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
            headers = [(key, value) for key, value in message.get("headers", []) if key != SESSION]
            message = {**message, "headers": headers}
        if not (hold_not_found and status == [404]):
            await send(message)

    return sending

"""One client request through the HTTP relay: forwarded as it came, its answer streamed back, a tools/call judged.

Only what the guard must read is parsed: a ``tools/call`` request and the one event (or JSON
body) that answers it, a ``tools/list`` answer (for the tools' annotations), the result of a
task the guard holds a call for. Everything else crosses as the bytes it came in.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, Protocol

import anyio
from starlette.types import Scope, Send

from mcp_loop_guard import codec
from mcp_loop_guard.config import HttpServer
from mcp_loop_guard.core import replies
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.http.middleware import token_of, trace_headers
from mcp_loop_guard.proxy.downstream.http.relayed_sessions import RelayedSession, RelayedSessions
from mcp_loop_guard.proxy.downstream.http.replies import (
    EVENTS,
    JSON,
    Headers,
    is_modern,
    json_reply,
    learn_tools,
    read_bounded,
)
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.lifecycle import Call, Refused, begin, cancellation, failure, timed_out, timeout_of
from mcp_loop_guard.proxy.relay.stopping import Stopping
from mcp_loop_guard.proxy.relay.tool_list import RESERVED_META
from mcp_loop_guard.proxy.relay.verdicts import SERVER_INFO
from mcp_loop_guard.proxy.upstream.exchange import HttpExchange, Response, UpstreamHttpError, forwarded_response_headers
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire import sse
from mcp_loop_guard.proxy.wire.messages import Message
from mcp_loop_guard.settings import Settings


class Relaying(Protocol):
    """What one request needs of the relay it crosses (:class:`~.relayed.HttpRelay`)."""

    plan: Plan
    settings: Settings
    spec: HttpServer
    upstream: HttpExchange
    facts: ToolFacts
    sessions: RelayedSessions
    server_info: object

    stopping: Stopping
    """The guard's: a request in flight when it stops is answered with an error."""

    def aborted(self, session: RelayedSession | None, tool: str) -> None:
        """An aborting refusal went out: end the session."""
        ...


logger = logging.getLogger(__name__)

_KEPT = (b"mcp-session-id", b"mcp-protocol-version")
_LIST_TIMEOUT = 10.0
"""Seconds the guard's own tools/list may take (to learn annotations) when no call timeout is set."""


class Exchange:
    """One POST from a client, relayed."""

    def __init__(  # noqa: PLR0917 - what one request carries
        self,
        relay: Relaying,
        scope: Scope,
        send: Send,
        body: bytes,
        message: Message | None,
        session: RelayedSession | None,
        judge: Judge | None,
    ) -> None:
        """``message``: the body parsed (None for a malformed response, relayed for the server to judge)."""
        self.relay = relay
        self.headers: Headers = scope["headers"]
        self.token = token_of(scope)
        self.trace = trace_headers(scope)
        self.send = send
        self.body = body
        self.message = message
        self.session = session
        self.judge = judge
        self.call: Call | None = None
        self.started = False
        """The response's head went out (an event stream): a late answer goes as one more event."""
        self.modern = is_modern(self.headers)

    @property
    def method(self) -> str | None:
        """The request's method."""
        return self.message.method if self.message is not None else None

    async def run(self) -> None:
        """Judge (a tools/call), forward, and relay the answer."""
        message = self.message
        if message is not None and message.is_request and message.method == "tools/call":
            assert self.judge is not None
            decision = await begin(
                self.judge,
                self.relay.spec.name,
                message,
                annotations=self._annotations,
                carried=self.trace,
                modern=self.modern,
                server_info=self.relay.server_info,
            )
            if isinstance(decision, Refused):
                await json_reply(self.send, 200, decision.answer)
                if decision.abort:
                    self.relay.aborted(self.session, str((message.body.get("params") or {}).get("name")))
                return
            self.call = decision
            if message.raw is None:
                self.body = message.line()[:-1]
        await self._forward()

    def _looks(self) -> bool:
        """Whether the answer must be read: a judged call, a tools/list, a held task's result."""
        if self.call is not None or self.method in ("tools/call", "tools/list"):
            return True
        if self.method in ("tasks/result", "tasks/cancel") and self.session is not None and self.message is not None:
            return (self.message.body.get("params") or {}).get("taskId") in self.session.tasks
        return False

    async def _forward(self) -> None:
        relay = self.relay
        stop = anyio.CancelScope()
        relay.stopping.add(stop)
        if self.session is not None:
            self.session.scopes.add(stop)
        timeout = timeout_of(self.method, relay.spec.call_timeout or relay.plan.limits.call_timeout)
        if self.message is None:
            timeout = math.inf  # a malformed response, relayed for the server to judge
        self.timer = anyio.CancelScope(deadline=anyio.current_time() + timeout)
        self.timeout = timeout
        try:
            with stop, self.timer:
                async with relay.upstream.send("POST", self.headers, self.body) as response:
                    await self._note_session(response)
                    await self._answer(response)
                    return
        except UpstreamHttpError as error:
            await self._fail(str(error), "gone")
            return
        finally:
            relay.stopping.discard(stop)
            if self.session is not None:
                self.session.scopes.discard(stop)
        if self.timer.cancelled_caught:
            await self._timed_out()
        elif relay.stopping.flag:
            await self._fail(replies.SHUTTING_DOWN, "stopping")
        else:  # the guard ended the session under the request (aborted by another call, or evicted)
            await self._fail(replies.SESSION_ENDED, "ended")

    async def _note_session(self, response: Response) -> None:
        """An initialize answered with a session id opens a session; every request keeps its MCP headers."""
        given = response.header(b"mcp-session-id")
        if self.method == "initialize" and given and response.is_success:
            self.session = await self.relay.sessions.open(given, self.token)
        if self.session is not None:
            kept = [(key, value) for key, value in self.headers if key in _KEPT and key != b"mcp-session-id"]
            self.session.headers = [(b"mcp-session-id", self.session.session_id), *kept]

    async def _answer(self, response: Response) -> None:
        content_type = (response.header(b"content-type") or b"").lower()
        if response.status_code == 404 and self.session is not None:
            self.relay.sessions.forget(self.session)  # the server ended the session
        if not self._looks() or not response.is_success:
            await self.judge_dropped()
            await self._plain(response)
        elif content_type.startswith(EVENTS):
            await self._events(response)
        elif content_type.startswith(JSON):
            raw = await read_bounded(response, self.relay.settings.max_message_bytes)
            if raw is None:
                await self._fail(self._too_large(), "too-large")
                return
            parsed = wire.parse(raw)
            if isinstance(parsed, Message) and parsed.is_response and parsed.id == self.message_id:
                answer = await self._look(parsed)
                await json_reply(self.send, response.status_code, answer, forwarded_response_headers(response.headers))
                return
            await self.judge_dropped()
            await self._start(response, raw)
        else:
            await self.judge_dropped()
            await self._plain(response)

    @property
    def message_id(self) -> wire.RequestId | None:
        """The id of the client's request."""
        return self.message.id if self.message is not None else None

    async def _events(self, response: Response) -> None:
        await self._start(response)
        splitter = sse.EventSplitter(self.relay.settings.max_message_bytes)
        async for chunk in response.chunks():
            self._progressed()
            out: list[bytes] = []
            try:
                events = splitter.feed(chunk)
            except ValueError:
                await self._fail(self._too_large(), "too-large")
                return
            for event in events:
                data = sse.data_of(event)
                parsed = wire.parse(data) if data is not None and b'"id"' in data else None
                if isinstance(parsed, Message) and parsed.is_response and parsed.id == self.message_id:
                    answer = await self._look(parsed)
                    out.append(event if answer.raw is not None else sse.with_data(event, codec.dumps(answer.body)))
                else:
                    out.append(event)
            if out:
                await self.send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
        await self.judge_dropped()  # the stream ended without the answer
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _look(self, answer: Message) -> Message:
        """The upstream's answer to the client's request, judged or learnt from; what the client gets."""
        result = answer.body.get("result")
        if self.modern and isinstance(result, dict) and isinstance(meta := result.get("_meta"), dict):
            self.relay.server_info = meta.get(SERVER_INFO, self.relay.server_info)
        call, self.call = self.call, None
        params = (self.message.body.get("params") or {}) if self.message is not None else {}
        if call is not None:
            if await call.answered(answer, self.session.tasks if self.session is not None else None) is None:
                return self._failure(replies.WRONG_SHAPE_RESULT, "invalid-result")
        elif self.method == "tools/list" and isinstance(result, dict):
            self.relay.facts.note(result.get("tools") or [], first_page="cursor" not in params)
        elif self.method in ("tasks/result", "tasks/cancel") and self.session is not None:
            await self.session.tasks.answered(answer, params["taskId"], cancelled=self.method == "tasks/cancel")
        return answer

    def _too_large(self) -> str:
        return replies.answer_too_large(None, self.relay.settings.max_message_bytes)

    def _failure(self, reason: str, fault: str) -> Message:
        assert self.message_id is not None
        return failure(
            self.message_id, self.method, reason, fault, modern=self.modern, server_info=self.relay.server_info
        )

    def _progressed(self) -> None:
        """Anything from the upstream (progress, a server request) restarts the call timeout."""
        self.timer.deadline = anyio.current_time() + self.timeout

    async def judge_dropped(self) -> None:
        """The call ended without an answer the guard could judge: nothing moves."""
        call, self.call = self.call, None
        if call is not None:
            await call.dropped()

    async def _timed_out(self) -> None:
        reason = timed_out(f"`{self.relay.spec.name}`", self.method or "", self.timeout)
        if self.message_id is not None:
            cancel = codec.dumps(cancellation(self.message_id).body)
            with anyio.move_on_after(_LIST_TIMEOUT):
                try:
                    async with self.relay.upstream.send("POST", self.headers, cancel):
                        pass
                except UpstreamHttpError as error:
                    logger.debug("could not cancel a timed-out request upstream: %s", error)
        await self._fail(reason, "timeout")

    async def _fail(self, reason: str, fault: str) -> None:
        """Answer a request the guard could not complete: an isError result for tools/call, else an error."""
        if self.message is None or not self.message.is_request or self.message_id is None:
            if not self.started:
                await json_reply(self.send, 502, wire.error(None, wire.INTERNAL_ERROR, reason))
            return
        await self.judge_dropped()
        if self.method == "tools/call":
            logger.warning("tools/call failed: %s", reason)
        answer = self._failure(reason, fault)
        if self.started:
            body = sse.encode(codec.dumps(answer.body))
            await self.send({"type": "http.response.body", "body": body, "more_body": False})
        else:
            await json_reply(self.send, 200, answer)

    # --- writing -----------------------------------------------------------------------------

    async def _start(self, response: Response, body: bytes | None = None) -> None:
        headers = forwarded_response_headers(response.headers)
        if body is not None:
            headers.append((b"content-length", str(len(body)).encode()))
        await self.send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        self.started = True
        if body is not None:
            await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def _plain(self, response: Response) -> None:
        await self._start(response)
        async for chunk in response.chunks():
            self._progressed()
            await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    # --- the guard's own tools/list -----------------------------------------------------------

    async def _annotations(self, name: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The tool's annotations; the first call before any tools/list lists the tools itself."""
        facts = self.relay.facts
        if not facts.listed:
            meta = params.get("_meta")
            envelope = {k: v for k, v in meta.items() if k.startswith(RESERVED_META)} if isinstance(meta, dict) else {}
            headers = self.session.headers if self.session is not None else self.headers
            limit = self.relay.settings.max_message_bytes
            try:
                with anyio.fail_after(self.relay.plan.limits.call_timeout or _LIST_TIMEOUT):
                    await learn_tools(self.relay.upstream, headers, envelope, facts, limit)
            except (TimeoutError, UpstreamHttpError, ValueError) as error:
                logger.debug("could not list the upstream's tools: %s", error)
                facts.listed = True  # judged without annotations rather than listed again on every call
        return facts.annotations(name)

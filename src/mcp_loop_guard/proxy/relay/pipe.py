"""The message relay: one client's JSON-RPC lines to one upstream and back, judging ``tools/call``.

Each line is parsed once. Everything that is not a ``tools/call`` request or its answer
crosses as the bytes it came in (every method, present and future: ``tasks/*``,
``subscriptions/listen``, extensions), with ids untouched. A ``tools/call`` is judged before
it is forwarded; a refusal is answered here and never reaches the upstream; a result is
passed on as its own bytes unless a warning must be appended. The relay keeps only what it
must: the requests in flight (to route answers, time out hung calls and refuse a reused id),
the upstream's requests awaiting the client (bounded), and the tools' annotations.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from mcp_loop_guard.config import ServerSpec, StdioServer
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.relay.judge import Judge, Pending, Refusal
from mcp_loop_guard.proxy.relay.tasks import HeldTasks, created_task
from mcp_loop_guard.proxy.relay.tools import ToolFacts
from mcp_loop_guard.proxy.relay.verdicts import complete, failed
from mcp_loop_guard.proxy.upstream.child import ChildProcess
from mcp_loop_guard.proxy.upstream.stdio import HANDSHAKE_TIMEOUT, StdioUpstream, UpstreamDownError
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import BadLine, Message, RequestId

logger = logging.getLogger(__name__)

RESERVED_META = "io.modelcontextprotocol/"
MODERN_META = RESERVED_META + "protocolVersion"
"""The key every 2026-07-28 request carries in its ``_meta``."""
_OWN_TOKEN = "mcp-loop-guard-progress-"  # noqa: S105 - a progress token prefix, not a secret
"""Progress tokens the guard adds (for the call timeout) to requests that carry none."""


@dataclass(slots=True)
class InFlight:
    """A client request on its way upstream."""

    method: str
    deadline: float
    token: object
    own_token: bool
    judged: Pending | None = None
    first_page: bool = False
    modern: bool = False
    """A 2026-07-28 request: results the guard writes for it name their type."""
    task: str | None = None
    """``tasks/result`` or ``tasks/cancel`` of a task whose call the guard holds."""


def _carry(message: Message, entries: dict[str, str]) -> None:
    """Put the guard's trace context in a request's ``_meta`` (for the upstream to continue)."""
    params = message.body.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    message.body["params"] = {**params, "_meta": {**(meta if isinstance(meta, dict) else {}), **entries}}
    message.changed()


def _wrong_shape(result: dict[str, Any]) -> bool:
    """A tools/call result whose content is not a list (interim results and task handles carry none)."""
    if result.get("resultType") not in (None, "complete") or created_task(result) is not None:
        return False
    return not isinstance(result.get("content"), list)


class Pipe:
    """Relays one client to one stdio upstream."""

    def __init__(
        self,
        spec: StdioServer,
        send: Callable[[bytes], Awaitable[None]],
        judge: Judge,
        *,
        limits: Limits,
        on_abort: Callable[[], None],
        first: ChildProcess | None = None,
    ) -> None:
        """``send`` writes a line to the client; ``on_abort`` ends the session once the refusal is out.

        ``first``: the upstream's child when it was started before the event loop.
        """
        self.upstream = StdioUpstream(
            spec,
            self.from_upstream,
            self.upstream_exited,
            on_restart=self.upstream_restarted,
            max_bytes=limits.max_message_bytes,
            first=first,
            handshake_timeout=limits.call_timeout or HANDSHAKE_TIMEOUT,
        )
        self.send = send
        self.judge = judge
        self.server = spec.name
        self.limits = limits
        self.on_abort = on_abort
        self.facts = ToolFacts()
        self.listed: list[Any] | None = None
        """The tools the client was last given (all pages), to tell it when a restarted upstream has others."""
        self.in_flight: dict[RequestId, InFlight] = {}
        self.tasks = HeldTasks(judge)
        self.awaiting_client: set[RequestId] = set()
        self.bad_upstream_lines = 0
        self._tokens = 0
        self._wake = anyio.Event()
        self._sleeping_until = math.inf
        """When :meth:`watch_timeouts` wakes next: only an earlier deadline needs to wake it sooner."""

    # --- from the client ---------------------------------------------------------------------

    async def from_client(self, item: bytes | Oversized) -> None:
        """Handle one line the client wrote."""
        if isinstance(item, Oversized):
            limit = (
                f"{item.size} bytes is over the limit of {self.limits.max_message_bytes} (LOOP_GUARD_MAX_MESSAGE_BYTES)"
            )
            await self._reject(item.request_id, f"message of {limit}")
            return
        parsed = wire.parse(item)
        if parsed is None:
            return
        if isinstance(parsed, BadLine):
            logger.warning("rejected a line from the client: %s", parsed.problem)
            if parsed.reply is not None:
                await self.send(parsed.reply.line())
            elif parsed.response_to is not None and parsed.response_to in self.awaiting_client:
                self.awaiting_client.discard(parsed.response_to)
                error = wire.error(
                    parsed.response_to, wire.INTERNAL_ERROR, "the client answered with a malformed response"
                )
                await self._to_upstream(error)
            return
        if parsed.is_request:
            await self._client_request(parsed)
        elif parsed.is_notification:
            await self._client_notification(parsed)
        else:
            if parsed.id is not None:
                self.awaiting_client.discard(parsed.id)
            await self._to_upstream(parsed)

    async def _client_request(self, message: Message) -> None:
        ident = message.id
        assert ident is not None
        if ident in self.in_flight:
            await self._reject(ident, "a request with this id is still in flight")
            return
        method = message.method or ""
        params = message.body.get("params") or {}
        flight = self._track(message, method, params)
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments")
            if not isinstance(name, str) or not (arguments is None or isinstance(arguments, dict)):
                why = "the tool name must be a string" if not isinstance(name, str) else "arguments must be an object"
                await self.send(wire.error(ident, wire.INVALID_PARAMS, f"Invalid params: {why}").line())
                return
            meta = params.get("_meta")
            decision = await self.judge.begin(
                self.server,
                name,
                name,
                arguments,
                annotations=await self._annotations(name, params),
                trace=meta if isinstance(meta, dict) else None,
            )
            if isinstance(decision, Refusal):
                await self.send(wire.result(ident, complete(decision.result, modern=flight.modern)).line())
                if decision.abort:
                    self.on_abort()
                return
            flight.judged = decision
            if decision.span is not None:
                _carry(message, decision.trace_meta())
        elif method == "initialize":
            self.upstream.initialize = message.body
        elif method == "tools/list":
            flight.first_page = "cursor" not in params
        elif method in ("tasks/result", "tasks/cancel") and params.get("taskId") in self.tasks:
            flight.task = params["taskId"]
        self.in_flight[ident] = flight
        if flight.deadline < self._sleeping_until:
            self._wake.set()
        try:
            await self.upstream.send(message.line())
        except UpstreamDownError as down:
            await self._fail(ident, str(down), "gone")

    def _track(self, message: Message, method: str, params: dict[str, Any]) -> InFlight:
        """The bookkeeping of one request; a progress token of the guard's own when only the timeout needs one."""
        timeout = self.limits.call_timeout
        if method == "initialize":
            timeout = timeout or HANDSHAKE_TIMEOUT
        deadline = anyio.current_time() + timeout if timeout else math.inf
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        own = False
        if token is None and self.limits.call_timeout and method not in ("initialize", "ping"):
            self._tokens += 1
            token, own = f"{_OWN_TOKEN}{self._tokens}", True
            message.body["params"] = {
                **params,
                "_meta": {**(meta if isinstance(meta, dict) else {}), "progressToken": token},
            }
            message.changed()
        modern = isinstance(meta, dict) and MODERN_META in meta
        return InFlight(method, deadline, token, own, modern=modern)

    async def _annotations(self, tool: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """The tool's annotations; the first call before any tools/list fetches the list itself.

        The guard's own request carries the client's 2026-07-28 envelope (protocol version,
        client info), so an upstream speaking that era answers it as it answers the client.
        """
        if not self.facts.listed and self.upstream.down_reason() is None:
            meta = params.get("_meta")
            envelope = {k: v for k, v in meta.items() if k.startswith(RESERVED_META)} if isinstance(meta, dict) else {}
            await self._learn_tools(envelope)
        return self.facts.annotations(tool)

    async def _learn_tools(self, envelope: dict[str, Any]) -> None:
        cursor: object = None
        for page in range(20):
            params: dict[str, Any] = {"cursor": cursor} if cursor else {}
            if envelope:
                params["_meta"] = envelope
            answer = await self.upstream.request("tools/list", params or None, within=self.limits.call_timeout or 10.0)
            result = (answer or {}).get("result")
            if not isinstance(result, dict):
                self.facts.listed = True  # nothing to learn from this server (no tools, or no answer)
                return
            self.facts.note(result.get("tools") or [], first_page=page == 0)
            cursor = result.get("nextCursor")
            if not cursor:
                return

    async def _client_notification(self, message: Message) -> None:
        method = message.method
        if method == "notifications/initialized":
            self.upstream.initialized = message.line()
        elif method == "notifications/cancelled":
            params = message.body.get("params") or {}
            cancelled = params.get("requestId")
            flight = self.in_flight.pop(cancelled, None) if isinstance(cancelled, str | int) else None
            if flight is not None and flight.judged is not None:
                await self.judge.dropped(flight.judged)
        await self._to_upstream(message)

    async def _to_upstream(self, message: Message) -> None:
        """A notification or a response: forwarded if the upstream is up, else dropped (nobody waits for it)."""
        try:
            await self.upstream.send(message.line())
        except UpstreamDownError as down:
            logger.debug("dropped a %s for the upstream: %s", message.method or "response", down)

    async def _reject(self, ident: RequestId | None, why: str) -> None:
        logger.warning("rejected a message from the client: %s", why)
        await self.send(wire.error(ident, wire.INVALID_REQUEST, f"Invalid Request: {why}").line())

    # --- from the upstream -------------------------------------------------------------------

    async def from_upstream(self, item: Message | BadLine | Oversized) -> None:
        """Handle one line the upstream wrote."""
        if isinstance(item, Oversized):
            logger.warning(
                "upstream %s sent a %d-byte message (limit %d); not relayed",
                self.upstream.label,
                item.size,
                self.limits.max_message_bytes,
            )
            if item.request_id is not None and item.request_id in self.in_flight:
                too_large = (
                    f"the upstream's answer of {item.size} bytes is over the limit of "
                    f"{self.limits.max_message_bytes} (LOOP_GUARD_MAX_MESSAGE_BYTES); it was not relayed"
                )
                await self._fail(item.request_id, too_large, "too-large")
            return
        if isinstance(item, BadLine):
            if item.response_to is not None and item.response_to in self.in_flight:
                logger.warning("upstream %s sent a malformed response; its request gets an error", self.upstream.label)
                await self._fail(
                    item.response_to,
                    "the upstream answered with a response of the wrong shape (its result must be an object)",
                    "invalid-result",
                )
            else:
                self.bad_upstream_lines += 1
                if self.bad_upstream_lines == 1:
                    logger.warning(
                        "upstream %s wrote a line to stdout that is not JSON-RPC (%s); ignoring it and any later ones",
                        self.upstream.label,
                        item.problem,
                    )
            return
        if item.is_response:
            await self._answer(item)
        elif item.is_request:
            await self._upstream_request(item)
        else:
            await self._upstream_notification(item)

    async def _answer(self, message: Message) -> None:
        ident = message.id
        flight = self.in_flight.pop(ident, None) if ident is not None else None
        if flight is None:
            logger.debug("dropped an upstream answer to an id nobody is waiting for")
            return
        result = message.body.get("result")
        if flight.judged is not None and isinstance(result, dict) and (task := created_task(result)) is not None:
            await self.tasks.hold(task, flight.judged)  # judged when its result is fetched
        elif flight.task is not None:
            await self._task_answer(message, flight.task, cancelled=flight.method == "tasks/cancel")
        elif flight.judged is not None:
            if isinstance(result, dict) and _wrong_shape(result):
                await self._fail_wrong_shape(ident, flight)
                return
            if isinstance(result, dict):
                changed = await self.judge.finish(flight.judged, result)
                if changed is not None:
                    message.body["result"] = changed
                    message.changed()
            else:
                await self.judge.failed(flight.judged, message.body.get("error") or {})
        elif flight.method == "tools/call" and isinstance(result, dict) and _wrong_shape(result):
            await self._fail_wrong_shape(ident, flight)
            return
        elif flight.method == "tools/list" and isinstance(result, dict):
            tools = result.get("tools") or []
            self.facts.note(tools, first_page=flight.first_page)
            self.listed = list(tools) if flight.first_page or self.listed is None else [*self.listed, *tools]
        await self.send(message.line())

    async def _task_answer(self, message: Message, task: str, *, cancelled: bool) -> None:
        """A held task's result (judged like the call's own answer) or its cancellation."""
        result = message.body.get("result")
        if cancelled:
            if isinstance(result, dict):
                await self.tasks.drop(task)
            return
        pending = self.tasks.take(task)
        if pending is None:
            return
        if isinstance(result, dict) and not _wrong_shape(result):
            changed = await self.judge.finish(pending, result)
            if changed is not None:
                message.body["result"] = changed
                message.changed()
        elif isinstance(result, dict):
            await self.judge.dropped(pending)
        else:
            await self.judge.failed(pending, message.body.get("error") or {})

    async def _fail_wrong_shape(self, ident: RequestId | None, flight: InFlight) -> None:
        assert ident is not None
        self.in_flight[ident] = flight
        await self._fail(
            ident,
            "the upstream answered with a result of the wrong shape (its content must be a list)",
            "invalid-result",
        )

    async def _upstream_request(self, message: Message) -> None:
        ident = message.id
        assert ident is not None
        if len(self.awaiting_client) >= self.limits.max_pending_requests:
            logger.warning(
                "upstream %s has %d requests awaiting the client; refusing more",
                self.upstream.label,
                len(self.awaiting_client),
            )
            refusal = wire.error(ident, -32000, "too many requests are awaiting the client's answer; try again later")
            await self._to_upstream(refusal)
            return
        self.awaiting_client.add(ident)
        await self.send(message.line())

    async def _upstream_notification(self, message: Message) -> None:
        method = message.method
        if method == "notifications/progress":
            params = message.body.get("params") or {}
            token = params.get("progressToken")
            for flight in self.in_flight.values():
                if flight.token == token:
                    if self.limits.call_timeout:
                        flight.deadline = anyio.current_time() + self.limits.call_timeout
                    if flight.own_token:
                        return  # the guard's own token: the client never asked for progress
                    break
        elif method == "notifications/tools/list_changed":
            self.facts.forget()
        await self.send(message.line())

    # --- failures ----------------------------------------------------------------------------

    async def _fail(self, ident: RequestId, reason: str, fault: str) -> None:
        """Answer a request the guard could not complete: an isError result for tools/call, else an error."""
        flight = self.in_flight.pop(ident, None)
        if flight is not None and flight.method == "tools/call":
            if flight.judged is not None:
                await self.judge.dropped(flight.judged)
            logger.warning("tools/call failed: %s", reason)
            await self.send(wire.result(ident, complete(failed(reason), modern=flight.modern)).line())
            return
        await self.send(wire.error(ident, wire.INTERNAL_ERROR, reason, {wire.GUARD_FAULT: fault}).line())

    async def shut_down(self, reason: str) -> None:
        """The guard is stopping: every request in flight gets the reason instead of a cut connection."""
        for ident in list(self.in_flight):
            await self._fail(ident, reason, "shutdown")

    async def upstream_exited(self, child: ChildProcess) -> None:
        """The child died: every request in flight gets the reason at once."""
        reason = self.upstream.down_reason() or f"upstream {self.upstream.label} {child.describe_exit()}"
        self.awaiting_client.clear()
        await self.tasks.drop_all()
        for ident in list(self.in_flight):
            await self._fail(ident, reason, "gone")

    async def upstream_restarted(self) -> None:
        """A new child serves the session: if the client had listed tools and they differ now, say so."""
        if self.listed is None:
            return
        tools: list[Any] = []
        cursor: object = None
        for _ in range(20):
            answer = await self.upstream.request(
                "tools/list", {"cursor": cursor} if cursor else None, within=self.limits.call_timeout or 10.0
            )
            result = (answer or {}).get("result")
            if not isinstance(result, dict):
                return
            tools.extend(result.get("tools") or [])
            cursor = result.get("nextCursor")
            if not cursor:
                break
        self.facts.note(tools, first_page=True)
        if tools != self.listed:
            logger.info("upstream %s has other tools after its restart; telling the client", self.upstream.label)
            self.listed = tools
            await self.send(Message({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).line())

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: the one server's new command replaces the old one; None, or why it cannot be done live."""
        if len(servers) != 1 or not isinstance(servers[0], StdioServer):
            return "this guard relays one stdio server directly; serving other servers needs a restart"
        spec = servers[0]
        self.server = spec.name
        self.facts.forget()
        await self.upstream.replace(spec)
        return None

    async def watch_timeouts(self) -> None:
        """Cancel requests that go too long without an answer or progress (the call timeout)."""
        while True:
            self._sleeping_until = min((flight.deadline for flight in self.in_flight.values()), default=math.inf)
            self._wake = anyio.Event()
            with anyio.CancelScope(deadline=self._sleeping_until + 0.01):
                await self._wake.wait()
            now = anyio.current_time()
            for ident, flight in list(self.in_flight.items()):
                if flight.deadline <= now:
                    await self._time_out(ident, flight)

    async def _time_out(self, ident: RequestId, flight: InFlight) -> None:
        seconds = self.limits.call_timeout or HANDSHAKE_TIMEOUT
        if flight.method == "initialize":
            reason = f"upstream {self.upstream.label} did not answer initialize within {seconds:g}s"
        else:
            reason = (
                f"upstream {self.upstream.label} sent no answer or progress for {flight.method} within {seconds:g}s "
                "(call timeout); the request was cancelled"
            )
        cancel = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": ident, "reason": "timeout"},
        }
        await self._to_upstream(Message(cancel))
        await self._fail(ident, reason, "timeout")

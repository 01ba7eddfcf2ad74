"""The message relay: one client's JSON-RPC lines to one upstream and back, judging ``tools/call``.

Each line is parsed once. Everything that is not a ``tools/call`` request or its answer
crosses as the bytes it came in (every method, present and future: ``tasks/*``,
``subscriptions/listen``, extensions), with ids untouched. A ``tools/call`` is judged before
it is forwarded; a refusal is answered here and never reaches the upstream; a result is
passed on as its own bytes unless a warning must be appended. The relay keeps only what it
must: the requests in flight (to route answers, time out hung calls and refuse a reused id:
:mod:`.flights`), the upstream's requests awaiting the client (bounded), and the tools'
annotations (:mod:`.tool_list`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from mcp_loop_guard.config import ServerSpec
from mcp_loop_guard.core import replies
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.relay.flights import Flights, InFlight
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.lifecycle import Refused, begin
from mcp_loop_guard.proxy.relay.tasks import HeldTasks, wrong_shape
from mcp_loop_guard.proxy.relay.tool_list import ToolList
from mcp_loop_guard.proxy.relay.verdicts import SERVER_INFO
from mcp_loop_guard.proxy.upstream.channel import Channel, UpstreamDownError
from mcp_loop_guard.proxy.upstream.channels import Opener
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import BadLine, Message, RequestId

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.upstream.router import Router

logger = logging.getLogger(__name__)


class Pipe:
    """Relays one client to its upstream: one server's channel, or a router of several (:mod:`..upstream.channels`)."""

    def __init__(
        self,
        opener: Opener,
        send: Callable[[bytes], Awaitable[None]],
        judge: Judge,
        *,
        server: str,
        limits: Limits,
        on_abort: Callable[[], None],
        router: Router | None = None,
        facts: ToolFacts | None = None,
    ) -> None:
        """``opener`` makes the upstream, which tells this relay what it hears; ``send`` writes a line to the client.

        ``server``: the server's name (a router names each call's own); ``on_abort`` ends the
        session once an aborting refusal is out; ``router``: the router behind the upstream
        when the upstream is a share of one (else the upstream itself, when it is one);
        ``facts``: the tools' annotations, when relays of single requests share them.
        """
        self.send = send
        self.judge = judge
        self.server = server
        self.limits = limits
        self.on_abort = on_abort
        self.upstream: Channel = opener(self)
        self.router = router or _router(self.upstream)
        self.tools = ToolList(self.upstream, limits, facts)
        self.flights = Flights(self.upstream, limits, send, judge)
        self.tasks = HeldTasks(judge)
        self.awaiting_client: set[RequestId] = set()
        self.bad_upstream_lines = 0

    # --- from the client ---------------------------------------------------------------------

    async def from_client(self, item: bytes | Oversized) -> None:
        """Handle one line the client wrote."""
        if isinstance(item, Oversized):
            await self._reject(item.request_id, replies.message_too_large(item.size, self.limits.max_message_bytes))
            return
        parsed = wire.parse(item)
        if parsed is not None:
            await self.take_client(parsed)

    async def take_client(self, parsed: Message | BadLine, *, trace: Mapping[str, str] | None = None) -> None:
        """Handle one message the client sent, parsed already (by the transport that carried it).

        ``trace``: the trace context the transport carried it with (HTTP's ``traceparent``
        header), for a ``tools/call`` whose ``_meta`` has none.
        """
        if isinstance(parsed, BadLine):
            logger.warning("rejected a line from the client: %s", parsed.problem)
            if parsed.reply is not None:
                await self.send(parsed.reply.line())
            elif parsed.response_to is not None and parsed.response_to in self.awaiting_client:
                self.awaiting_client.discard(parsed.response_to)
                error = wire.error(parsed.response_to, wire.INTERNAL_ERROR, replies.CLIENT_MALFORMED_RESPONSE)
                await self._to_upstream(error)
            return
        if parsed.is_request:
            await self._client_request(parsed, trace)
        elif parsed.is_notification:
            await self._client_notification(parsed)
        else:
            if parsed.id is not None:
                self.awaiting_client.discard(parsed.id)
            await self._to_upstream(parsed)

    async def _client_request(self, message: Message, trace: Mapping[str, str] | None = None) -> None:
        ident = message.id
        assert ident is not None
        if ident in self.flights:
            await self._reject(ident, replies.ID_IN_FLIGHT)
            return
        method = message.method or ""
        params = message.body.get("params") or {}
        server, tool, timeout = self.server, None, None
        if method == "tools/call" and self.router is not None and isinstance(name := params.get("name"), str):
            route = await self.router.route(name, params.get("_meta"))
            if route is None:
                await self.send(wire.error(ident, wire.INVALID_PARAMS, replies.unknown("tool", name)).line())
                return
            server, tool = route
            timeout = self.router.timeout_for(server)
        flight = self.flights.track(message, method, params, timeout)
        if method == "tools/call":
            decision = await begin(
                self.judge,
                server,
                message,
                tool=tool,
                annotations=self.tools.annotations,
                carried=trace,
                modern=flight.modern,
                server_info=self.flights.server_info,
            )
            if isinstance(decision, Refused):
                await self.send(decision.answer.line())
                if decision.abort:
                    self.on_abort()
                return
            flight.call = decision
        elif method == "initialize":
            self.upstream.initialize = message.body
        elif method == "tools/list":
            flight.first_page = "cursor" not in params
        elif method in ("tasks/result", "tasks/cancel") and params.get("taskId") in self.tasks:
            flight.task = params["taskId"]
        self.flights.add(ident, flight)
        try:
            await self.upstream.send_message(message)
        except UpstreamDownError as down:
            await self.flights.fail(ident, str(down), "gone")

    async def _client_notification(self, message: Message) -> None:
        method = message.method
        if method == "notifications/initialized":
            self.upstream.initialized = message.line()
        elif method == "notifications/cancelled":
            params = message.body.get("params") or {}
            cancelled = params.get("requestId")
            flight = self.flights.pop(cancelled) if isinstance(cancelled, str | int) else None
            if flight is not None and flight.call is not None:
                await flight.call.dropped()
        await self._to_upstream(message)

    async def _to_upstream(self, message: Message) -> None:
        """A notification or a response: forwarded if the upstream is up, else dropped (nobody waits for it)."""
        try:
            await self.upstream.send_message(message)
        except UpstreamDownError as down:
            logger.debug("dropped a %s for the upstream: %s", message.method or "response", down)

    async def _reject(self, ident: RequestId | None, why: str) -> None:
        logger.warning("rejected a message from the client: %s", why)
        await self.send(wire.error(ident, wire.INVALID_REQUEST, replies.invalid_request(why)).line())

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
            if item.request_id is not None and item.request_id in self.flights:
                too_large = replies.answer_too_large(item.size, self.limits.max_message_bytes)
                await self.flights.fail(item.request_id, too_large, "too-large")
            return
        if isinstance(item, BadLine):
            if item.response_to is not None and item.response_to in self.flights:
                logger.warning("upstream %s sent a malformed response; its request gets an error", self.upstream.label)
                await self.flights.fail(item.response_to, replies.WRONG_SHAPE_RESPONSE, "invalid-result")
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
        flight = self.flights.pop(ident) if ident is not None else None
        if flight is None:
            logger.debug("dropped an upstream answer to an id nobody is waiting for")
            return
        result = message.body.get("result")
        if flight.modern and isinstance(result, dict) and isinstance(meta := result.get("_meta"), dict):
            self.flights.server_info = meta.get(SERVER_INFO, self.flights.server_info)
        if flight.call is not None:
            if await flight.call.answered(message, self.tasks) is None:
                flight.call = None  # let go by the judge already
                await self._fail_wrong_shape(ident, flight)
                return
        elif flight.task is not None:
            await self.tasks.answered(message, flight.task, cancelled=flight.method == "tasks/cancel")
        elif flight.method == "tools/call" and isinstance(result, dict) and wrong_shape(result):
            await self._fail_wrong_shape(ident, flight)
            return
        elif flight.method == "tools/list" and isinstance(result, dict):
            self.tools.seen(result.get("tools") or [], first_page=flight.first_page)
        await self.send(message.line())

    async def _fail_wrong_shape(self, ident: RequestId | None, flight: InFlight) -> None:
        assert ident is not None
        self.flights.add(ident, flight)
        await self.flights.fail(ident, replies.WRONG_SHAPE_RESULT, "invalid-result")

    async def _upstream_request(self, message: Message) -> None:
        ident = message.id
        assert ident is not None
        if len(self.awaiting_client) >= self.limits.max_pending_requests:
            logger.warning(
                "upstream %s has %d requests awaiting the client; refusing more",
                self.upstream.label,
                len(self.awaiting_client),
            )
            refusal = wire.error(ident, -32000, replies.TOO_MANY_AWAITING)
            await self._to_upstream(refusal)
            return
        self.awaiting_client.add(ident)
        await self.send(message.line())

    async def _upstream_notification(self, message: Message) -> None:
        method = message.method
        if method == "notifications/progress":
            params = message.body.get("params") or {}
            if self.flights.progressed(params.get("progressToken")):
                return  # the guard's own token: the client never asked for progress
        elif method == "notifications/tools/list_changed":
            self.tools.facts.forget()
        await self.send(message.line())

    # --- failures ----------------------------------------------------------------------------

    async def shut_down(self, reason: str) -> None:
        """The guard is stopping: every request in flight gets the reason instead of a cut connection."""
        await self.flights.fail_all(reason, "shutdown")

    async def upstream_lost(self, reason: str) -> None:
        """The upstream went away: every request in flight gets ``reason`` at once."""
        self.awaiting_client.clear()
        await self.tasks.drop_all()
        await self.flights.fail_all(reason, "gone")

    async def upstream_failed(self, ident: RequestId, reason: str) -> None:
        """The upstream will not answer a request (an HTTP upstream broke off or refused it)."""
        if ident in self.flights:
            await self.flights.fail(ident, reason, "gone")

    async def upstream_restarted(self) -> None:
        """A new child serves the session: if the client had listed tools and they differ now, say so."""
        if await self.tools.changed_on_restart():
            logger.info("upstream %s has other tools after its restart; telling the client", self.upstream.label)
            await self.send(Message({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).line())

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: the upstream takes the new servers, or says why it cannot live (None when it did)."""
        problem = await self.upstream.reconfigure(servers)
        if problem is None:
            self.server = servers[0].name if len(servers) == 1 else self.server
            self.tools.facts.forget()
        return problem


def _router(upstream: Channel) -> Router | None:
    """The upstream when it is a router; its module is loaded only in front of several servers."""
    module = sys.modules.get("mcp_loop_guard.proxy.upstream.router")
    return upstream if module is not None and isinstance(upstream, module.Router) else None

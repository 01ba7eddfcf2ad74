"""Whether the servers a relay serves are up, for ``/readyz``: a stdio server's shared child, an HTTP server's probe.

The relay itself keeps no upstream connection between requests (or one per client session),
so this probe is what notices a server that went away: it opens a session with an
``initialize`` of its own, pings it while idle, and opens another with backoff once the
server stops answering. It speaks raw JSON-RPC over the guard's own HTTP client, to a
streamable HTTP server (:class:`HttpProbe`) or a legacy SSE one (:class:`SseProbe`), so a
relay never loads the SDK for it. A front keeps them up, one per server, with a :class:`Supervisor`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import suppress

import anyio
import anyio.abc

from mcp_loop_guard import codec
from mcp_loop_guard.config import HttpServer, ServerSpec, StdioServer, redact_url
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.downstream.http.replies import (
    EVENTS,
    JSON,
    Handshake,
    HandshakeRefusedError,
    handshake,
    read_answer,
)
from mcp_loop_guard.proxy.upstream.backoff import START_TIMEOUT, Backoff
from mcp_loop_guard.proxy.upstream.channel import UpstreamDownError
from mcp_loop_guard.proxy.upstream.child import ChildProcess
from mcp_loop_guard.proxy.upstream.exchange import HttpExchange, UpstreamHttpError
from mcp_loop_guard.proxy.upstream.health import HTTP_HANDSHAKE_TIMEOUT, Supervised
from mcp_loop_guard.proxy.upstream.shared_child import HANDSHAKE, SharedChild
from mcp_loop_guard.proxy.upstream.sse_lines import SseLines
from mcp_loop_guard.proxy.wire import messages as wire

__all__ = ["HttpProbe", "SseProbe", "Supervisor"]

logger = logging.getLogger(__name__)


class _DownError(Exception):
    """The probe's session could not be opened or kept: why, in one line."""


class _Probe(Supervised):
    """The health of one HTTP upstream, kept by a session of the guard's own."""

    expected = (_DownError, OSError)

    def __init__(self, spec: HttpServer, limits: Limits, backoff: Backoff | None = None) -> None:
        """Not connected yet; :meth:`supervise` connects."""
        super().__init__(spec, backoff)
        self.http_spec = spec
        self.limit = limits.max_message_bytes
        self.timeout = spec.call_timeout or limits.call_timeout or HTTP_HANDSHAKE_TIMEOUT
        self.interval = limits.health_interval
        self.label = f"{spec.name} ({redact_url(spec.url)})"


class HttpProbe(_Probe):
    """The health of one streamable HTTP upstream, kept by a session of the guard's own."""

    def __init__(
        self, spec: HttpServer, limits: Limits, exchange: HttpExchange, backoff: Backoff | None = None
    ) -> None:
        """``exchange``: the relay's own, so the probe asks with the headers the relay sends (a config reload
        that rotates a token rotates it for both) and follows its redirects."""
        super().__init__(spec, limits, backoff)
        self.exchange = exchange

    async def _serve_once(self) -> str:
        try:
            with anyio.fail_after(self.timeout):
                opened = await handshake(self.exchange, self.limit)
        except TimeoutError:
            raise _DownError(f"upstream {self.label} did not answer initialize within {self.timeout:g}s") from None
        except HandshakeRefusedError as refused:
            raise _DownError(f"upstream {self.label} refused initialize: {refused.said}") from None
        except UpstreamHttpError as error:
            raise _DownError(f"upstream {self.label} is unreachable: {error}") from None
        try:
            try:
                await self._post(opened, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            except UpstreamHttpError as error:
                return f"upstream {self.label} broke off after initialize: {error}"
            logger.info("connected to upstream %s (protocol %s)", self.label, opened.version)
            self._set("ready", "connected", "connected")
            while True:
                await anyio.sleep(self.interval)
                ident = wire.own_request_id()
                try:
                    with anyio.fail_after(self.interval):
                        answer = await self._post(opened, {"jsonrpc": "2.0", "id": ident, "method": "ping"}, ident)
                except (TimeoutError, UpstreamHttpError, ValueError) as error:
                    return f"upstream {self.label} failed a health check: {str(error) or 'no answer in time'}"
                if answer is None or "result" not in answer:
                    return f"upstream {self.label} failed a health check: it did not answer ping"
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                await self._end(opened)

    async def _post(
        self, opened: Handshake, body: dict[str, object], ident: wire.RequestId | None = None
    ) -> dict[str, object] | None:
        """One message in the probe's session; the answer to ``ident`` (None for a notification)."""
        headers = [(b"accept", JSON + b", " + EVENTS), (b"content-type", JSON), *_session(opened)]
        async with self.exchange.send("POST", headers, codec.dumps(body)) as response:
            if ident is None:
                async for _chunk in response.chunks():
                    pass
                return None
            return await read_answer(response, ident, self.limit)

    async def _end(self, opened: Handshake) -> None:
        """End the probe's session at the server (best effort: it expires there anyway)."""
        if opened.session_id is not None:
            with suppress(UpstreamHttpError):
                async with self.exchange.send("DELETE", _session(opened)):
                    pass


def _session(opened: Handshake) -> list[tuple[bytes, bytes]]:
    headers = [(b"mcp-protocol-version", opened.version.encode())]
    if opened.session_id is not None:
        headers.append((b"mcp-session-id", opened.session_id))
    return headers


class SseProbe(_Probe):
    """The health of one legacy SSE upstream, kept by an event stream and a session of the guard's own."""

    async def _serve_once(self) -> str:
        lost: list[str] = []
        gone = anyio.Event()
        channel = SseLines(self.http_spec, _Lost(lost, gone), max_bytes=self.limit, handshake_timeout=self.timeout)
        reason = ""
        async with anyio.create_task_group() as tg:
            await tg.start(channel.run)
            try:
                reason = await self._session(channel, gone, lost)
            finally:
                tg.cancel_scope.cancel()
        return reason

    async def _session(self, channel: SseLines, gone: anyio.Event, lost: list[str]) -> str:
        if not await channel.wait_open(self.timeout):
            reason = lost[0] if lost else f"did not open its event stream within {self.timeout:g}s"
            raise _DownError(f"upstream {self.label} is unreachable: {reason}")
        answer = await channel.request("initialize", HANDSHAKE, within=self.timeout)
        if answer is None:
            raise _DownError(f"upstream {self.label} did not answer initialize within {self.timeout:g}s")
        if not isinstance(answer.get("result"), dict):
            raise _DownError(f"upstream {self.label} refused initialize: {answer.get('error')}")
        try:
            await channel.send_message(wire.Message({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        except UpstreamDownError as error:
            return f"upstream {self.label} broke off after initialize: {error}"
        logger.info("connected to upstream %s over legacy SSE", self.label)
        self._set("ready", "connected", "connected")
        while True:
            with anyio.move_on_after(self.interval):
                await gone.wait()
            if gone.is_set():
                return lost[0]
            if await channel.request("ping", None, within=self.interval) is None:
                return f"upstream {self.label} failed a health check: it did not answer ping"


class _Lost:
    """The probe's session hears nothing it needs but its end."""

    def __init__(self, lost: list[str], gone: anyio.Event) -> None:
        self.lost, self.gone = lost, gone

    async def from_upstream(self, item: object) -> None:
        """What the server sends the probe unasked: nothing to do with it."""

    async def upstream_lost(self, reason: str) -> None:
        self.lost.append(reason)
        self.gone.set()

    async def upstream_failed(self, ident: object, reason: str) -> None:
        """The probe's own requests time out by themselves."""

    async def upstream_restarted(self) -> None:
        """A reopened stream is a new probe's business."""


class Supervisor:
    """What a front keeps up between its sessions, one per server: a stdio server's shared child (none with
    ``--child-per-session``), an HTTP or SSE server's probe; each supervised in a cancel scope of its own."""

    def __init__(
        self,
        limits: Limits,
        *,
        child_per_session: bool = False,
        on_child: Callable[[SharedChild, bool], None] | None = None,
        on_probe: Callable[[Supervised, bool], None] | None = None,
    ) -> None:
        """``on_child``, ``on_probe``: told when a child or probe goes up or down (see ``Supervised.on_change``)."""
        self.limits = limits
        self.child_per_session = child_per_session
        self.on_child, self.on_probe = on_child, on_probe
        self.kept: dict[str, tuple[Supervised, anyio.CancelScope]] = {}
        self.slots: list[Supervised] = []
        """What ``/readyz`` reports, in the config's order (kept in place across a reload)."""

    def get(self, name: str) -> Supervised | None:
        """The child or probe of server ``name``, if it has one."""
        found = self.kept.get(name)
        return found[0] if found is not None else None

    async def keep(
        self,
        tg: anyio.abc.TaskGroup,
        specs: Sequence[ServerSpec],
        *,
        first: ChildProcess | None = None,
        settle: bool = False,
    ) -> None:
        """Supervise ``specs`` in ``tg`` from now on: a server added or changed starts anew, one removed stops.

        ``first``: a stdio server's child, started before the event loop; ``settle``: each one
        started is waited for until its first attempt succeeded or failed.
        """
        names = {spec.name for spec in specs}
        for name in [name for name in self.kept if name not in names]:
            self.kept.pop(name)[1].cancel()
        for spec in specs:
            found = self.kept.get(spec.name)
            if found is not None and found[0].spec == spec:
                continue
            if found is not None:
                self.kept.pop(spec.name)[1].cancel()
            slot = self._slot(spec, first)
            if slot is None:
                continue
            scope = anyio.CancelScope()
            self.kept[spec.name] = (slot, scope)
            await tg.start(_supervised, slot, scope)
            if settle:
                await slot.wait_settled(START_TIMEOUT)  # clients then see its tools
        self.slots[:] = [self.kept[spec.name][0] for spec in specs if spec.name in self.kept]

    def _slot(self, spec: ServerSpec, first: ChildProcess | None) -> Supervised | None:
        if isinstance(spec, StdioServer):
            if self.child_per_session:
                return None  # each session starts its own child: nothing to keep up between sessions
            child = SharedChild(spec, self.limits, first=first)
            if self.on_child is not None:
                child.on_change(self.on_child)
            return child
        probe = (
            SseProbe(spec, self.limits) if spec.transport == "sse" else HttpProbe(spec, self.limits, HttpExchange(spec))
        )
        if self.on_probe is not None:
            probe.on_change(self.on_probe)
        return probe


async def _supervised(
    slot: Supervised, scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with scope:
        try:
            await slot.supervise(task_status=task_status)
        finally:
            if isinstance(slot, HttpProbe):  # its connections are its own
                with anyio.CancelScope(shield=True):
                    await slot.exchange.aclose()

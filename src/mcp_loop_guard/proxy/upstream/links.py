"""How one downstream session reaches each upstream: its own connection, or a shared one."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.exceptions import MCPError

from mcp_loop_guard.core.fingerprint import canonical_json
from mcp_loop_guard.proxy.upstream.backoff import Backoff
from mcp_loop_guard.proxy.upstream.child import UpstreamStartError
from mcp_loop_guard.proxy.upstream.health import reason_of
from mcp_loop_guard.proxy.upstream.pool import Slot, open_upstream
from mcp_loop_guard.proxy.upstream.session import Downstream, Upstream, UpstreamGoneError

logger = logging.getLogger(__name__)


def _digest(value: object) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


class Link(Protocol):
    """One session's way to one upstream."""

    name: str
    call_timeout: float | None

    @property
    def identity(self) -> types.InitializeResult | None:
        """The upstream's initialize result, once known."""
        ...

    def available(self) -> bool:
        """Whether a request now has a chance (used to leave a dead server out of listings)."""
        ...

    async def connect(self, client_info: types.Implementation, capabilities: types.ClientCapabilities) -> None:
        """Make sure the handshake has happened (a no-op for shared connections)."""
        ...

    def using(self) -> AbstractAsyncContextManager[Upstream]:
        """Context manager yielding the connection for one request."""
        ...

    def note_tools(self, tools: object) -> None:
        """Remember the tool list the client was given, to tell it when a restart changes it."""
        ...


class SharedLink:
    """A session's use of a connection shared by all sessions."""

    def __init__(self, slot: Slot, key: int, downstream: Downstream) -> None:
        self.name = slot.name
        self.call_timeout = slot.call_timeout
        self._slot = slot
        self._key = key
        slot.router.attach(key, downstream)

    @property
    def identity(self) -> types.InitializeResult | None:
        return self._slot.identity

    def available(self) -> bool:
        return self._slot.connection is not None

    async def connect(self, client_info: types.Implementation, capabilities: types.ClientCapabilities) -> None:
        return None

    @asynccontextmanager
    async def using(self) -> AsyncIterator[Upstream]:
        upstream = self._slot.connection
        if upstream is None:
            raise UpstreamGoneError(f"upstream {self.name!r} is down: {self._slot.reason}")
        async with self._slot.router.calling(self._key):
            yield upstream

    def note_tools(self, tools: object) -> None:
        return None

    def close(self) -> None:
        self._slot.router.detach(self._key)


class OwnLink:
    """A connection of this session's own, opened with its client's identity.

    If the connection dies, the next request starts a new one, no sooner than a
    backoff delay after the last failure; until then requests fail at once with
    the reason, so a crash-looping server is never hammered.
    """

    def __init__(
        self,
        slot: Slot,
        downstream: Downstream,
        tg: anyio.abc.TaskGroup,
        *,
        merged: bool = False,
        backoff: Backoff | None = None,
    ) -> None:
        self.name = slot.name
        self.merged = merged
        """One of several upstreams: its going and coming changes the merged tool list."""
        self.call_timeout = slot.call_timeout
        self._slot = slot
        self._downstream = downstream
        self._tg = tg
        self._backoff = backoff or Backoff()
        self._release: anyio.Event | None = None
        self._released: anyio.Event | None = None
        self._upstream: Upstream | None = None
        self._client: tuple[types.Implementation, types.ClientCapabilities] | None = None
        self._lock = anyio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._last_error = ""
        self._tools_digest: str | None = None

    @property
    def identity(self) -> types.InitializeResult | None:
        if self._upstream is not None and self._upstream.initialize_result is not None:
            return self._upstream.initialize_result
        return self._slot.identity

    def available(self) -> bool:
        if self._upstream is not None:
            return self._upstream.gone_reason() is None
        if self._slot.supervised and self._slot.status != "ready":
            return False
        return anyio.current_time() >= self._retry_at

    async def prestart(self) -> None:
        """Start the upstream now (a stdio child) so that a bad command fails before any client speaks.

        One of several upstreams that cannot start is only reported: the others serve on.
        """
        async with self._lock:
            try:
                await self._open()
            except (UpstreamStartError, UpstreamGoneError) as exc:
                if not self.merged:
                    raise
                logger.warning("upstream %r is not available: %s", self.name, exc)
                self._failed(str(exc))

    def _failed(self, reason: str) -> None:
        self._last_error = reason
        self._failures += 1
        self._retry_at = anyio.current_time() + self._backoff.delay(self._failures)

    async def _open(self) -> None:
        """Open the connection in a task of its own, which must also be the one to close it.

        Whatever ends the connection (a crash, a broken stream, an HTTP error inside the SDK's
        transport) ends in that task and marks the upstream gone; it never reaches the session.

        Raises:
            UpstreamStartError: the command cannot be started.
            UpstreamGoneError: the upstream cannot be reached.
        """
        release, released = anyio.Event(), anyio.Event()
        opened: list[Upstream] = []

        async def hold(*, task_status: anyio.abc.TaskStatus[Upstream | BaseException]) -> None:
            try:
                async with open_upstream(self._slot.spec, self._slot.limits) as upstream:
                    upstream.downstream = self._downstream
                    opened.append(upstream)
                    task_status.started(upstream)
                    async with anyio.create_task_group() as watch:
                        watch.start_soon(self._announce_death, upstream)
                        await release.wait()
                        watch.cancel_scope.cancel()
            except Exception as exc:
                if opened:
                    opened[0].mark_gone(f"upstream {opened[0].label} failed: {reason_of(exc)}")
                else:
                    task_status.started(exc)
            finally:
                released.set()

        result = await self._tg.start(hold)
        if isinstance(result, BaseException):
            if isinstance(result, (UpstreamStartError, UpstreamGoneError)):
                raise result
            raise UpstreamGoneError(f"upstream {self.name!r} is unreachable: {reason_of(result)}") from result
        self._upstream = result
        self._release, self._released = release, released

    async def _announce_death(self, upstream: Upstream) -> None:
        """With several upstreams, the client's merged tool list shrinks when one dies."""
        reason = await upstream.wait_gone()
        logger.warning("%s", reason)
        if self.merged:
            await self._downstream.notify(types.ToolListChangedNotification())

    async def connect(self, client_info: types.Implementation, capabilities: types.ClientCapabilities) -> None:
        self._client = (client_info, capabilities)
        if self.merged and self._slot.supervised and self._slot.status != "ready":
            # Its probe says it is down: a new session does not wait on it (it joins once it is back).
            raise UpstreamGoneError(f"upstream {self.name!r} is {self._slot.status}: {self._slot.reason}")
        async with self._lock:
            try:
                await self._ensure()
            except UpstreamGoneError:
                if not self.merged:
                    raise

    async def _ensure(self) -> Upstream:
        upstream = self._upstream
        if upstream is not None and upstream.gone_reason() is not None:
            await self.aclose()
            self._failed(upstream.gone_reason() or "")
            upstream = None
        if upstream is None:
            if anyio.current_time() < self._retry_at:
                raise UpstreamGoneError(self._last_error)
            try:
                await self._open()
            except (UpstreamStartError, UpstreamGoneError) as exc:
                self._failed(str(exc))
                raise UpstreamGoneError(self._last_error) from exc
            if self._failures:
                logger.info("restarted upstream %r after: %s", self.name, self._last_error)
            upstream = self._upstream
            assert upstream is not None
        if upstream.initialize_result is None and self._client is not None:
            await upstream.connect(*self._client)
            if self._failures and (self.merged or self._tools_digest is not None):
                self._tg.start_soon(self._recheck_tools, upstream)
            self._failures = 0
        return upstream

    def note_tools(self, tools: object) -> None:
        self._tools_digest = _digest(tools)

    async def _recheck_tools(self, upstream: Upstream) -> None:
        """After a restart: tell the client if the tool list is not the one it has."""
        try:
            listed = await upstream.request("tools/list", None)
        except (MCPError, UpstreamGoneError) as exc:
            logger.debug("could not list tools of %r after its restart: %s", self.name, exc)
            return
        if self.merged or _digest(listed.get("tools")) != self._tools_digest:
            logger.info("upstream %r has other tools after its restart; telling the client", self.name)
            await self._downstream.notify(types.ToolListChangedNotification())

    @asynccontextmanager
    async def using(self) -> AsyncIterator[Upstream]:
        upstream = self._upstream
        if upstream is None or upstream.initialize_result is None or upstream.gone_reason() is not None:
            # Only the rare path takes the lock (acquiring it costs an event-loop turn per call).
            async with self._lock:
                upstream = await self._ensure()
        yield upstream

    async def aclose(self) -> None:
        """Close the connection (its child process stops) and wait until it has."""
        release, released = self._release, self._released
        self._upstream = self._release = self._released = None
        if release is not None and released is not None:
            release.set()
            with anyio.CancelScope(shield=True):
                await released.wait()

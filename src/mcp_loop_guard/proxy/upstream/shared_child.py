"""The one stdio server of an HTTP guard: its child, opened with the guard's own handshake, restarted with backoff.

Every session of the guard shares the child through its :class:`~.mux.Mux`. The handshake
is raw JSON-RPC, so the guard starts, serves and supervises the child without loading the
SDK; only a request that needs translating (a 2026-07-28 one) loads it, and then reaches the
child as one more relayed session.
"""

from __future__ import annotations

import hashlib
import logging

import anyio

from mcp_loop_guard import __version__
from mcp_loop_guard.config import StdioServer
from mcp_loop_guard.core.fingerprint import canonical_json
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.upstream.backoff import HANDSHAKE_TIMEOUT, Backoff
from mcp_loop_guard.proxy.upstream.channel import UpstreamDownError
from mcp_loop_guard.proxy.upstream.child import ChildProcess, UpstreamStartError, spawn
from mcp_loop_guard.proxy.upstream.health import Supervised
from mcp_loop_guard.proxy.upstream.mux import HandshakeRefusedError, Mux
from mcp_loop_guard.proxy.wire.eras import HANDSHAKE_PROTOCOL_VERSIONS
from mcp_loop_guard.proxy.wire.feed import feed_lines
from mcp_loop_guard.proxy.wire.lines import LineReader

__all__ = ["HANDSHAKE", "SharedChild"]

logger = logging.getLogger(__name__)

HANDSHAKE = {
    "protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1],
    "capabilities": {"sampling": {}, "elicitation": {"form": {}, "url": {}}},
    "clientInfo": {"name": "mcp-loop-guard", "version": __version__},
}
"""The guard's ``initialize``: the child serves clients of every kind, so it is offered the
per-request client features (a client that lacks one gets an error) but not roots: one
server process cannot have each client's roots."""


class _DownError(Exception):
    """The child could not be opened: why, in one line."""


class SharedChild(Supervised):
    """One stdio server's child, shared by every session; :attr:`mux` while it is ready."""

    expected = (UpstreamStartError, _DownError, UpstreamDownError, OSError)

    def __init__(
        self, spec: StdioServer, limits: Limits, *, first: ChildProcess | None = None, backoff: Backoff | None = None
    ) -> None:
        """``first``: the child, started before the guard loaded its web server; the first attempt takes it."""
        super().__init__(spec, backoff)
        self.spec: StdioServer = spec
        self.limits = limits
        self.handshake_timeout = spec.call_timeout or limits.call_timeout or HANDSHAKE_TIMEOUT
        self.mux: Mux | None = None
        """The child's connection, while ready."""
        self._first = first
        self.tools_digest: str | None = None
        """What the child last listed, hashed (a restarted child may list other tools)."""

    def _lost(self) -> None:
        self.mux = None

    async def _serve_once(self) -> str:
        """One child, from its start to its end; returns why it ended."""
        spec = self.spec
        child, self._first = self._first, None
        if child is None:
            child = spawn(
                [spec.command, *spec.args], name=spec.public_name, env=spec.env, cwd=spec.cwd, display=spec.display
            )
        mux = Mux(child, max_bytes=self.limits.max_message_bytes)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(child.watch)
                tg.start_soon(child.relay_stderr)
                tg.start_soon(_read, mux, child)
                await self._open(mux)
                self.mux = mux
                self._set("ready", "connected", "connected", tools_changed=await self._tools_changed(mux))
                await mux.done.wait()
                tg.cancel_scope.cancel()
            return mux.closed or f"upstream `{child.label}` {child.describe_exit()}"
        finally:
            await mux.close(f"upstream `{child.label}` was stopped")
            await child.stop()

    async def _open(self, mux: Mux) -> None:
        label = f"`{mux.child.label}`"
        try:
            result = await mux.handshake(HANDSHAKE, within=self.handshake_timeout)
        except TimeoutError:
            if mux.closed is not None:
                raise _DownError(mux.closed) from None
            raise _DownError(f"upstream {label} did not answer initialize within {self.handshake_timeout:g}s") from None
        except HandshakeRefusedError as refused:
            raise _DownError(f"upstream {label} refused initialize: {refused}") from None
        except UpstreamDownError as down:
            raise _DownError(str(down)) from None
        info = result.get("serverInfo")
        name = info.get("name") if isinstance(info, dict) else None
        logger.info("connected to upstream %s (%s, protocol %s)", label, name, result.get("protocolVersion"))

    async def _tools_changed(self, mux: Mux) -> bool:
        """Whether a restarted child lists other tools than the last one did."""
        identity = mux.identity or {}
        capabilities = identity.get("capabilities")
        if not isinstance(capabilities, dict) or capabilities.get("tools") is None:
            return False
        answer = await mux.ask("tools/list", None, within=self.handshake_timeout)
        result = (answer or {}).get("result")
        if not isinstance(result, dict):
            return False
        digest = hashlib.sha256(canonical_json(result.get("tools"))).hexdigest()
        previous, self.tools_digest = self.tools_digest, digest
        return previous is not None and previous != digest


async def _read(mux: Mux, child: ChildProcess) -> None:
    """Route the child's output until it ends; then every session on it is told why."""
    try:
        await feed_lines(child.from_child, LineReader(mux.max_bytes), mux.take)
    except OSError as error:
        logger.debug("reading upstream stdout failed: %s", error)
    with anyio.move_on_after(1.0):  # the exit status arrives a moment after stdout closes
        await child.exited.wait()
    await mux.close(f"upstream `{child.label}` {child.describe_exit()}")

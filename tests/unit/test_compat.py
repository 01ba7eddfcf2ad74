"""Every private MCP SDK use in proxy/compat.py, pinned: a new SDK release that changes one fails here, by name."""

from __future__ import annotations

import inspect
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import version
from mcp_types.methods import CACHEABLE_METHODS

from mcp_loop_guard.proxy import compat
from mcp_loop_guard.proxy.wire import eras

pytestmark = pytest.mark.anyio


def test_handle_modern_request_takes_what_the_http_guard_passes() -> None:
    """The 2026-07-28 single-exchange entry: (app, security, json_response, lifespan_state, scope, receive, send)."""
    parameters = list(inspect.signature(compat.handle_modern_request).parameters)
    assert parameters == ["app", "security_settings", "json_response", "lifespan_state", "scope", "receive", "send"]
    assert inspect.iscoroutinefunction(compat.handle_modern_request)


def test_the_stream_protocols_are_there() -> None:
    """The transports' stream types, used in signatures throughout the proxy."""
    assert compat.ReadStream is not None
    assert compat.WriteStream is not None


async def _initialize_and_close(session: compat.MirrorSession, sent: Any, closer: Any) -> tuple[dict[str, Any], Any]:
    """Start initialize, capture what it sends, then end the connection under it."""
    failure: list[MCPError] = []

    async def initialize() -> None:
        try:
            await session.initialize()
        except MCPError as error:
            failure.append(error)

    async with session, anyio.create_task_group() as tg:
        tg.start_soon(initialize)
        with anyio.fail_after(5):
            message = await sent.receive()
        await closer.aclose()
    body = message.message.model_dump(by_alias=True, exclude_none=True)
    return body, failure[0] if failure else None


async def test_a_mirror_session_announces_the_real_clients_identity_and_capabilities() -> None:
    """``_client_info`` and ``_build_capabilities`` still decide what ``initialize`` says."""
    to_server, sent = anyio.create_memory_object_stream[SessionMessage](4)
    closer, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](4)
    session = compat.MirrorSession(from_server, to_server)
    session.mirror(
        types.Implementation(name="the-real-client", version="9.1"),
        types.ClientCapabilities(sampling=types.SamplingCapability(), roots=types.RootsCapability(list_changed=True)),
    )
    body, _ = await _initialize_and_close(session, sent, closer)
    assert body["method"] == "initialize"
    assert body["params"]["clientInfo"] == {"name": "the-real-client", "version": "9.1"}
    assert body["params"]["capabilities"] == {"sampling": {}, "roots": {"listChanged": True}}


async def test_a_connection_ending_under_a_request_is_the_error_connection_closed_recognises() -> None:
    """The SDK's own "Connection closed" error (-32000, no data) is told apart from an upstream's answer."""
    to_server, sent = anyio.create_memory_object_stream[SessionMessage](4)
    closer, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](4)
    _, failure = await _initialize_and_close(compat.MirrorSession(from_server, to_server), sent, closer)
    assert failure is not None
    assert compat.connection_closed(failure.error)
    upstreams_own = types.ErrorData(code=types.CONNECTION_CLOSED, message="Connection closed", data={"why": "mine"})
    assert not compat.connection_closed(upstreams_own)


def test_forget_server_info_makes_the_server_stamp_its_new_identity() -> None:
    """The stamp is cached under ``_server_info_stamp_source``; forgetting it shows a renamed server."""
    server: Server[Any] = Server("before", version="1")
    assert server.server_info_stamp["name"] == "before"
    server.name = "after"
    assert server.server_info_stamp["name"] == "before", "the SDK no longer caches the stamp: compat can go"
    compat.forget_server_info(server)
    assert server.server_info_stamp["name"] == "after"


def test_the_eras_copied_for_the_relays_are_the_sdks() -> None:
    """The relays name the protocol's eras without loading the SDK: their copy must be the SDK's own."""
    assert tuple(version.HANDSHAKE_PROTOCOL_VERSIONS) == eras.HANDSHAKE_PROTOCOL_VERSIONS
    assert tuple(version.MODERN_PROTOCOL_VERSIONS) == eras.MODERN_PROTOCOL_VERSIONS
    assert types.PROTOCOL_VERSION_META_KEY == eras.PROTOCOL_VERSION_META_KEY
    assert types.CLIENT_INFO_META_KEY == eras.CLIENT_INFO_META_KEY
    assert types.CLIENT_CAPABILITIES_META_KEY == eras.CLIENT_CAPABILITIES_META_KEY
    assert frozenset(CACHEABLE_METHODS) == eras.CACHEABLE_METHODS
    assert types.SERVER_INFO_META_KEY == eras.SERVER_INFO_META_KEY

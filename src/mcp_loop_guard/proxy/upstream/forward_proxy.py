"""The forward proxy an HTTP upstream is reached through, named by the usual environment variables.

``HTTPS_PROXY`` / ``HTTP_PROXY`` (by the upstream's scheme) or ``ALL_PROXY``, lower case first,
name it; ``NO_PROXY`` lists the hosts reached directly, matched as Python's urllib matches them
(a host, its subdomains, ``*`` for all). The SDK's client (httpx) reads the same variables, so
every path of the guard goes out the same way.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import anyio
import anyio.abc

from mcp_loop_guard.config import HttpServer, ServerSpec
from mcp_loop_guard.proxy.upstream.tls import tls_context
from mcp_loop_guard.settings import SettingsError

__all__ = [
    "ForwardProxy",
    "ForwardProxyError",
    "TunnelRefusedError",
    "check_proxy_variables",
    "forward_proxy",
    "open_stream",
]


class ForwardProxyError(SettingsError):
    """A proxy variable the guard cannot use; the text names it, without its credentials."""


@dataclass(frozen=True, slots=True)
class ForwardProxy:
    """Where to connect instead of the upstream, and what to tell the proxy."""

    host: str
    port: int
    secure: bool
    """TLS to the proxy itself (an ``https://`` proxy URL)."""
    authorization: bytes | None = None
    """``Proxy-Authorization`` from the URL's user and password."""


def forward_proxy(url: str, environ: Mapping[str, str] | None = None) -> ForwardProxy | None:
    """The proxy for ``url``, or None to connect straight to it.

    Raises:
        ForwardProxyError: the variable that applies is not an ``http://`` or ``https://`` URL.
    """
    env = os.environ if environ is None else environ
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    found = next(
        (
            (name, value)
            for key in (f"{scheme}_proxy", "all_proxy")
            for name in (key, key.upper())
            if (value := env.get(name, "").strip())
        ),
        None,
    )
    if found is None:
        return None
    port = parts.port or (443 if scheme == "https" else 80)
    if _bypassed(parts.hostname or "", port, env.get("no_proxy") or env.get("NO_PROXY") or ""):
        return None
    return _parsed(*found)


def check_proxy_variables(servers: Iterable[ServerSpec]) -> None:
    """Stop at start, not at the first call, on a proxy variable an HTTP upstream would need and cannot use.

    Raises:
        ForwardProxyError: the first such variable.
    """
    for spec in servers:
        if isinstance(spec, HttpServer):
            forward_proxy(spec.url)


def _bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` names the host (or a domain it is in, with or without a leading dot), or ``*``."""
    for entry in (item.strip().lower() for item in no_proxy.split(",")):
        if entry.startswith("["):  # an IPv6 address, maybe with a port: [::1]:8080
            name, _, rest = entry[1:].partition("]")
            only_port = rest.removeprefix(":")
        elif entry.count(":") == 1:
            name, _, only_port = entry.rpartition(":")
        else:  # a host name, or a bare IPv6 address
            name, only_port = entry, ""
        name = name.lstrip(".")
        if entry == "*" or (
            name and (host == name or host.endswith("." + name)) and (not only_port or only_port == str(port))
        ):
            return True
    return False


def _parsed(name: str, value: str) -> ForwardProxy:
    proxy = urlsplit(value if "://" in value else f"http://{value}")
    shown = f"{proxy.scheme}://{proxy.netloc.rpartition('@')[2]}"  # never its user and password
    if proxy.scheme.lower() not in ("http", "https") or not proxy.hostname:
        msg = f"{name}={shown}: the guard reaches upstreams through http:// or https:// proxies only"
        raise ForwardProxyError(msg)
    try:
        port = proxy.port or (443 if proxy.scheme.lower() == "https" else 80)
    except ValueError:
        msg = f"{name}={shown}: the port is not a number from 0 to 65535"
        raise ForwardProxyError(msg) from None
    authorization = None
    if proxy.username is not None:
        pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}".encode()
        authorization = b"Basic " + base64.b64encode(pair)
    return ForwardProxy(proxy.hostname, port, proxy.scheme.lower() == "https", authorization)


async def open_stream(
    host: str, port: int, tls: ssl.SSLContext | None, proxy: ForwardProxy | None
) -> anyio.abc.ByteStream:
    """A stream to ``host:port``, with TLS when ``tls`` is given: straight, or through ``proxy`` (its
    own connection for plain HTTP, whose requests then name their absolute URL; a CONNECT tunnel
    with TLS inside it for HTTPS).

    Raises:
        OSError, ssl.SSLError: the server or the proxy cannot be reached, TLS fails, or the proxy
            did not open the tunnel (:class:`TunnelRefusedError`).
    """
    if proxy is None:
        if tls is None:
            return await anyio.connect_tcp(host, port)
        return await anyio.connect_tcp(host, port, ssl_context=tls, tls_hostname=host)
    stream: anyio.abc.ByteStream
    if proxy.secure:
        stream = await anyio.connect_tcp(proxy.host, proxy.port, ssl_context=tls_context(), tls_hostname=proxy.host)
    else:
        stream = await anyio.connect_tcp(proxy.host, proxy.port)
    if tls is None:
        return stream
    try:
        authority = (f"[{host}]" if ":" in host else host).encode("idna") + f":{port}".encode()
        lines = [b"CONNECT " + authority + b" HTTP/1.1", b"host: " + authority]
        if proxy.authorization is not None:
            lines.append(b"proxy-authorization: " + proxy.authorization)
        await stream.send(b"\r\n".join(lines) + b"\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            if len(head) > _HEAD_LIMIT or not (more := await _received(stream)):
                raise TunnelRefusedError(0, "it closed the connection instead of opening a tunnel")
            head += more
        status = head.split(b"\r\n", 1)[0].split(b" ")
        if len(status) < 2 or not status[1].startswith(b"2") or not head.endswith(b"\r\n\r\n"):
            code = status[1].decode("latin-1") if len(status) > 1 else "?"
            raise TunnelRefusedError(0, f"it refused the tunnel: {code}")
        from anyio.streams.tls import TLSStream  # noqa: PLC0415 - a guard in front of stdio servers never needs it

        return await TLSStream.wrap(stream, hostname=host, ssl_context=tls)
    except BaseException:
        with anyio.CancelScope(shield=True), suppress(OSError, anyio.BrokenResourceError, ssl.SSLError):
            await stream.aclose()
        raise


class TunnelRefusedError(OSError):
    """The proxy answered a CONNECT with anything but 2xx, or not at all."""


_HEAD_LIMIT = 64 * 1024


async def _received(stream: anyio.abc.ByteStream) -> bytes:
    try:
        return await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return b""

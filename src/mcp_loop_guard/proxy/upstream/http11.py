"""A lean HTTP/1.1 client for the one upstream an HTTP relay talks to, over a pool of keep-alive connections.

Every call of every agent crosses it, so it does only what that takes (httpx spent more time
per call choosing among its pooled connections than the guard spent judging the call): one
request at a time per connection, answers framed by length, chunks or the connection's end and
streamed as they arrive. An idle connection is reused newest first unless the server may have
closed it; a request whose reused connection was closed before any answer is sent once more.
No header or target with a control character is written (``wire.header_text``).
"""

from __future__ import annotations

import logging
import select
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from urllib.parse import urlsplit

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from mcp_loop_guard.proxy.upstream.forward_proxy import ForwardProxy, open_stream
from mcp_loop_guard.proxy.wire.header_text import check_headers, check_request_line

logger = logging.getLogger(__name__)

__all__ = ["Http11Error", "Http11Pool", "Response"]

HEAD_LIMIT = 64 * 1024
"""Bytes a response's status line and headers may take."""
READ_SIZE = 65536

Headers = Sequence[tuple[bytes, bytes]]


class Http11Error(Exception):
    """The request could not be made or its answer not read; ``connect`` says whether nothing was reached."""

    def __init__(self, message: str, *, connect: bool = False) -> None:
        """``connect``: the server could not be reached at all."""
        super().__init__(message)
        self.connect = connect


class _Connection:
    """One socket to the server, with what was read past the last answer's end."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.buffer = b""
        self.idle_since = 0.0
        self.reusable = True
        raw = stream.extra(SocketAttribute.raw_socket, None)  # noqa: S610 - anyio's typed attributes, not SQL
        self.fileno = raw.fileno() if raw is not None else -1

    def looks_closed(self) -> bool:
        """Readable while idle: the server closed it (or sent what nobody asked for)."""
        if self.buffer or self.fileno < 0:
            return bool(self.buffer)
        try:
            readable, _, _ = select.select([self.fileno], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    async def receive(self) -> bytes:
        try:
            return await self.stream.receive(READ_SIZE)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError, ssl.SSLError):
            return b""

    async def until(self, delimiter: bytes, *, too_long: str, ended: str) -> bytes:
        """What comes before the next ``delimiter`` (both consumed), at most HEAD_LIMIT bytes.

        Raises:
            Http11Error: ``too_long`` or ``ended``, as it went.
        """
        while (end := self.buffer.find(delimiter)) < 0:
            if len(self.buffer) > HEAD_LIMIT:
                raise Http11Error(too_long)
            more = await self.receive()
            if not more:
                raise Http11Error(ended)
            self.buffer += more
        found, self.buffer = self.buffer[:end], self.buffer[end + len(delimiter) :]
        return found

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True), suppress(OSError, anyio.BrokenResourceError, ssl.SSLError):
            await self.stream.aclose()


class Response:
    """An answer's status and headers; its body read with :meth:`chunks`."""

    def __init__(self, connection: _Connection, status: int, headers: list[tuple[bytes, bytes]], *, head: bool) -> None:
        self._connection = connection
        self.status_code = status
        self.headers = headers
        self._lengths = self._framing(head)
        self.done = self._lengths == 0
        """The whole body was read: the connection can serve another request."""

    def header(self, name: bytes) -> bytes | None:
        """One header's value (names are lower case)."""
        return next((value for key, value in self.headers if key == name), None)

    @property
    def is_success(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status_code < 300

    def _framing(self, head: bool) -> int | None:
        """The body's length: a number, -1 for chunked, None for up to the connection's end."""
        if head or self.status_code in (204, 304):
            return 0
        coding = (self.header(b"transfer-encoding") or b"").lower()
        if b"chunked" in coding:
            return -1
        length = self.header(b"content-length")
        if length is not None and length.strip().isdigit():
            return int(length)
        self._connection.reusable = False
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives.

        Raises:
            Http11Error: the connection ended before the body did, or the chunked coding is broken.
        """
        connection = self._connection
        length = self._lengths
        if length == -1:
            async for piece in self._dechunked():
                yield piece
        elif length is None:
            if connection.buffer:
                piece, connection.buffer = connection.buffer, b""
                yield piece
            while piece := await connection.receive():
                yield piece
        else:
            async for piece in self._exactly(length):
                yield piece
        self.done = True

    async def _dechunked(self) -> AsyncIterator[bytes]:
        while True:
            line = await self._line()
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise Http11Error("the server's chunked answer is malformed") from None
            if size == 0:
                while await self._line():  # trailers, up to the blank line
                    pass
                return
            async for piece in self._exactly(size):
                yield piece
            await self._line()  # the CRLF after the chunk

    async def _exactly(self, length: int) -> AsyncIterator[bytes]:
        """The next ``length`` bytes of the body, as they arrive."""
        connection = self._connection
        left = length
        while left > 0:
            if not connection.buffer:
                connection.buffer = await connection.receive()
                if not connection.buffer:
                    raise Http11Error("the server ended the connection in the middle of its answer")
            piece, connection.buffer = connection.buffer[:left], connection.buffer[left:]
            left -= len(piece)
            yield piece

    async def _line(self) -> bytes:
        return await self._connection.until(
            b"\r\n",
            too_long="the server's chunked answer is malformed",
            ended="the server ended the connection in the middle of its answer",
        )


class Http11Pool:
    """Keep-alive connections to one server, for requests to one URL."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
        connect_timeout: float = 10.0,
        max_idle: int = 64,
        idle_expiry: float = 4.0,
        proxy: ForwardProxy | None = None,
    ) -> None:
        """``headers`` go with every request; ``idle_expiry`` stays under common servers' keep-alive
        timeouts (Node's is 5 s), so a connection is not reused just as the server closes it;
        ``proxy``: the forward proxy every connection goes through."""
        parts = urlsplit(url)
        self.secure = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.secure else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default_port = (443 if self.secure else 80) == self.port
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = (netloc if default_port else f"{netloc}:{self.port}").encode("idna")
        self.tls = tls if tls is not None or not self.secure else ssl.create_default_context()
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self.idle_expiry = idle_expiry
        self.headers = _encoded(headers or {})
        self.proxy = proxy
        forwarded = proxy is not None and not self.secure  # the proxy's own connection: absolute-form targets
        self._origin = b"http://" + self.authority if forwarded else b""
        authorization = proxy.authorization if forwarded and proxy is not None else None
        self._via = [b"proxy-authorization: " + authorization] if authorization else []
        self._idle: list[_Connection] = []
        self.opened = 0
        """Connections opened so far (a test's witness of reuse)."""

    def use_headers(self, headers: Mapping[str, str]) -> None:
        """Send other headers with every request from now on."""
        self.headers = _encoded(headers)

    async def aclose(self) -> None:
        """Close every idle connection."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.aclose()

    @asynccontextmanager
    async def request(
        self,
        method: str,
        headers: Headers,
        body: bytes = b"",
        *,
        sent: Callable[[], None] | None = None,
        target: str | None = None,
    ) -> AsyncIterator[Response]:
        """Send one request; the answer, its body to be read within the context.

        ``sent`` is called once the request is written (before its answer): a caller keeping
        messages in order may send the next one then. ``target``: another path (and query) on
        the same origin than the endpoint's.

        Raises:
            Http11Error: the server cannot be reached, or broke off before its answer's head.
            UnsafeHeaderError: a header or the target holds a control character.
        """
        head = self._head(method, headers, body, target or self.target)
        for attempt in (1, 2):
            connection, reused = await self._connection()
            try:
                await connection.stream.send(head + body if len(body) < READ_SIZE else head)
                if len(body) >= READ_SIZE:
                    await connection.stream.send(body)
                if sent is not None:
                    sent()
                response = await self._read_head(connection, head=method == "HEAD")
            except (Http11Error, OSError, anyio.BrokenResourceError, ssl.SSLError) as error:
                await connection.aclose()
                if reused and attempt == 1:
                    continue  # the server had closed the idle connection: once more on a new one
                if isinstance(error, Http11Error):
                    raise
                raise Http11Error(f"the connection broke ({type(error).__name__})") from None
            try:
                yield response
            except BaseException:
                connection.reusable = False
                raise
            finally:
                await self._release(connection, response)
            return

    def _head(self, method: str, headers: Headers, body: bytes, target: str) -> bytes:
        check_headers(headers)  # the configured ones were checked when they were set
        check_request_line(method, encoded := target.encode())
        lines = [method.encode() + b" " + self._origin + encoded + b" HTTP/1.1", b"host: " + self.authority, *self._via]
        given = {key for key, _ in headers}
        lines.extend(key + b": " + value for key, value in self.headers if key not in given)
        lines.extend(key + b": " + value for key, value in headers)
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(b"content-length: " + str(len(body)).encode())
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _connection(self) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < self.idle_expiry and not connection.looks_closed():
                return connection, True
            await connection.aclose()
        try:
            with anyio.fail_after(self.connect_timeout):
                stream = await open_stream(self.host, self.port, self.tls, self.proxy)
        except TimeoutError:
            raise Http11Error("connecting timed out", connect=True) from None
        except (OSError, ssl.SSLError) as error:
            why = f"{' through the proxy' if self.proxy else ''} ({error.strerror or type(error).__name__})"
            raise Http11Error(f"cannot connect{why}", connect=True) from None
        self.opened += 1
        return _Connection(stream), False

    async def _read_head(self, connection: _Connection, *, head: bool) -> Response:
        while True:
            block = await connection.until(
                b"\r\n\r\n",
                too_long="the server's answer has headers over 64 KiB",
                ended="the server closed the connection without an answer",
            )
            status_line, *lines = block.split(b"\r\n")
            parts = status_line.split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise Http11Error("the server's answer is not HTTP/1.1")
            status = int(parts[1])
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (100 Continue): the real one follows
            headers = []
            for line in lines:
                name, _, value = line.partition(b":")
                headers.append((name.strip().lower(), value.strip()))
            response = Response(connection, status, headers, head=head)
            closing = (response.header(b"connection") or b"").lower()
            if b"close" in closing or parts[0] == b"HTTP/1.0":
                connection.reusable = False
            return response

    async def _release(self, connection: _Connection, response: Response) -> None:
        if connection.reusable and response.done and len(self._idle) < self.max_idle:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            await connection.aclose()


def _encoded(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """The configured headers as written: an unsafe one raises UnsafeHeaderError (the config loader names it first)."""
    encoded = [(key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in headers.items()]
    check_headers(encoded)
    return encoded

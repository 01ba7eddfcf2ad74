"""The HTTP relay's own HTTP/1.1 client against real sockets: framing, streaming, keep-alive, broken servers, TLS,
a real forward proxy."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.abc
import pytest
import trustme
from anyio.streams.tls import TLSListener

from mcp_loop_guard.proxy.upstream.forward_proxy import ForwardProxy, ForwardProxyError, forward_proxy
from mcp_loop_guard.proxy.upstream.http11 import Http11Error, Http11Pool
from mcp_loop_guard.proxy.wire.header_text import UnsafeHeaderError
from tests.forward_proxy import PASSWORD, ForwardProxyProcess, running_forward_proxy
from tests.http_harness import poll

pytestmark = pytest.mark.anyio

Handler = Callable[[anyio.abc.ByteStream], Awaitable[None]]
OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


async def _request_head(stream: anyio.abc.ByteStream, buffer: bytearray) -> bytes | None:
    """One request's head and body (by its content-length) off the stream; None at its end."""
    while b"\r\n\r\n" not in buffer:
        try:
            buffer.extend(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(buffer) < end + length:
        buffer.extend(await stream.receive())
    del buffer[: end + length]
    return head


@asynccontextmanager
async def serving(handler: Handler, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server on a free loopback port running ``handler`` per connection; its URL and the request heads seen."""
    heads: list[bytes] = []
    listener: anyio.abc.Listener[anyio.abc.ByteStream] = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610 - anyio's typed attributes
    if tls is not None:
        listener = TLSListener(listener, tls, standard_compatible=False)

    async def serve(stream: anyio.abc.ByteStream) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async with stream:  # the client may go away at any point
                await handler(stream)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/mcp", heads
        tg.cancel_scope.cancel()


def answering(heads: list[bytes], *answers: bytes, close_after: int | None = None) -> Handler:
    """Answers each request on a connection with the next of ``answers`` (the last one again and again)."""

    async def handler(stream: anyio.abc.ByteStream) -> None:
        buffer = bytearray()
        served = 0
        while (head := await _request_head(stream, buffer)) is not None:
            heads.append(head)
            await stream.send(answers[min(served, len(answers) - 1)])
            served += 1
            if close_after is not None and served >= close_after:
                return

    return handler


async def _read(pool: Http11Pool, body: bytes = b"{}") -> tuple[int, bytes]:
    async with pool.request("POST", [(b"content-type", b"application/json")], body) as response:
        return response.status_code, b"".join([chunk async for chunk in response.chunks()])


async def test_keep_alive_serves_requests_one_connection_after_another() -> None:
    """Two requests in turn reuse one connection; the request carries the host, target, headers and body."""
    heads: list[bytes] = []
    async with serving(answering(heads, OK)) as (url, _):
        pool = Http11Pool(url, headers={"Authorization": "Bearer t"})
        with anyio.fail_after(10):
            first = await _read(pool, b'{"a":1}')
            second = await _read(pool)
        await pool.aclose()
    assert first == second == (200, b'{"ok":true}')
    assert pool.opened == 1
    assert heads[0].startswith(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:")
    assert b"authorization: Bearer t\r\n" in heads[0]
    assert b"content-length: 7\r\n" in heads[0]


async def test_a_chunked_answer_streams_as_it_arrives() -> None:
    """The first event of a chunked event stream is read while the server still holds back the rest."""
    go_on = anyio.Event()

    async def handler(stream: anyio.abc.ByteStream) -> None:
        await _request_head(stream, bytearray())
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await stream.send(b'10\r\ndata: {"n": 1}\n\n\r\n')
        await go_on.wait()
        await stream.send(b'10\r\ndata: {"n": 2}\n\n\r\n0\r\n\r\n')

    async with serving(handler) as (url, _):
        pool = Http11Pool(url)
        with anyio.fail_after(10):
            async with pool.request("POST", [], b"{}") as response:
                chunks = response.chunks()
                first = await anext(chunks)
                go_on.set()
                rest = b"".join([chunk async for chunk in chunks])
        await pool.aclose()
    assert first == b'data: {"n": 1}\n\n'
    assert rest == b'data: {"n": 2}\n\n'


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    """The server closes after each answer: the next request goes on a new connection and succeeds."""
    heads: list[bytes] = []
    async with serving(answering(heads, OK, close_after=1)) as (url, _):
        pool = Http11Pool(url)
        with anyio.fail_after(10):
            await _read(pool)
            await anyio.sleep(0.1)  # the server's close reaches us
            again = await _read(pool)
        await pool.aclose()
    assert again == (200, b'{"ok":true}')
    assert pool.opened == 2


async def test_a_request_on_a_connection_closed_under_it_is_sent_once_more() -> None:
    """The server takes a second request on a kept connection and closes without answering: it is retried."""
    connections = 0

    async def handler(stream: anyio.abc.ByteStream) -> None:
        nonlocal connections
        connections += 1
        buffer = bytearray()
        await _request_head(stream, buffer)
        await stream.send(OK)
        if connections == 1:
            await _request_head(stream, buffer)  # read the second request, then hang up on it
            return
        while await _request_head(stream, buffer) is not None:
            await stream.send(OK)

    async with serving(handler) as (url, _):
        pool = Http11Pool(url)
        with anyio.fail_after(10):
            await _read(pool)
            again = await _read(pool)
        await pool.aclose()
    assert again == (200, b'{"ok":true}')
    assert connections == 2


async def test_an_answer_cut_short_is_an_error() -> None:
    """A body shorter than its content-length, then the end of the connection: an error, not a short answer."""
    cut = b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"partial":'
    async with serving(answering([], cut, close_after=1)) as (url, _):
        pool = Http11Pool(url)
        with anyio.fail_after(10), pytest.raises(Http11Error, match="middle of its answer"):
            await _read(pool)
        await pool.aclose()


async def test_connection_close_and_a_body_to_the_end_are_not_kept() -> None:
    """An answer saying ``Connection: close``, or with no length, is read to its end and the connection dropped."""
    to_the_end = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it"
    async with serving(answering([], to_the_end, close_after=1)) as (url, _):
        pool = Http11Pool(url)
        with anyio.fail_after(10):
            first = await _read(pool)
            second = await _read(pool)
        await pool.aclose()
    assert first == second == (200, b"all of it")
    assert pool.opened == 2


@pytest.mark.parametrize(
    ("headers", "target"),
    [
        ([(b"mcp-method", b"tools/call\r\ncontent-length: 0\r\n\r\nGET /other HTTP/1.1")], None),
        ([(b"mcp-session-id", b"abc\ndef")], None),
        ([(b"mcp-name", b"echo\x00")], None),
        ([(b"bad name", b"v")], None),
        ([(b"x-split\r\nhost", b"elsewhere")], None),
        ([], "/mcp HTTP/1.1\r\nhost: elsewhere\r\n\r\nGET /other"),
        ([], "/with space"),
    ],
)
async def test_a_header_or_target_that_would_end_the_request_is_never_written(
    headers: list[tuple[bytes, bytes]], target: str | None
) -> None:
    """A control character in a header value, a name that is no token, a target with CR/LF or a space: nothing sent."""
    heads: list[bytes] = []
    async with serving(answering(heads, OK)) as (url, _):
        pool = Http11Pool(url)
        with anyio.fail_after(10), pytest.raises(UnsafeHeaderError):
            async with pool.request("POST", headers, b"{}", target=target):
                pass
        status = await _read(pool)  # the pool serves the next request as ever
        await pool.aclose()
    assert status == (200, b'{"ok":true}')
    assert len(heads) == 1
    assert b"elsewhere" not in heads[0]
    assert b"other" not in heads[0]


@pytest.mark.parametrize("headers", [{"Authorization": "Bearer x\r\nX-Other: y"}, {"Bad Name": "v"}])
def test_configured_headers_that_would_end_the_request_are_refused_up_front(headers: dict[str, str]) -> None:
    """Headers sent with every request are checked once, when set, and never quoted in the error."""
    with pytest.raises(UnsafeHeaderError) as raised:
        Http11Pool("http://127.0.0.1:1/mcp", headers=headers)
    assert "X-Other: y" not in str(raised.value)
    pool = Http11Pool("http://127.0.0.1:1/mcp")
    with pytest.raises(UnsafeHeaderError):
        pool.use_headers(headers)


async def test_nothing_listening_is_a_connect_error() -> None:
    """A port nobody listens on: an error that says the server could not be reached."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610 - anyio's typed attributes
    await listener.aclose()
    pool = Http11Pool(f"http://127.0.0.1:{port}/mcp")
    with anyio.fail_after(10), pytest.raises(Http11Error) as raised:
        await _read(pool)
    assert raised.value.connect


async def test_https_with_the_servers_certificate_verified() -> None:
    """Over TLS the server's certificate is checked against the trusted authority, and the answer read."""
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    async with serving(answering([], OK), tls=server_context) as (url, _):
        trusted = Http11Pool(url, tls=client_context)
        untrusted = Http11Pool(url, tls=ssl.create_default_context())
        with anyio.fail_after(10):
            answer = await _read(trusted)
            with pytest.raises(Http11Error):
                await _read(untrusted)
        await trusted.aclose()
    assert answer == (200, b'{"ok":true}')


@pytest.fixture
def forward_proxy_process(tmp_path: Path) -> Iterator[ForwardProxyProcess]:
    with running_forward_proxy(tmp_path / "proxy") as process:
        yield process


def _through(process: ForwardProxyProcess, *, refused: bool = False) -> ForwardProxy:
    """The proxy, with its credentials or (``refused``) a wrong password."""
    url = process.url.replace(PASSWORD, "wrong") if refused else process.url
    return forward_proxy("http://x", {"http_proxy": url}) or pytest.fail("no proxy")


async def _logged(process: ForwardProxyProcess, count: int) -> list[str]:
    """The proxy's access log once it holds ``count`` lines (it writes one when a connection ends)."""

    async def lines() -> list[str]:
        return process.requests()

    with anyio.fail_after(10):
        return await poll(lines, lambda logged: len(logged) >= count)


async def test_plain_http_goes_through_the_proxy_with_its_credentials(
    forward_proxy_process: ForwardProxyProcess,
) -> None:
    """Absolute-form requests to the proxy, which asks for Basic credentials; the server gets them as its own."""
    heads: list[bytes] = []
    async with serving(answering(heads, OK)) as (url, _):
        pool = Http11Pool(url, proxy=_through(forward_proxy_process))
        refused = Http11Pool(url, proxy=_through(forward_proxy_process, refused=True))
        with anyio.fail_after(10):
            first = await _read(pool, b'{"a":1}')
            second = await _read(pool)
            denied = await _read(refused)
        await pool.aclose()
        await refused.aclose()
        logged = await _logged(forward_proxy_process, 2)
    assert first == second == (200, b'{"ok":true}')
    assert denied[0] == 407
    assert len(heads) == 2  # the refused request never reached the server
    assert heads[0].startswith(b"POST /mcp HTTP/1.1\r\n")
    assert b"proxy-authorization" not in heads[0].lower()
    port = url.split(":")[2].split("/")[0]
    assert f"POST 127.0.0.1:{port}/mcp - 200 OK" in logged


async def test_https_goes_through_a_tunnel_with_the_servers_certificate_checked(
    forward_proxy_process: ForwardProxyProcess,
) -> None:
    """CONNECT, then TLS with the server itself: an untrusted certificate still fails; a refused tunnel is named."""
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    proxy = _through(forward_proxy_process)
    async with serving(answering([], OK), tls=server_context) as (url, _):
        trusted = Http11Pool(url, tls=client_context, proxy=proxy)
        untrusted = Http11Pool(url, tls=ssl.create_default_context(), proxy=proxy)
        refused = Http11Pool(url, tls=client_context, proxy=_through(forward_proxy_process, refused=True))
        with anyio.fail_after(10):
            answer = await _read(trusted)
            with pytest.raises(Http11Error, match=r"certificate|SSL"):
                await _read(untrusted)
            with pytest.raises(Http11Error, match=r"through the proxy .*refused the tunnel: 407") as raised:
                await _read(refused)
        await trusted.aclose()
        logged = await _logged(forward_proxy_process, 2)
    assert answer == (200, b'{"ok":true}')
    assert raised.value.connect
    port = url.split(":")[2].split("/")[0]
    assert any(line.startswith(f"CONNECT 127.0.0.1:{port}") for line in logged), logged


@pytest.mark.parametrize(
    ("url", "environ", "expected"),
    [
        ("http://api.example.com/mcp", {}, None),
        ("http://api.example.com/mcp", {"HTTP_PROXY": "http://proxy:3128"}, ("proxy", 3128, False)),
        ("http://api.example.com/mcp", {"HTTPS_PROXY": "http://proxy:3128"}, None),
        ("https://api.example.com/mcp", {"HTTPS_PROXY": "https://proxy"}, ("proxy", 443, True)),
        ("https://api.example.com/mcp", {"ALL_PROXY": "proxy:8080"}, ("proxy", 8080, False)),
        ("http://a/mcp", {"http_proxy": "http://low:1", "HTTP_PROXY": "http://up:2"}, ("low", 1, False)),
        ("http://api.example.com/mcp", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "example.com"}, None),
        ("http://api.example.com/mcp", {"HTTP_PROXY": "http://p:1", "no_proxy": ".example.com"}, None),
        ("http://example.com/mcp", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "example.com"}, None),
        ("http://badexample.com/mcp", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "example.com"}, ("p", 1, False)),
        ("http://127.0.0.1:8000/mcp", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "localhost, 127.0.0.1"}, None),
        ("http://127.0.0.1:8000/mcp", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "127.0.0.1:9000"}, ("p", 1, False)),
        ("https://h/mcp", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "h:443"}, None),
        ("https://h/mcp", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        ("http://[::1]:8080/mcp", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "::1"}, None),
        ("http://[::1]:8080/mcp", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "[::1]:8080"}, None),
        ("http://[::1]:8080/mcp", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "[::1]:9090"}, ("p", 1, False)),
    ],
)
def test_the_proxy_variables_are_read_as_the_sdks_client_reads_them(
    url: str, environ: dict[str, str], expected: tuple[str, int, bool] | None
) -> None:
    """By the upstream's scheme, then ALL_PROXY; lower case first; NO_PROXY names hosts, domains, ports or all."""
    found = forward_proxy(url, environ)
    assert (found.host, found.port, found.secure) == expected if found else expected is None


def test_a_proxy_the_guard_cannot_use_is_named_without_its_credentials() -> None:
    """A SOCKS proxy is refused up front, naming the variable; the password is never shown."""
    with pytest.raises(ForwardProxyError) as raised:
        forward_proxy("https://h/mcp", {"HTTPS_PROXY": "socks5://user:hunter2@proxy:1080"})
    assert str(raised.value).startswith("HTTPS_PROXY=socks5://proxy:1080: ")
    assert "hunter2" not in str(raised.value)
    found = forward_proxy("https://h/mcp", {"HTTPS_PROXY": "http://us%40er:p%3Ass@proxy:1080"})
    assert found is not None
    assert found.authorization == b"Basic " + base64.b64encode(b"us@er:p:ss")

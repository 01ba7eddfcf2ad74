"""The HTTP guard's listening sockets, bound before anything else starts.

A port another process holds is the commonest way an HTTP guard fails to start. Bound
first, it costs one line naming the address and no upstream is started for nothing;
uvicorn then serves on these sockets. Only the standard library is used, so the command
line can check a port before it starts an upstream early.
"""

from __future__ import annotations

import errno
import os
import socket

__all__ = ["BACKLOG", "ListenError", "listen"]

BACKLOG = 2048
"""Connections the kernel queues before the guard accepts them (uvicorn's default)."""

_WHY = {
    errno.EADDRINUSE: "address already in use (another process listens there: stop it or choose another --port)",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
    errno.EADDRNOTAVAIL: "cannot assign requested address (not an address of this machine)",
}


class ListenError(Exception):
    """The guard cannot listen where it was told to; the message names the address and why."""


def listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on ``port`` for every address ``host`` resolves to, as asyncio's server binds them.

    Raises:
        ListenError: ``host`` does not resolve, or an address cannot be bound.
    """
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        found = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ListenError(f"cannot listen on {shown}: {error.strerror}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, protocol, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, protocol)
            sockets.append(sock)
            if os.name == "posix":  # a restart binds at once, past connections still closing (as asyncio does)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # one socket per family, as asyncio
            sock.bind(address)
            sock.listen(BACKLOG)
    except OSError as error:
        for sock in sockets:
            sock.close()
        why = _WHY.get(error.errno or 0, (error.strerror or str(error)).lower())
        raise ListenError(f"cannot listen on {shown}: {why}") from None
    return sockets

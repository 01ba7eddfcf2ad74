"""How the guard reaches HTTPS upstreams: one TLS context, a bounded connect."""

from __future__ import annotations

import functools
import ssl

__all__ = ["CONNECT_TIMEOUT", "tls_context"]

CONNECT_TIMEOUT = 10.0
"""Seconds to reach an HTTP upstream (TCP and TLS) before it counts as down."""


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every upstream connection: each costs about 1 MB to build, and
    an HTTP guard opens an upstream connection per downstream session.

    Built as the SDK's HTTP client builds its own (the same trust store and environment
    variables), loaded only when an upstream is reached over TLS.
    """
    import httpx2  # noqa: PLC0415 - a stdio guard in front of a plain-HTTP upstream never loads it

    return httpx2.create_ssl_context()

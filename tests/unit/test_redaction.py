"""URLs as the guard prints them: the place is kept, the user, password, query and fragment never are."""

from __future__ import annotations

import pytest

from mcp_loop_guard.redaction import redact_url
from mcp_loop_guard.store import describe_store


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:s3cr3t@cache:6379/2", "redis://cache:6379/2"),
        ("rediss://:s3cr3t@cache:6380/0?ssl_cert_reqs=none", "rediss://cache:6380/0"),
        ("redis://cache:6379/0?password=s3cr3t&db=1", "redis://cache:6379/0"),
        ("redis://:pa#ss?w@rd-s3cr3t@cache/0", "redis://cache/0"),
        ("unix://:s3cr3t@/run/redis.sock?db=0", "unix:///run/redis.sock"),
        ("redis:/:s3cr3t@cache/0", "redis:/cache/0"),
        ("https://user:s3cr3t@[::1]:8443/mcp?key=s3cr3t#frag", "https://[::1]:8443/mcp"),
        ("https://mcp.example.com/@team/server", "https://mcp.example.com/@team/server"),
        ("sqlite", "sqlite"),
    ],
)
def test_credentials_queries_and_fragments_are_taken_out(url: str, shown: str) -> None:
    """Each way a URL carries a secret, in its user part or its query, is left out; the rest is shown as given."""
    assert redact_url(url) == shown


def test_a_store_is_described_without_its_password() -> None:
    """describe_store (logs, ``state list``'s title, its errors) names a Redis store by host and database only."""
    assert describe_store("redis://u:s3cr3t@cache:6379/0?password=s3cr3t") == "redis (redis://cache:6379/0)"
    assert describe_store("valkeys://cache:6380/1?password=s3cr3t") == "redis (valkeys://cache:6380/1)"

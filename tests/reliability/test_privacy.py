"""Privacy: by default no log line, even at debug level, and no metric label carries argument
values or result contents; LOOP_GUARD_LOG_CONTENTS=true logs them and says at start that
this is unsafe. A Redis store's password shows nowhere the store is named.
"""

from __future__ import annotations

import base64
import json

import anyio
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import CountingUpstream, content_dump, guard_argv
from tests.http_harness import Rig, http_get, open_http_session
from tests.redis_harness import RedisServer
from tests.reliability.wire import RawConnector, RawGuard

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SENSITIVE_ARGUMENT = "sk-test-ARGUMENT-4f9c2a71d3"
"""Looks like an API key: a value a model may well pass to a tool."""
SENSITIVE_CAPTION = "hunter2-CAPTION-8e1b7d"
SENSITIVE_LOOP_TEXT = "ghp_LOOPSECRET0123456789abcdef"


def _image_data(answer: dict[str, object]) -> str:
    result = answer["result"]
    assert isinstance(result, dict)
    [image] = [item for item in result["content"] if item["type"] == "image"]
    data = image["data"]
    assert isinstance(data, str)
    assert base64.b64decode(data).startswith(b"\x89PNG")
    return data


async def _exercise(guard: RawGuard) -> list[str]:
    """Runs calls through every path that logs (verdicts, rejections, upstream errors); returns result-only values."""
    with anyio.fail_after(20):
        echoed = await guard.call_tool("echo", {"text": SENSITIVE_ARGUMENT})
        image = await guard.call_tool("image", {"caption": SENSITIVE_CAPTION, "seed": 4242})
        for _ in range(5):  # warned at the 3rd and 4th, refused at the 5th
            await guard.call_tool("echo", {"text": SENSITIVE_LOOP_TEXT})
        unknown = await guard.call_tool("no_such_tool", {"token": SENSITIVE_ARGUMENT})
        await guard.send_line(
            f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "token": "{SENSITIVE_ARGUMENT}"'.encode()
        )
        await guard.send({"jsonrpc": "2.0", "id": "dup", "method": "tools/call", "params": _slow()})
        await guard.send({"jsonrpc": "2.0", "id": "dup", "method": "tools/call", "params": _echo(SENSITIVE_ARGUMENT)})
        await guard.response("dup")
        await guard.assert_serving()
    assert "error" in unknown, unknown
    assert SENSITIVE_ARGUMENT in json.dumps(echoed["result"]), "the secret should have come back in a result"
    return [_image_data(image)]


def _slow() -> dict[str, object]:
    return {"name": "slow", "arguments": {"seconds": 0.5}}


def _echo(text: str) -> dict[str, object]:
    return {"name": "echo", "arguments": {"text": text}}


async def test_debug_logs_hold_no_argument_or_result_values(
    raw_guard: RawConnector, counting: CountingUpstream
) -> None:
    """At debug level, across relays, warnings, refusals and rejections, stderr holds no argument or result value."""
    async with raw_guard(counting.command, env=counting.env, guard_args=["--log-level", "debug"]) as guard:
        result_only = await _exercise(guard)
        stderr = guard.stderr_text()

    assert "DEBUG" in stderr, "the guard should have logged at debug level"
    assert "refuse" in stderr.lower() or "block" in stderr.lower(), stderr
    for secret in (SENSITIVE_ARGUMENT, SENSITIVE_CAPTION, SENSITIVE_LOOP_TEXT, *result_only):
        leaks = [line for line in stderr.splitlines() if secret in line]
        assert leaks == [], f"{secret[:12]}... is in the log: {leaks[:3]}"


async def test_log_contents_logs_values_and_warns_at_start(raw_guard: RawConnector, counting: CountingUpstream) -> None:
    """LOOP_GUARD_LOG_CONTENTS=true warns at start that it is unsafe, then logs arguments and results."""
    env = {**counting.env, "LOOP_GUARD_LOG_CONTENTS": "true"}
    async with raw_guard(counting.command, env=env) as guard:
        at_start = guard.guard_lines()
        with anyio.fail_after(10):
            image = await guard.call_tool("image", {"caption": SENSITIVE_CAPTION, "seed": 7})
            await guard.assert_serving()
        stderr = guard.stderr_text()

    warnings = [line for line in at_start if "LOOP_GUARD_LOG_CONTENTS" in line]
    assert len(warnings) == 1, at_start
    assert "WARNING" in warnings[0], warnings
    assert "unsafe" in warnings[0], warnings
    assert SENSITIVE_CAPTION in stderr
    assert _image_data(image)[:40] in stderr


async def test_metrics_and_http_logs_hold_only_names(rig: Rig, counting: CountingUpstream) -> None:
    """Over HTTP, /metrics labels carry upstream and tool names and verdicts only; debug logs hold no values."""
    entry = {"command": counting.command[0], "args": counting.command[1:], "env": counting.env}
    config = rig.config({"counting": entry})
    async with (
        rig.guard(["--config", str(config), "--log-level", "debug"]) as guard,
        open_http_session(guard.mcp_url) as client,
    ):
        with anyio.fail_after(20):
            image = await client.session.call_tool("image", {"caption": SENSITIVE_CAPTION, "seed": 99})
            loop = [await client.session.call_tool("echo", {"text": SENSITIVE_LOOP_TEXT}) for _ in range(5)]
            metrics = await http_get(guard.url("/metrics"))
        stderr = guard.stderr_text()

    assert [result.is_error for result in loop] == [False, False, False, False, True]
    [image_item] = [item for item in content_dump(image) if item["type"] == "image"]
    assert metrics.status_code == 200
    text = metrics.text
    secrets = (SENSITIVE_CAPTION, SENSITIVE_LOOP_TEXT, image_item["data"])
    assert [secret for secret in secrets if secret in text] == []
    labels = _labels(text)
    assert labels.pop("tool") == {"image", "echo"}, labels
    assert labels.pop("upstream") == {"counting"}, labels
    assert labels.pop("verdict") == {"allow", "warn", "block"}, labels
    assert labels.pop("family") == {"identical"}, labels
    assert set(labels) <= {"le"}, f"unexpected labels: {labels}"
    for secret in secrets:
        leaks = [line for line in stderr.splitlines() if secret in line]
        assert leaks == [], f"{secret[:12]}... is in the log: {leaks[:2]}"


def _labels(text: str) -> dict[str, set[str]]:
    """Every label of every loop_guard_* sample, with the values it takes."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("loop_guard_"):
            continue
        for sample in family.samples:
            for name, value in sample.labels.items():
                found.setdefault(name, set()).add(value)
    return found


REDIS_PASSWORD = "redis-PASSWORD-5c1e9b"  # noqa: S105 - a made-up password whose leaks the test looks for


async def _state_command(*args: str) -> str:
    """``python -m mcp_loop_guard state ARGS``: what it wrote on stdout and stderr."""
    with anyio.fail_after(30):
        done = await anyio.run_process([*guard_argv(), "state", *args], check=False)
    return done.stdout.decode() + done.stderr.decode()


@pytest.mark.parametrize(
    "form", ["redis://:{password}@127.0.0.1:{port}/0", "redis://127.0.0.1:{port}/0?password={password}"]
)
async def test_a_redis_password_shows_in_no_log_and_no_state_listing(
    raw_guard: RawConnector, counting: CountingUpstream, redis_server: RedisServer, form: str
) -> None:
    """A store URL's password, in its user part or its query: not in the debug log, state list's title or errors."""
    redis.Redis(port=redis_server.port).config_set("requirepass", REDIS_PASSWORD)
    url = form.format(password=REDIS_PASSWORD, port=redis_server.port)
    async with raw_guard(
        counting.command, env=counting.env, guard_args=["--log-level", "debug", "--state", url]
    ) as guard:
        with anyio.fail_after(20):
            await guard.assert_serving()
        log = guard.stderr_text()
    listing = await _state_command("list", "--state", url)
    missing = await _state_command("reset", "no-such-agent", "--state", url)
    mistyped = await anyio.run_process(
        [*guard_argv(), "--state", url.replace("redis://", "redis:/"), "--", "true"],
        check=False,
    )

    assert f"redis (redis://127.0.0.1:{redis_server.port}/0)" in log, log
    assert f"agents in redis (redis://127.0.0.1:{redis_server.port}/0)" in listing, listing
    assert "stdio:" in listing, "the guard's agent should be listed (the store took the password)"
    assert f"redis://127.0.0.1:{redis_server.port}/0" in missing, missing
    assert mistyped.returncode == 2, mistyped.stderr.decode()
    for shown in (log, listing, missing, mistyped.stdout.decode() + mistyped.stderr.decode()):
        assert REDIS_PASSWORD not in shown, shown

"""Progress and cancellation relayed both ways, proven against our counting upstream."""

from __future__ import annotations

import anyio
import pytest

from tests.harness import Connector, CountingUpstream, Mode, eventually, read_json_lines, texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio, pytest.mark.parametrize("mode", ["direct", "guarded"])]


async def test_progress_arrives_before_result(connect: Connector, counting: CountingUpstream, mode: Mode) -> None:
    """Progress notifications for the caller's token all arrive, in order, before the call's result."""
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(counting.command, mode=mode, env=counting.env) as conn:
        with anyio.fail_after(10):
            result = await conn.session.call_tool("slow", {"seconds": 0.5}, progress_callback=on_progress)
            at_result = list(seen)
    assert texts(result) == ["slept 0.5 seconds"]
    assert at_result == [(step, 5, f"step {step}") for step in range(1, 6)]


async def test_cancelled_call_cancelled_upstream(connect: Connector, counting: CountingUpstream, mode: Mode) -> None:
    """A client cancelling a call in flight cancels it in the upstream, and the session goes on."""
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    def upstream_cancelled() -> bool:
        return any(entry["event"] == "cancelled" for entry in read_json_lines(counting.log))

    async with connect(counting.command, mode=mode, env=counting.env) as conn:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def call_slow() -> None:
                    await conn.session.call_tool("slow", {"seconds": 60}, progress_callback=on_progress)

                tg.start_soon(call_slow)
                await progressed.wait()
                tg.cancel_scope.cancel()
        with anyio.fail_after(5):
            await eventually(upstream_cancelled)
            echoed = await conn.session.call_tool("echo", {"text": "still here"})
    assert texts(echoed) == ["still here"]

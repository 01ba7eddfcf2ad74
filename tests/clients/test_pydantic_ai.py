"""pydantic-ai looping through the guard: its MCP toolset over stdio, a scripted FunctionModel.

pydantic-ai (``pydantic-ai-slim[mcp]``, on FastMCP's client and this project's SDK) runs in
the test process and starts the guard as its child, as an application embedding it would.
It does not start a server again once the guard has closed the session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import MARKER, CountingUpstream, guard_command, server_environment

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

REAL_TEXT = "always the same"
"""What the counting server's ``constant`` tool returns."""
ABORT_NOTE = "closing this session"
"""Part of the refusal after which the guard closes the session."""


async def test_twenty_identical_calls_through_pydantic_ai(
    counting: CountingUpstream, guard_env: dict[str, str], process_marker: str, tmp_path: Path
) -> None:
    """pydantic-ai's model sees warnings at calls 3-4, refusals from 5, errors after the abort; 4 calls go upstream."""
    from tests.clients.pydantic_ai_agent import FINAL_TEXT, Seen, run_looping_agent  # pydantic-ai: see there

    stderr = tmp_path / "guard-stderr.log"
    env = server_environment(process_marker, guard_env)
    prompt = "Use the constant tool until you have what you need, then answer."
    output, seen = await run_looping_agent(
        guard_command(counting.command), env, stderr, tool="constant", calls=20, prompt=prompt
    )
    shown = "\n".join(f"call {n}: {one.outcome} {one.texts}" for n, one in enumerate(seen, 1))
    context = f"what the model saw:\n{shown}\n--- guard stderr ---\n{stderr.read_text(errors='replace')}"
    assert output == FINAL_TEXT, context
    assert len(seen) == 20, context
    assert seen[:2] == [Seen("success", (REAL_TEXT,))] * 2, context
    for warned in seen[2:4]:
        assert warned.outcome == "success", context
        assert warned.texts[0] == REAL_TEXT, context
        assert [text.startswith(MARKER) for text in warned.texts[1:]] == [True], context
    for refused in seen[4:7]:
        assert refused.outcome == "failed", context
        assert refused.texts[0].startswith(MARKER), context
    assert ABORT_NOTE in seen[6].texts[0], context
    assert all(one.outcome != "success" and REAL_TEXT not in one.texts for one in seen[7:]), context
    assert len(counting.calls("constant")) == 4, context

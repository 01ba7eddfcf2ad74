"""Run the guard with its judging taken out: ``python benchmarks/unjudged_guard.py -- COMMAND...``.

The stdio table's row for this program splits the guard's cost above the byte relay in
two: what the message relay itself costs (reading, framing, parsing each message once,
routing answers by id, the requests in flight, writing), and what judging a call adds
(the call's and the result's fingerprints, the detector, the durable write of the
agent's state, metrics and the event log). Here every ``tools/call`` crosses the same
relay as any other request, unjudged; nothing else changes, and the guard's own code has
no switch for it: this is a measuring instrument, not a mode to run.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from mcp_loop_guard.cli import main
from mcp_loop_guard.proxy.relay import pipe


async def _unjudged(*args: Any, **kwargs: Any) -> None:
    """Stands in for :func:`~mcp_loop_guard.proxy.relay.lifecycle.begin`: no call, so nothing is judged."""


async def _no_annotations(self: object, name: str, params: Mapping[str, Any]) -> None:
    """Stands in for the tool-annotation lookup, an input of judging only."""


if __name__ == "__main__":
    pipe.begin = _unjudged  # type: ignore[assignment]
    pipe.ToolList.annotations = _no_annotations  # type: ignore[assignment,method-assign]
    sys.exit(main(sys.argv[1:]))

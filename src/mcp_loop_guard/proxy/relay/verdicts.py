"""Turn detector verdicts into what the model reads.

Only this module knows how a verdict looks on the wire: a WARN appends one text item to the
real result, a BLOCK or ABORT replaces it with an ``isError`` result. Both carry a
machine-readable copy under a namespaced ``_meta`` key, with the thresholds of the policy
that judged the call (its server's and tool's).
"""

from __future__ import annotations

from typing import Any, Final

from mcp_loop_guard.core.model import Action, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.proxy.wire.eras import SERVER_INFO_META_KEY

MARKER: Final = "[loop-guard]"
"""Every text the guard adds starts with this, so clients and inner guards can recognise it."""

VERDICT_META_KEY: Final = "mcp-loop-guard/verdict"


def verdict_meta(verdict: Verdict, policy: Policy) -> dict[str, Any]:
    """The machine-readable verdict placed under ``_meta``."""
    meta: dict[str, Any] = {
        "action": verdict.action.name.lower(),
        "tool": verdict.tool,
        "streak": verdict.streak,
        "blocks": verdict.blocks,
        "warnThreshold": policy.warn_threshold,
        "blockThreshold": policy.block_threshold,
        "abortThreshold": policy.abort_threshold,
    }
    if verdict.family is not None:
        meta["family"] = verdict.family.value
    return meta


def _with_meta(result: dict[str, Any], verdict: Verdict, policy: Policy) -> dict[str, Any]:
    meta = result.get("_meta")
    merged = dict(meta) if isinstance(meta, dict) else {}
    merged[VERDICT_META_KEY] = verdict_meta(verdict, policy)
    result["_meta"] = merged
    return result


def _is_note(item: object) -> bool:
    return isinstance(item, dict) and item.get("type") == "text" and str(item.get("text", "")).startswith(MARKER)


def without_notes(result: dict[str, Any]) -> dict[str, Any]:
    """The result minus the notes of guards further upstream (the same object when there are none).

    Behind another guard, its notes change from call to call ("called 3 times", "4 times"):
    hashed, they would make every result look new and hide the loop from this guard.
    """
    content = result.get("content")
    if not isinstance(content, list):
        return result
    for item in content:  # a plain loop: this runs for every result
        if _is_note(item):
            break
    else:
        return result
    return {**result, "content": [item for item in content if not _is_note(item)]}


def warned(result: dict[str, Any], verdict: Verdict, policy: Policy) -> dict[str, Any]:
    """The real result plus one warning item at the end; the input is not modified."""
    content = result.get("content")
    items = list(content) if isinstance(content, list) else []
    items.append({"type": "text", "text": f"{MARKER} {verdict.reason}"})
    return _with_meta({**result, "content": items}, verdict, policy)


def refused(verdict: Verdict, policy: Policy) -> dict[str, Any]:
    """The result that stands in for a call that never reached the upstream."""
    assert verdict.action >= Action.BLOCK
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": f"{MARKER} {verdict.reason}"}],
        "isError": True,
    }
    return _with_meta(result, verdict, policy)


SERVER_INFO = SERVER_INFO_META_KEY


def complete(result: dict[str, Any], *, modern: bool, server_info: object = None) -> dict[str, Any]:
    """A result the guard wrote, shaped as 2026-07-28 results are when the request was.

    It names its type (``resultType``) and, as every result of that era should, the server
    (the upstream's ``serverInfo``, as last seen on one of its results).
    """
    if modern:
        result.setdefault("resultType", "complete")
        if server_info is not None:
            result["_meta"] = {SERVER_INFO: server_info, **(result.get("_meta") or {})}
    return result


def failed(message: str) -> dict[str, Any]:
    """A tool error result for a call the guard could not complete (upstream gone, timed out)."""
    return {"content": [{"type": "text", "text": f"{MARKER} {message}"}], "isError": True}

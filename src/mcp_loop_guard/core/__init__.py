"""Pure loop detection: fingerprints, streaks and verdicts; no I/O, no MCP, no clock."""

from mcp_loop_guard.core.fingerprint import call_key, canonical_json, result_key
from mcp_loop_guard.core.model import ALLOWED, Action, CallKey, ResultKey, Verdict
from mcp_loop_guard.core.policy import Policy

__all__ = [
    "ALLOWED",
    "Action",
    "CallKey",
    "Policy",
    "ResultKey",
    "Verdict",
    "call_key",
    "canonical_json",
    "result_key",
]

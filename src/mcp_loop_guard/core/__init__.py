"""Pure loop detection: fingerprints, streaks and verdicts; no I/O, no MCP, no clock."""

from mcp_loop_guard.core.detector import LoopDetector, Ticket
from mcp_loop_guard.core.fingerprint import call_key, canonical_json, result_key
from mcp_loop_guard.core.model import ALLOWED, Action, CallKey, ResultKey, Verdict
from mcp_loop_guard.core.policy import Policy

__all__ = [
    "ALLOWED",
    "Action",
    "CallKey",
    "LoopDetector",
    "Policy",
    "ResultKey",
    "Ticket",
    "Verdict",
    "call_key",
    "canonical_json",
    "result_key",
]

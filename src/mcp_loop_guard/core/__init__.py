"""Pure loop detection: fingerprints, loop families, verdicts; no I/O, no MCP, no clock."""

from mcp_loop_guard.core.detector import (
    Call,
    LoopDetector,
    Outcome,
    Ticket,
    abandon,
    begin,
    call_of,
    error_outcome,
    finish,
    outcome_of,
    take_over,
)
from mcp_loop_guard.core.fingerprint import call_key, canonical_json, result_key
from mcp_loop_guard.core.model import ALLOWED, Action, CallKey, Family, Mode, ResultKey, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.scrub import ScrubRules
from mcp_loop_guard.core.state import State, StateFormatError

__all__ = [
    "ALLOWED",
    "Action",
    "Call",
    "CallKey",
    "Family",
    "LoopDetector",
    "Mode",
    "Outcome",
    "Policy",
    "ResultKey",
    "ScrubRules",
    "State",
    "StateFormatError",
    "Ticket",
    "Verdict",
    "abandon",
    "begin",
    "call_key",
    "call_of",
    "canonical_json",
    "error_outcome",
    "finish",
    "outcome_of",
    "result_key",
    "take_over",
]

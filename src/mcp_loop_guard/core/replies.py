"""What the guard says when it answers in an upstream's place: every such text, in one place.

The verdicts' own texts are in :mod:`.wording`. These are the rest a client or a model
reads: the JSON-RPC errors the spec prescribes for a broken message, why a request failed
(an upstream gone, timed out, answering with the wrong shape), and the HTTP front door's
refusals. A text names an upstream by its config name (``label``, already quoted), never by
its command line or URL, and never quotes the arguments or results of a call.
"""

from __future__ import annotations

from typing import Final

# --- JSON-RPC: a message the guard cannot take ------------------------------------------------

NOT_JSON: Final = "Parse error: the line is not valid JSON"
TOO_DEEP: Final = "nested too deeply to read"
NOT_A_MESSAGE: Final = "not a JSON-RPC 2.0 request or notification"
A_BATCH: Final = "not a JSON-RPC 2.0 request or notification (batches are not part of MCP)"
METHOD_NOT_TEXT: Final = "the method must be a string"
ID_NOT_USABLE: Final = "the id must be a string or an integer"
METHOD_WITH_CONTROL: Final = "the method holds a control character (CR, LF, NUL...)"
PARAMS_NOT_OBJECT: Final = "params must be an object"
ID_IN_FLIGHT: Final = "a request with this id is still in flight"
TOOL_NAME_NOT_TEXT: Final = "the tool name must be a string"
ARGUMENTS_NOT_OBJECT: Final = "arguments must be an object"
CLIENT_MALFORMED_RESPONSE: Final = "the client answered with a malformed response"
TOO_MANY_AWAITING: Final = "too many requests are awaiting the client's answer; try again later"


def invalid_request(why: str) -> str:
    """A -32600 error's message."""
    return f"Invalid Request: {why}"


def invalid_params(why: str) -> str:
    """A -32602 error's message."""
    return f"Invalid params: {why}"


def version_with_control(key: str) -> str:
    """A 2026-07-28 protocol version no HTTP header could carry."""
    return f"_meta's {key} holds a control character (CR, LF, NUL...)"


def message_too_large(size: int, limit: int) -> str:
    """A client's message over ``LOOP_GUARD_MAX_MESSAGE_BYTES``."""
    return f"message of {size} bytes is over the limit of {limit} (LOOP_GUARD_MAX_MESSAGE_BYTES)"


# --- why a request failed (an isError result for a tools/call, an error for the rest) ----------

WRONG_SHAPE_RESULT: Final = "the upstream answered with a result of the wrong shape (its content must be a list)"
WRONG_SHAPE_RESPONSE: Final = "the upstream answered with a response of the wrong shape (its result must be an object)"
SHUTTING_DOWN: Final = "the guard is shutting down; the request was cancelled"
SESSION_ENDED: Final = "the session was ended by the loop guard; the request was cancelled"


def no_answer(label: str, method: str, seconds: float) -> str:
    """A request past its call timeout (``LOOP_GUARD_CALL_TIMEOUT_SECONDS``), cancelled upstream."""
    return (
        f"upstream {label} sent no answer or progress for {method} within {seconds:g}s "
        "(call timeout); the request was cancelled"
    )


def no_initialize(label: str, seconds: float) -> str:
    """An upstream that did not answer ``initialize`` in time."""
    return f"upstream {label} did not answer initialize within {seconds:g}s"


def answer_too_large(size: int | None, limit: int) -> str:
    """An upstream's answer over ``LOOP_GUARD_MAX_MESSAGE_BYTES`` (``size`` when known)."""
    if size is None:
        return f"the upstream's answer is over the limit of {limit} bytes (LOOP_GUARD_MAX_MESSAGE_BYTES); not relayed"
    return (
        f"the upstream's answer of {size} bytes is over the limit of {limit} "
        "(LOOP_GUARD_MAX_MESSAGE_BYTES); it was not relayed"
    )


def upstream(label: str, what: str) -> str:
    """An upstream's state or fate, said of it by name: ``upstream `time` exited with status 3``."""
    return f"upstream {label} {what}"


def stopped_reading(why: object) -> str:
    """An upstream that no longer takes its input (its pipe broke, or it left too much unread)."""
    return f"stopped reading its input ({why})"


def stuck(seconds: float) -> str:
    """An upstream stopped because it sent requests without ever reading its input."""
    return f"read none of its input for {seconds:g}s while sending requests, and was stopped"


REPLACED: Final = "was replaced by a config reload"
NO_HANDSHAKE_AGAIN: Final = "did not complete the handshake again"
NO_HANDSHAKE: Final = "did not complete its handshake"
NOT_CONNECTED_YET: Final = "the upstream is not connected yet"
STREAM_NOT_OPEN: Final = "the event stream is not open yet"
STREAM_CLOSED: Final = "closed its event stream"
FOREIGN_ENDPOINT: Final = "named a message endpoint on another origin; not followed"
FORGOT_SESSION: Final = "does not know its own session (HTTP 404)"
NO_RESPONSE_IN_ANSWER: Final = "ended its answer without a response to the request"


def not_connected(why: str) -> str:
    """An upstream whose session is down now."""
    return f"is not connected: {why}"


def http_refused(status: int) -> str:
    """An upstream that answered a request with an HTTP error."""
    if status in (401, 403):
        return f"refused the request (HTTP {status}: give its credentials with --header or the config's headers)"
    return f"refused the request (HTTP {status})"


REMOVED: Final = "was removed by a config reload"
NONE_ANSWERED: Final = "no upstream answered"


def unknown(kind: str, name: str) -> str:
    """A tool, prompt or task no upstream listed (with several upstreams, requests go only to what one listed)."""
    return f"Unknown {kind}: {name}"


def resource_not_found(uri: str) -> str:
    """A URI no upstream listed."""
    return f"Resource not found: {uri}"


def ambiguous(why: str) -> str:
    """A URI several upstreams listed."""
    return f"Ambiguous resource: {why}"


def method_not_found(method: str) -> str:
    """A method no upstream knows."""
    return f"Method not found: {method}"


def cannot_route(several: bool) -> str:
    """A shared upstream's request to a client, when nobody (or more than one) could be the one it asks."""
    why = "several clients have requests in flight" if several else "no client has a request in flight"
    return f"cannot route this request from a shared upstream: {why}"


# --- a config reload that cannot be applied live (the operator's log) ---------------------------

OTHER_SERVERS: Final = "this guard relays one server directly; serving other servers needs a restart"
OTHER_URL: Final = "this guard relays one HTTP server directly; another URL needs a restart"
ONE_AND_SEVERAL: Final = (
    "going between one upstream and several renames every tool (server__name): that needs a restart"
)


# --- the HTTP front door ----------------------------------------------------------------------

SESSION_NOT_FOUND: Final = "Session not found"
TOO_MANY_SESSIONS: Final = "Service Unavailable: too many sessions; try again later"
TOO_MANY_AGENTS: Final = "Service Unavailable: too many agents busy; try again later"
STOPPING_AT_START: Final = "Service Unavailable: the guard is stopping before its upstreams started"
MISSING_SESSION: Final = "Bad Request: Missing session ID"
METHOD_NOT_ALLOWED: Final = "Method Not Allowed"
NO_SESSIONS_STATELESS: Final = "Method Not Allowed: a stateless server has no sessions"
NO_SESSIONS_STATELESS_REQUESTS: Final = "Method Not Allowed: stateless requests have no session"
NOT_ACCEPTABLE_STREAM: Final = "Not Acceptable: the client must accept text/event-stream"
NOT_ACCEPTABLE_ANSWER: Final = "Not Acceptable: the client must accept text/event-stream or application/json"
ONE_GET_STREAM: Final = "Conflict: only one GET stream is allowed per session"
NOTHING_TO_RESUME: Final = (
    "Bad Request: no stream of this session to resume from this Last-Event-ID "
    "(it was written to its end, or its session ended)"
)
HOST_NOT_ALLOWED: Final = "Misdirected Request: this Host is not allowed (LOOP_GUARD_ALLOWED_HOSTS)"
ORIGIN_NOT_ALLOWED: Final = "Forbidden: this Origin is not allowed (LOOP_GUARD_ALLOWED_ORIGINS)"
TOKEN_REQUIRED: Final = "Unauthorized: a valid bearer token is required"  # noqa: S105 - what a 401 says


def unsupported_version(version: str) -> str:
    """A session's request naming a protocol version the session does not speak."""
    return f"Bad Request: Unsupported protocol version: {version}"


def body_too_slow(seconds: float) -> str:
    """A request body that did not arrive within ``LOOP_GUARD_BODY_TIMEOUT_SECONDS``."""
    return f"Request Timeout: the body did not arrive within {seconds:g}s"


def body_too_large(limit: int) -> str:
    """A request body over ``LOOP_GUARD_MAX_REQUEST_BYTES``."""
    return f"Request body too large: the limit is {limit} bytes (LOOP_GUARD_MAX_REQUEST_BYTES)"


def aborted_agent(seconds: int) -> str:
    """A sessionless agent's request while the request window it was aborted in is open (429)."""
    return f"loop guard: this agent's session was aborted for looping; retry after {seconds}s with a different approach"

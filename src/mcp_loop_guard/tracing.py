"""OpenTelemetry: one span per relayed ``tools/call``, an event per verdict, the client's trace continued.

Off unless the standard ``OTEL_*`` variables configure a trace exporter
(``OTEL_TRACES_EXPORTER=otlp|console``, or an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``) and
the ``otel`` extra is installed; ``OTEL_SDK_DISABLED=true`` turns it off. Off, nothing here
runs for a call: the judge holds None.

Spans follow the MCP semantic conventions: named ``tools/call <tool>``, kind SERVER, with
``mcp.method.name``, ``gen_ai.operation.name`` (``execute_tool``), ``gen_ai.tool.name``,
``mcp.session.id`` (a digest of the agent's key: over HTTP without tokens the session id is
the client's only credential, so it never goes to a collector as it is) and the guard's own
``mcp_loop_guard.*`` attributes (server, verdict, family, count). Every warn, block and
abort adds a span event. The trace context comes from the request's ``params._meta``
(``traceparent``, ``tracestate``) or, over HTTP, its headers, as far as it follows the W3C
rules (:mod:`~mcp_loop_guard.trace_context`), and the upstream gets this
span's context in ``params._meta`` (on the SDK paths the SDK's own client span, a child of
this one, carries it). Names and counts only: never arguments or results.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mcp_loop_guard.core.model import Action, Verdict
from mcp_loop_guard.trace_context import CARRIER_KEYS, checked_carrier

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = ["CARRIER_KEYS", "CallSpan", "Tracing", "current", "installed", "session_digest"]

logger = logging.getLogger(__name__)

FLUSH_MILLIS = 1000
"""At exit, how long spans not yet sent may take to go out."""
_current: Tracing | None = None


class CallSpan:
    """The span of one call; ended once, with the verdict."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        """Wrap a started span."""
        self._span = span

    def carrier(self) -> dict[str, str]:
        """This span's context as ``_meta`` entries for the upstream request."""
        from opentelemetry.propagate import inject  # noqa: PLC0415 - only where tracing is on
        from opentelemetry.trace import set_span_in_context  # noqa: PLC0415

        found: dict[str, str] = {}
        inject(found, context=set_span_in_context(self._span))
        return {key: value for key, value in found.items() if key in CARRIER_KEYS}

    @contextmanager
    def current(self) -> Iterator[None]:
        """Make this span the current one (the SDK's client span for the upstream request nests under it)."""
        from opentelemetry.trace import use_span  # noqa: PLC0415

        with use_span(self._span, end_on_exit=False):
            yield

    def end(self, verdict: Verdict, *, error: str | None = None) -> None:
        """Record the verdict (an event unless it is a plain allow) and end the span."""
        from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

        span = self._span
        judged = verdict.judged
        span.set_attribute("mcp_loop_guard.verdict", judged.name.lower())
        if judged is not Action.ALLOW:
            family = verdict.family.value if verdict.family is not None else "identical"
            span.set_attribute("mcp_loop_guard.family", family)
            span.set_attribute("mcp_loop_guard.count", verdict.streak)
            span.add_event(
                f"mcp_loop_guard.{judged.name.lower()}",
                {
                    "mcp_loop_guard.family": family,
                    "mcp_loop_guard.count": verdict.streak,
                    "mcp_loop_guard.refusals": verdict.blocks,
                    "mcp_loop_guard.shadow": verdict.shadow is not Action.ALLOW,
                },
            )
        if verdict.action >= Action.BLOCK:
            error = "mcp_loop_guard.refused"
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR))
        span.end()


class Tracing:
    """Starts call spans on a configured tracer provider."""

    def __init__(self, provider: TracerProvider) -> None:
        """Spans go to ``provider``; it is flushed and shut down by :func:`installed`."""
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("mcp-loop-guard")

    def start(self, tool: str, server: str, session: str, carrier: Mapping[str, object] | None) -> CallSpan:
        """A SERVER span for a call, child of the client's trace context when it sent one."""
        from opentelemetry.propagate import extract  # noqa: PLC0415
        from opentelemetry.trace import SpanKind, get_current_span  # noqa: PLC0415

        def _parent(extracted: Context) -> Context | None:
            """The client's context, unless a span of the same trace is current (the SDK's server span)."""
            theirs = get_current_span(extracted).get_span_context()
            ours = get_current_span().get_span_context()
            if not theirs.is_valid or (ours.is_valid and ours.trace_id == theirs.trace_id):
                return None
            return extracted

        given = checked_carrier(carrier or {})  # what fails the W3C rules is not read at all
        span = self.tracer.start_span(
            f"tools/call {tool}",
            context=_parent(extract(given)) if given else None,
            kind=SpanKind.SERVER,
            attributes={
                "mcp.method.name": "tools/call",
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "mcp.session.id": session_digest(session),
                "mcp_loop_guard.server": server,
            },
        )
        return CallSpan(span)


def session_digest(key: str) -> str:
    """What a span says of an agent's key: the first 16 hex digits of its SHA-256, the same in every replica."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def current() -> Tracing | None:
    """The tracing of this process, or None when it is off."""
    return _current


def _exporter(environ: Mapping[str, str]) -> str | None:
    """The exporter the OTEL_* variables ask for, or None."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    chosen = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if chosen:
        return None if chosen == "none" else chosen
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return None


def _provider(kind: str, environ: Mapping[str, str]) -> TracerProvider | None:
    """A provider with a batching processor for the exporter ``kind``; None when it cannot be built."""
    try:
        from opentelemetry import propagate, trace  # noqa: PLC0415
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter  # noqa: PLC0415
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: PLC0415
    except ImportError:
        logger.warning(
            "OTEL_* variables ask for traces but OpenTelemetry is not installed "
            "(pip install 'mcp-loop-guard[otel]'); no traces are sent"
        )
        return None
    exporter: Any
    if kind == "console":
        exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout is the protocol channel over stdio
    elif kind == "otlp":
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        flavour = "grpc" if protocol == "grpc" else "http"
        try:
            module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{flavour}.trace_exporter")
        except ImportError:
            logger.warning("the OTLP exporter for %s is not installed; no traces are sent", protocol or "http/protobuf")
            return None
        exporter = module.OTLPSpanExporter()
    else:
        logger.warning("OTEL_TRACES_EXPORTER=%s is not supported here (otlp, console or none); no traces", kind)
        return None
    resource = Resource.create({} if environ.get("OTEL_SERVICE_NAME") else {"service.name": "mcp-loop-guard"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    propagate.set_global_textmap(TraceContextTextMapPropagator())
    return provider


@contextmanager
def installed(environ: Mapping[str, str] | None = None, provider: TracerProvider | None = None) -> Iterator[None]:
    """Turn tracing on for the process while the context lasts (when configured); flush spans at the end.

    ``provider``: one of the caller's own (tests), instead of what the environment configures.
    """
    global _current  # noqa: PLW0603 - one tracer provider per process, as OpenTelemetry has
    if provider is None:
        variables = os.environ if environ is None else environ
        kind = _exporter(variables)
        provider = _provider(kind, variables) if kind is not None else None
        owned = True
    else:
        owned = False
    if provider is None:
        yield
        return
    _current = Tracing(provider)
    logger.info("OpenTelemetry traces are on")
    try:
        yield
    finally:
        _current = None
        if owned:
            provider.force_flush(timeout_millis=FLUSH_MILLIS)  # bounded: a collector that is down cannot hold the exit
            provider.shutdown()

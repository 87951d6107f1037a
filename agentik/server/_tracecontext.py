"""The one place an incoming trace context enters: W3C ``traceparent`` (with
``tracestate`` and ``baggage``) becomes the current OpenTelemetry context
while the guard hands the request on, so every transport's turn takes it
along (``ChatAgent`` carries the caller's context into the conversation task,
where it parents the turn's span). The global propagator reads it, as any
instrumentation would; a malformed header is ignored (the turn starts a trace).

Built only when the agent traces: otherwise the guard holds None and checks
nothing, and OpenTelemetry is never imported.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Scope

from agentik.agent import ChatAgent

_HEADERS = frozenset({b"traceparent", b"tracestate", b"baggage"})

Enter = Callable[[Scope], Callable[[], None] | None]
"""Attach the request's context; return what detaches it (None: nothing attached)."""


def trace_context_hook(agent: ChatAgent) -> Enter | None:
    """The guard's hook for ``agent``; None when the agent does not trace."""
    if not agent.tracing:
        return None
    from opentelemetry import context, propagate

    def enter(scope: Scope) -> Callable[[], None] | None:
        carrier: dict[str, str] = {}
        for name, value in scope["headers"]:
            if name in _HEADERS:
                carrier.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        if "traceparent" not in carrier:
            return None
        token = context.attach(propagate.extract(carrier))
        return lambda: context.detach(token)

    return enter

"""Whether an agent traces, decided once when it opens, importing nothing
when it does not.

OpenTelemetry is optional (``agentik[otel]``). With ``tracer_provider=None``
the agent follows the global provider, but only if the application uses
OpenTelemetry at all, that is, if ``opentelemetry.trace`` is already
imported when the agent opens (the application configured a provider, or an
instrumentation or a library it uses imported the API). Otherwise tracing is
off and the API is never imported: an embedded agent that nobody traces
pays nothing, not even the import (about 0.1 s). A ``NoOpTracerProvider``
(given, or set as the global one) is tracing off too.

The spans themselves live in ``_spans``, imported only from here and only
once tracing is on.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from agentik.agent._spans import Tracing
    from agentik.models import ChatModel


def tracing_for(
    tracer_provider: TracerProvider | None,
    *,
    model: ChatModel,
    agent_name: str,
    capture_content: bool,
) -> Tracing | None:
    """The agent's tracing, or None when it is off (see the module docstring)."""
    if not isinstance(agent_name, str) or not agent_name.strip():
        raise ValueError(f"agent_name must be a non-empty string, got {agent_name!r}")
    if tracer_provider is None and "opentelemetry.trace" not in sys.modules:
        return None
    try:
        from opentelemetry import trace
    except ImportError as error:  # a provider was given, so the API is somewhere
        raise ValueError(
            "tracer_provider needs the OpenTelemetry API: pip install 'agentik[otel]'"
        ) from error
    provider = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
    if isinstance(provider, trace.NoOpTracerProvider):
        return None
    if not isinstance(provider, trace.TracerProvider):
        raise TypeError(
            f"tracer_provider must be an opentelemetry TracerProvider, got {provider!r}"
        )
    from agentik.agent._spans import Tracing

    return Tracing.build(
        provider, model=model, agent_name=agent_name, capture_content=bool(capture_content)
    )

"""bench/tracing.py's floor makes exactly the spans agentik makes for the
bench workload, so ``sdk`` minus ``floor`` is agentik's own share and not a
difference in what is traced."""

from __future__ import annotations

from collections import Counter

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel, bench_responder
from agentik.storage import in_memory_storage
from bench.tracing import CLOCK, floor_spans

N, TURNS = 3, 2


def _shape(spans: tuple[ReadableSpan, ...]) -> Counter[tuple[object, ...]]:
    """Each span's name, kind, attributes and parent's name, counted."""
    names = {span.context.span_id: span.name for span in spans}
    return Counter(
        (
            span.name,
            span.kind,
            tuple(sorted(dict(span.attributes or {}).items())),
            None if span.parent is None else names[span.parent.span_id],
        )
        for span in spans
    )


def _recording() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_the_floor_makes_the_spans_agentik_makes() -> None:
    """Same names, kinds, attributes and parentage, as many of each: four
    spans a turn, and no events (the workload switches no toolset)."""
    provider, exporter = _recording()
    async with open_chat_agent(
        model=ScriptedModel(bench_responder("clock")),
        storage=in_memory_storage(),
        tools=[CLOCK],
        builtin_tools=False,
        tracer_provider=provider,
    ) as agent:
        for t in range(TURNS):
            for i in range(N):
                await agent.send(f"bench-{i}", f"turn {t}")
    agentik_spans = exporter.get_finished_spans()
    provider, exporter = _recording()
    floor_spans(provider.get_tracer("agentik"), N, TURNS)
    floor = exporter.get_finished_spans()
    assert len(agentik_spans) == len(floor) == 4 * N * TURNS
    assert _shape(floor) == _shape(agentik_spans)
    assert not any(span.events for span in agentik_spans)

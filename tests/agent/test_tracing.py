"""OpenTelemetry GenAI spans of turns, model calls and tool calls, read back
from the SDK's ``InMemorySpanExporter``: names, kinds, parentage, attributes,
error status, links across an approval pause, toolset events, and content
capture off by default."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentik import (
    ContextPolicy,
    ModelBackendError,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    TokenUsage,
    ToolCall,
    ToolsetContribution,
    TurnError,
    tool,
)
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage
from tests.agent.helpers import by_turn, call


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _echo() -> NamedTool:
    async def handler(arguments: dict[str, object]) -> str:
        return f"echo:{arguments.get('text', '')}"

    return NamedTool(
        "echo",
        "Echo the text.",
        {"type": "object", "properties": {"text": {"type": "string"}}},
        handler,
    )


def _broken() -> NamedTool:
    async def handler(arguments: dict[str, object]) -> str:
        raise RuntimeError("disk on fire")

    return NamedTool("broken", "Always fails.", {"type": "object"}, handler)


def _by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def _attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def _parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


USAGE = TokenUsage(11, 7)
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


def _tool_then_answer(request: ModelRequest) -> ModelResponse:
    if request.messages[-1].role is Role.USER:
        return ModelResponse(
            tool_calls=(ToolCall("call-1", "echo", '{"text": "secret plan"}'),), usage=USAGE
        )
    return ModelResponse(text="the answer is 42", usage=USAGE, finish_reason="stop")


async def test_a_turn_with_a_tool_call_makes_three_kinds_of_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """invoke_agent (INTERNAL) is the root; each model call is a CLIENT chat
    span and the tool call an INTERNAL execute_tool span, both its children,
    with the GenAI attributes; no message content by default."""
    async with open_chat_agent(
        model=ScriptedModel(_tool_then_answer),
        storage=in_memory_storage(),
        tools=[_echo()],
        tracer_provider=provider,
        agent_name="helper",
    ) as agent:
        await agent.send("conv-1", "what is the plan?")
    spans = exporter.get_finished_spans()
    named = _by_name(spans)
    assert sorted(named) == ["chat scripted", "execute_tool echo", "invoke_agent helper"]
    (turn,) = named["invoke_agent helper"]
    chats = named["chat scripted"]
    (run,) = named["execute_tool echo"]
    assert len(chats) == 2
    assert turn.kind is SpanKind.INTERNAL and turn.parent is None
    assert all(c.kind is SpanKind.CLIENT for c in chats)
    assert run.kind is SpanKind.INTERNAL
    for child in (*chats, run):
        assert _parent_id(child) == turn.context.span_id
        assert child.context.trace_id == turn.context.trace_id
    assert _attrs(turn) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "agentik",
        "gen_ai.agent.name": "helper",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.request.model": "scripted",
        "gen_ai.usage.input_tokens": 22,
        "gen_ai.usage.output_tokens": 14,
        "agentik.turn.run": 1,
        "agentik.turn.status": "finished",
    }
    first, second = chats
    assert _attrs(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "agentik",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.request.model": "scripted",
        "agentik.request.purpose": "turn",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7,
    }
    assert _attrs(second)["gen_ai.response.finish_reasons"] == ("stop",)
    assert _attrs(run) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.tool.name": "echo",
        "gen_ai.tool.call.id": "call-1",
        "gen_ai.tool.type": "function",
    }
    assert first.end_time is not None and run.start_time is not None
    assert first.end_time <= run.start_time, "the tool ran after the model answered"
    for span in spans:
        assert span.status.status_code is StatusCode.UNSET
        assert not CONTENT_KEYS & set(_attrs(span)), f"{span.name} carries content"
        for value in _attrs(span).values():
            assert "secret plan" not in str(value) and "42" not in str(value)


async def test_content_is_captured_only_when_asked(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """capture_content=True records the messages in the conventions' JSON
    shape: system instructions apart, parts per message, tool calls and
    results; the tool span gets its arguments and result."""
    async with open_chat_agent(
        model=ScriptedModel(_tool_then_answer),
        storage=in_memory_storage(),
        tools=[_echo()],
        system_prompt="Be terse.",
        builtin_tools=False,
        tracer_provider=provider,
        capture_content=True,
    ) as agent:
        await agent.send("c", "what is the plan?")
    named = _by_name(exporter.get_finished_spans())
    first, second = named["chat scripted"]
    system = json.loads(str(_attrs(first)["gen_ai.system_instructions"]))
    assert system[0]["type"] == "text" and system[0]["content"].startswith("Be terse.")
    assert json.loads(str(_attrs(first)["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "what is the plan?"}]}
    ]
    assert json.loads(str(_attrs(first)["gen_ai.output.messages"])) == [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call-1",
                    "name": "echo",
                    "arguments": {"text": "secret plan"},
                }
            ],
            "finish_reason": "tool_call",
        }
    ]
    later = json.loads(str(_attrs(second)["gen_ai.input.messages"]))
    assert later[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call-1", "response": "echo:secret plan"}],
    }
    assert json.loads(str(_attrs(second)["gen_ai.output.messages"]))[0]["parts"] == [
        {"type": "text", "content": "the answer is 42"}
    ]
    (run,) = named["execute_tool echo"]
    assert _attrs(run)["gen_ai.tool.call.arguments"] == '{"text": "secret plan"}'
    assert _attrs(run)["gen_ai.tool.call.result"] == "echo:secret plan"
    (turn,) = named["invoke_agent agentik"]
    assert json.loads(str(_attrs(turn)["gen_ai.output.messages"]))[0]["parts"] == [
        {"type": "text", "content": "the answer is 42"}
    ]


async def test_a_failing_model_marks_its_chat_span_and_the_turn(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A model error: the chat span and the invoke_agent span end with an error
    status and error.type (the exception's class, the turn's failure code)."""

    def fail(request: ModelRequest) -> ModelResponse:
        raise ModelBackendError("upstream said 503")

    async with open_chat_agent(
        model=ScriptedModel(fail), storage=in_memory_storage(), tracer_provider=provider
    ) as agent:
        with pytest.raises(TurnError):
            await agent.send("c", "hi")
    named = _by_name(exporter.get_finished_spans())
    (chat,) = named["chat scripted"]
    (turn,) = named["invoke_agent agentik"]
    assert chat.status.status_code is StatusCode.ERROR
    assert _attrs(chat)["error.type"] == "ModelBackendError"
    assert "upstream said 503" in str(chat.status.description)
    assert turn.status.status_code is StatusCode.ERROR
    assert _attrs(turn)["error.type"] == "model_error"
    assert _attrs(turn)["agentik.turn.status"] == "failed"


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


async def test_an_exception_that_cannot_be_printed_still_ends_its_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A model raising an exception whose str() raises: the turn fails with a
    TurnError as without tracing, and the chat span still ends in error."""

    def fail(request: ModelRequest) -> ModelResponse:
        raise _Unprintable()

    async with open_chat_agent(
        model=ScriptedModel(fail), storage=in_memory_storage(), tracer_provider=provider
    ) as agent:
        with pytest.raises(TurnError, match=r"the model raised _Unprintable"):
            await agent.send("c", "hi")
    named = _by_name(exporter.get_finished_spans())
    (chat,) = named["chat scripted"]
    assert chat.status.status_code is StatusCode.ERROR
    assert _attrs(chat)["error.type"] == "_Unprintable"
    (turn,) = named["invoke_agent agentik"]
    assert turn.status.status_code is StatusCode.ERROR


async def test_a_failing_tool_marks_its_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A tool that raises: its result is an error the model sees, and its
    execute_tool span ends with an error status; the turn itself finishes."""
    model = ScriptedModel(by_turn({"go": [call("broken"), "sorry"]}))
    async with open_chat_agent(
        model=model, storage=in_memory_storage(), tools=[_broken()], tracer_provider=provider
    ) as agent:
        await agent.send("c", "go")
    named = _by_name(exporter.get_finished_spans())
    (run,) = named["execute_tool broken"]
    assert run.status.status_code is StatusCode.ERROR
    assert _attrs(run)["error.type"] == "tool_error"
    assert "disk on fire" not in str(run.status.description), "an error result is content"
    (turn,) = named["invoke_agent agentik"]
    assert turn.status.status_code is StatusCode.UNSET


async def test_spans_made_by_the_model_and_the_tool_nest_in_theirs(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The chat span is current while the model runs and the execute_tool
    span while the tool runs, so what they trace (an HTTP client's spans)
    becomes their child; after each, the current span is back to the caller's."""
    tracer = provider.get_tracer("test")

    def answer(request: ModelRequest) -> ModelResponse:
        with tracer.start_as_current_span("model http"):
            return _tool_then_answer(request)

    async def handler(arguments: dict[str, object]) -> str:
        with tracer.start_as_current_span("tool http"):
            return "done"

    echo = NamedTool("echo", "Echo.", {"type": "object"}, handler)
    async with open_chat_agent(
        model=ScriptedModel(answer),
        storage=in_memory_storage(),
        tools=[echo],
        tracer_provider=provider,
    ) as agent:
        with tracer.start_as_current_span("caller") as caller:
            await agent.send("c", "go")
            assert trace.get_current_span() is caller
    named = _by_name(exporter.get_finished_spans())
    chats = named["chat scripted"]
    (run,) = named["execute_tool echo"]
    model_calls = named["model http"]
    assert len(chats) == len(model_calls) == 2
    assert sorted(map(_parent_id, model_calls)) == sorted(c.context.span_id for c in chats)
    (tool_call,) = named["tool http"]
    assert _parent_id(tool_call) == run.context.span_id


async def test_the_callers_span_is_the_parent_across_the_task_hop(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The turn runs in its conversation's task, yet its span is a child of
    the span current where ``send`` was called (and of the one current where
    ``stream`` was entered)."""
    tracer = provider.get_tracer("test")
    model = ScriptedModel(lambda r: ModelResponse(text="ok"))
    async with open_chat_agent(
        model=model, storage=in_memory_storage(), tracer_provider=provider
    ) as agent:
        with tracer.start_as_current_span("request") as outer:
            await agent.send("c", "hi")
        with tracer.start_as_current_span("stream request") as streamed:
            async with agent.stream("c", "again") as events:
                async for _ in events:
                    pass
    turns = _by_name(exporter.get_finished_spans())["invoke_agent agentik"]
    assert [_parent_id(t) for t in turns] == [
        outer.get_span_context().span_id,
        streamed.get_span_context().span_id,
    ]


async def test_a_turn_that_waits_for_approval_makes_one_span_per_run_linked(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The turn pauses for approval and goes on when decided: one invoke_agent
    span per run, the later run linked to the first and parented by the
    caller of ``decide``."""

    @tool(requires_approval=True)
    async def wire(amount: int) -> str:
        """Send money."""
        return f"sent {amount}"

    model = ScriptedModel(by_turn({"pay": [call("wire", {"amount": 5}), "done"]}))
    tracer = provider.get_tracer("test")
    async with open_chat_agent(
        model=model, storage=in_memory_storage(), tools=[wire], tracer_provider=provider
    ) as agent:
        paused = await agent.send("c", "pay")
        assert paused.status == "awaiting_approval"
        with tracer.start_as_current_span("decision") as decision:
            await agent.decide("c", "c1", approve=True)
    turns = _by_name(exporter.get_finished_spans())["invoke_agent agentik"]
    first, second = turns
    assert _attrs(first)["agentik.turn.status"] == "awaiting_approval"
    assert _attrs(first)["agentik.turn.run"] == 1
    assert _attrs(second)["agentik.turn.status"] == "finished"
    assert _attrs(second)["agentik.turn.run"] == 2
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert _parent_id(second) == decision.get_span_context().span_id
    tools = _by_name(exporter.get_finished_spans())["execute_tool wire"]
    assert [_parent_id(t) for t in tools] == [second.context.span_id]


async def test_toolset_activation_and_expiry_are_span_events(
    provider: TracerProvider, exporter: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    """Calling a tool of an inactive toolset activates it (an event on the
    turn's span); the next turn after its timeout reports it expired."""

    async def lookup(arguments: dict[str, object]) -> str:
        return "found"

    books = ToolsetContribution(
        "books", "Find books.", [NamedTool("books_find", "Find.", {"type": "object"}, lookup)]
    )
    model = ScriptedModel(by_turn({"find": [call("books_find"), "here"], "later": ["ok"]}))
    async with open_chat_agent(
        model=model,
        storage=in_memory_storage(),
        toolsets=[books],
        activation_timeout=60,
        idle_timeout=3600,
        tracer_provider=provider,
    ) as agent:
        await agent.send("c", "find")
        await trio.sleep(61)
        await agent.send("c", "later")
    first, second = _by_name(exporter.get_finished_spans())["invoke_agent agentik"]
    assert [(e.name, dict(e.attributes or {})) for e in first.events] == [
        (
            "agentik.toolset.activated",
            {"agentik.toolset.name": "books", "agentik.toolset.by": "books_find"},
        )
    ]
    assert [(e.name, dict(e.attributes or {})) for e in second.events] == [
        ("agentik.toolset.expired", {"agentik.toolset.name": "books"})
    ]


async def test_enable_and_disable_are_span_events(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """enable_toolset and disable_toolset show as activated and deactivated."""

    async def lookup(arguments: dict[str, object]) -> str:
        return "found"

    books = ToolsetContribution(
        "books", "Find books.", [NamedTool("books_find", "Find.", {"type": "object"}, lookup)]
    )
    script = {
        "go": [
            call("enable_toolset", {"name": "books"}),
            call("disable_toolset", {"name": "books"}, id="c2"),
            "done",
        ]
    }
    async with open_chat_agent(
        model=ScriptedModel(by_turn(script)),
        storage=in_memory_storage(),
        toolsets=[books],
        tracer_provider=provider,
    ) as agent:
        await agent.send("c", "go")
    (turn,) = _by_name(exporter.get_finished_spans())["invoke_agent agentik"]
    assert [(e.name, dict(e.attributes or {})) for e in turn.events] == [
        (
            "agentik.toolset.activated",
            {"agentik.toolset.name": "books", "agentik.toolset.by": "enable_toolset"},
        ),
        (
            "agentik.toolset.deactivated",
            {"agentik.toolset.name": "books", "agentik.toolset.by": "disable_toolset"},
        ),
    ]


async def test_a_reflection_request_is_a_chat_span_with_its_purpose(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The reflection step after a turn is a chat span too, purpose reflection."""

    def respond(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="lesson" if request.purpose == "reflection" else "hi")

    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        reflection=True,
        tracer_provider=provider,
    ) as agent:
        await agent.send("c", "hello")
    chats = _by_name(exporter.get_finished_spans())["chat scripted"]
    assert [_attrs(c)["agentik.request.purpose"] for c in chats] == ["turn", "reflection"]


async def test_a_summary_request_is_a_chat_span_with_its_purpose(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Summaries a context policy asks for are chat spans too, purpose summary,
    with their token usage, children of the caller's span as the turn is."""

    def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            return ModelResponse(text="the gist", usage=TokenUsage(40, 3))
        return ModelResponse(text="ok")

    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        context=ContextPolicy(max_tokens=300),
        tracer_provider=provider,
    ) as agent:
        with provider.get_tracer("test").start_as_current_span("caller") as caller:
            for i in range(12):
                await agent.send("c", f"question {i} " * 5)
        assert agent.stats.summaries > 0
    spans = exporter.get_finished_spans()
    summaries = [
        c
        for c in _by_name(spans)["chat scripted"]
        if _attrs(c)["agentik.request.purpose"] == "summary"
    ]
    # One summary may take several requests (a long history, piece by piece).
    assert len(summaries) >= agent.stats.summaries
    # agentik_tokens_total counts what summaries cost (turns here report none)
    assert agent.stats.input_tokens == 40 * len(summaries)
    for chat in summaries:
        assert chat.kind is SpanKind.CLIENT
        assert _attrs(chat)["gen_ai.usage.input_tokens"] == 40
        assert chat.parent is not None
        assert chat.parent.span_id == caller.get_span_context().span_id


async def test_a_no_op_provider_turns_tracing_off(exporter: InMemorySpanExporter) -> None:
    """NoOpTracerProvider is tracing off: the agent says so and emits nothing."""
    async with open_chat_agent(
        model=ScriptedModel(lambda r: ModelResponse(text="ok")),
        storage=in_memory_storage(),
        tracer_provider=trace.NoOpTracerProvider(),
    ) as agent:
        assert not agent.tracing
        await agent.send("c", "hi")


def test_tracing_imports_nothing_unless_the_application_uses_opentelemetry() -> None:
    """With tracer_provider=None and no OpenTelemetry imported by the
    application, a turn imports none of it (and costs nothing)."""
    script = textwrap.dedent(
        """
        import sys, trio
        from agentik import ModelResponse, ScriptedModel, in_memory_storage, open_chat_agent

        async def main():
            model = ScriptedModel(lambda r: ModelResponse(text="ok"))
            async with open_chat_agent(model=model, storage=in_memory_storage()) as agent:
                await agent.send("c", "hi")
                assert not agent.tracing
        trio.run(main)
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_global_provider_is_used_when_none_is_given() -> None:
    """tracer_provider=None follows the global provider the application set,
    even one set after the agent opened (the API being imported by then): a
    turn before it makes no span, a turn after it does."""
    script = textwrap.dedent(
        """
        import trio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from agentik import ModelResponse, ScriptedModel, in_memory_storage, open_chat_agent

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))

        async def main():
            model = ScriptedModel(lambda r: ModelResponse(text="ok"))
            async with open_chat_agent(model=model, storage=in_memory_storage()) as agent:
                await agent.send("c", "before")
                trace.set_tracer_provider(provider)
                await agent.send("c", "after")
        trio.run(main)
        print(sorted(s.name for s in exporter.get_finished_spans()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "['chat scripted', 'invoke_agent agentik']"


# --- a property over random turns ---------------------------------------------------

_STEP = st.sampled_from(["text", "echo", "broken", "unknown", "bad_json", "model_error"])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(turns=st.lists(st.lists(_STEP, min_size=1, max_size=4), min_size=1, max_size=3))
async def test_spans_are_well_formed_whatever_the_turn_does(turns: list[list[str]]) -> None:
    """Any mix of answers, tool calls (good, failing, unknown, malformed) and
    model errors: every span ends, each chat and tool span is a child of its
    turn's invoke_agent span in its trace, there is one chat span per model
    call and one tool span per tool call, an error status always comes with
    error.type, and no span carries content."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    scripts = {f"turn {i}": steps for i, steps in enumerate(turns)}
    tool_calls = 0

    def respond(request: ModelRequest) -> ModelResponse:
        nonlocal tool_calls
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        step = sum(1 for m in messages[user_at:] if m.role is Role.ASSISTANT)
        steps = scripts[messages[user_at].content]
        kind = steps[step] if step < len(steps) else "text"
        if kind == "model_error":
            raise ModelBackendError("no")
        if kind == "text":
            return ModelResponse(text="fine", usage=USAGE)
        tool_calls += 1
        name = {"echo": "echo", "broken": "broken", "unknown": "nope", "bad_json": "echo"}[kind]
        arguments = "{oops" if kind == "bad_json" else "{}"
        return ModelResponse(tool_calls=(ToolCall(f"id{step}", name, arguments),))

    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        tools=[_echo(), _broken()],
        tracer_provider=provider,
    ) as agent:
        for text in scripts:
            with contextlib.suppress(TurnError):
                await agent.send("c", text)
        model_calls = agent.stats.model_calls
    spans = exporter.get_finished_spans()
    turn_ids = {s.context.span_id: s for s in spans if s.name.startswith("invoke_agent")}
    assert len(turn_ids) == len(turns)
    chats = [s for s in spans if s.name.startswith("chat")]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert len(chats) == model_calls
    assert len(tools) == tool_calls
    for span in (*chats, *tools):
        parent = turn_ids[_parent_id(span)]  # type: ignore[index]
        assert span.context.trace_id == parent.context.trace_id
        assert span.start_time >= parent.start_time  # type: ignore[operator]
        assert span.end_time <= parent.end_time  # type: ignore[operator]
    for span in spans:
        assert span.end_time is not None
        failed = span.status.status_code is StatusCode.ERROR
        assert failed == ("error.type" in _attrs(span)), span.name
        assert not CONTENT_KEYS & set(_attrs(span))

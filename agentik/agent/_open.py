"""``open_chat_agent``: the agent's settings checked, its runtime built (core
tools, toolsets, model limits, tracing), and the ``ChatAgent`` that runs in
the nursery it opens."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from agentik._groups import raise_lone_error
from agentik._json import JsonObject
from agentik.agent._builtin_tools import BUILTIN_TOOLS, ConversationState, ConversationTool
from agentik.agent._chat_agent import ChatAgent
from agentik.agent._content import Descriptions, ImageDescriber
from agentik.agent._context import ContextPolicy
from agentik.agent._conversation import Conversation
from agentik.agent._elicitation import ElicitationSource
from agentik.agent._gc import relaxed_gc
from agentik.agent._limits import ContentLimits
from agentik.agent._model_limits import limited_model
from agentik.agent._prompt import SystemPromptContributor, default_contributors
from agentik.agent._runtime import AgentRuntime, AgentSettings, ApprovalPolicy, ToolsetSource
from agentik.agent._tracing import tracing_for
from agentik.models import ChatModel, ModelLimits, accepts_parts_of
from agentik.storage import StorageBundle
from agentik.toolsets import (
    DISABLE_TOOLSET,
    DISABLE_TOOLSET_DESCRIPTION,
    ENABLE_TOOLSET,
    ENABLE_TOOLSET_DESCRIPTION,
    ENABLE_TOOLSET_PARAMETERS,
    FIND_TOOLS,
    FIND_TOOLS_DESCRIPTION,
    FIND_TOOLS_PARAMETERS,
    TOOLSET_NAME_PARAMETERS,
    NamedTool,
    ToolsetContribution,
    disable_answer,
    enable_answer,
    find_answer,
)

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

log = logging.getLogger("agentik.agent")

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Use the tools you are given when they help."
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


async def _enable(state: ConversationState, arguments: JsonObject) -> str:
    assert isinstance(state, Conversation)
    runtime = state.runtime
    return enable_answer(runtime.toolsets()[1], state.activation, arguments, runtime.tools_budget)


async def _disable(state: ConversationState, arguments: JsonObject) -> str:
    assert isinstance(state, Conversation)
    return disable_answer(state.runtime.toolsets()[1], state.activation, arguments)


async def _find(state: ConversationState, arguments: JsonObject) -> str:
    assert isinstance(state, Conversation)
    return find_answer(state.runtime.toolsets()[1], arguments)


# One definition each, every call bound to the calling conversation's activation.
_CONTROL_TOOLS = (
    ConversationTool(
        ENABLE_TOOLSET, ENABLE_TOOLSET_DESCRIPTION, ENABLE_TOOLSET_PARAMETERS, run=_enable
    ),
    ConversationTool(
        DISABLE_TOOLSET, DISABLE_TOOLSET_DESCRIPTION, TOOLSET_NAME_PARAMETERS, run=_disable
    ),
)
FIND_TOOL = ConversationTool(
    FIND_TOOLS, FIND_TOOLS_DESCRIPTION, FIND_TOOLS_PARAMETERS, run=_find, sequential=False
)
"""Searches the toolsets' tools: a core tool whenever there are toolsets,
offered when the context policy says so (``_request.offered_tools``)."""


def schema_tokens(tools: Sequence[NamedTool], count: Callable[[str], int]) -> int:
    """About what the tool definitions cost in a request: outside the context
    budget (they are the same on every request), so reported, not counted."""
    return sum(
        count(t.name) + count(t.description) + count(json.dumps(t.parameters)) for t in tools
    )


def _check_approvals_supported(runtime: AgentRuntime) -> None:
    if runtime.approvals_possible and runtime.storage.degraded:
        raise ValueError(
            "tools that require approval need a message store that keeps them (a"
            " FullMessageStore, in a Storage); this bundle's is a seed MessageStore"
        )


def _core_tools(
    tools: Sequence[NamedTool],
    contributions: Sequence[ToolsetContribution],
    builtin: bool,
) -> tuple[dict[str, NamedTool], tuple[NamedTool, ...]]:
    """The core tools by name, and what the model is offered of them."""
    offered: list[NamedTool] = [*tools, *(BUILTIN_TOOLS if builtin else ())]
    if contributions:
        offered.extend(_CONTROL_TOOLS)
    core: dict[str, NamedTool] = {}
    for t in offered:
        if not isinstance(t, NamedTool):
            raise TypeError(f"tools must be NamedTool instances, got {t!r}")
        if not _TOOL_NAME.match(t.name):
            raise ValueError(f"tool name {t.name!r} must match {_TOOL_NAME.pattern}")
        if t.name in core:
            raise ValueError(f"tool name {t.name!r} appears twice among the core tools")
        core[t.name] = t
    if contributions:  # dispatchable always, offered per request
        if FIND_TOOLS in core:
            raise ValueError(
                f"tool name {FIND_TOOLS!r} is taken by the toolsets' search; rename the core tool"
            )
        core[FIND_TOOLS] = FIND_TOOL
    for c in contributions:
        for t in c.tools:
            if t.name in core:
                raise ValueError(f"tool name {t.name!r} of toolset {c.name!r} is also a core tool")
    return core, tuple(offered)


@asynccontextmanager
async def open_chat_agent(
    *,
    model: ChatModel,
    storage: StorageBundle,
    tools: Sequence[NamedTool] = (),
    toolsets: Sequence[ToolsetContribution | ToolsetSource] = (),
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    contributors: Sequence[SystemPromptContributor] | None = None,
    builtin_tools: bool = True,
    max_tool_rounds: int = 25,
    max_parallel_tools: int = 8,
    tool_timeout: float = 60.0,
    activation_timeout: float = 600.0,
    idle_timeout: float = 60.0,
    turn_queue_size: int = 2,
    max_queued_turns: int = 8,
    max_conversations: int = 100_000,
    max_tool_output: int = 64 * 1024,
    reflection: bool = False,
    recent_reflections: int = 5,
    approval_policy: ApprovalPolicy | None = None,
    approval_timeout: float | None = None,
    resume_interrupted: bool = True,
    context: ContextPolicy | None = None,
    content_limits: ContentLimits | None = None,
    tracer_provider: TracerProvider | None = None,
    capture_content: bool = False,
    agent_name: str = "agentik",
    relax_gc: bool = True,
    model_limits: ModelLimits | None = None,
    close_grace: float | None = None,
    output_retries: int = 2,
    describe_image: ImageDescriber | None = None,
) -> AsyncIterator[ChatAgent]:
    """Open an agent: a nursery of conversation tasks over ``storage``.

    Args:
        model: answers each model request.
        storage: where every message, note, reflection and skill is kept.
        tools: core tools, always offered.
        toolsets: groups of tools the model switches on and off per
            conversation; a ``ToolsetSource`` may change its tools over time.
        system_prompt: the base of every system message.
        contributors: the system prompt's sections (default: base prompt,
            toolsets, skills, working memory, reflections).
        builtin_tools: offer the working-memory and skill tools.
        max_tool_rounds: model calls per turn at most.
        max_parallel_tools: tool calls of one model answer that run at once,
            at most (each in its own task; results recorded in call order);
            a ``sequential`` tool's call runs alone.
        tool_timeout: seconds a tool call may take before it gets an error result.
        activation_timeout: seconds a toolset stays active after its last use.
        idle_timeout: seconds an idle conversation task lives; it stays longer
            while any of its toolsets is active.
        turn_queue_size: turns a conversation's inbox holds before ``send`` waits.
        max_queued_turns: turns that may wait for one conversation before
            ``send`` raises ``OverloadedError``.
        max_conversations: live conversation tasks at most; a turn for a new
            conversation past it raises ``OverloadedError`` (memory stays bounded).
        max_tool_output: characters of a tool result kept; the rest is cut.
        reflection: after each finished turn, ask the model for a lesson and
            store it as a reflection.
        recent_reflections: how many recent reflections the prompt shows.
        approval_policy: ``(conversation_id, call) -> bool``, True when a person
            must approve that call (beyond tools and toolsets that always
            require it); a policy that raises counts as True.
        approval_timeout: seconds a call may wait for a decision before it is
            denied (``denied: no decision within N s``); None waits for ever.
            It counts from the pause, or from the conversation's first turn
            after a restart.
        resume_interrupted: a turn the process stopped in is resumed
            (idempotent calls run again, the others are answered
            ``interrupted: …``, then the model goes on): as the agent opens,
            when its store can list them (not a seed-only bundle; at most a
            few at once; on several nodes, by the node that owns the
            conversation), else when its conversation is next used; False
            only answers its open calls, on the conversation's next use.
        context: bounds what each model request carries (``ContextPolicy``):
            the system message, the latest summary and the most recent turns
            that fit in ``max_tokens``; older history is summarized by the
            model and stays stored. A live conversation then holds only what
            its summary does not cover. None sends the whole history.
        content_limits: sizes of skills and notes (a write past one raises
            ``TooLargeError``; the model's tools get an error result) and the
            tokens their sections may take in a system message (with
            ``context``, also at most a share of its ``max_tokens``); None:
            ``ContentLimits()``'s defaults.
        tracer_provider: where OpenTelemetry spans go (GenAI conventions:
            ``invoke_agent``, ``chat``, ``execute_tool``; docs/observability.md).
            None: the global provider, if the application uses OpenTelemetry
            (its API is imported when the agent opens), else no tracing and
            nothing imported. A ``NoOpTracerProvider`` turns tracing off.
        capture_content: put message content on spans (prompts, answers,
            tool arguments and results); off by default.
        agent_name: ``gen_ai.agent.name`` on spans, and their name.
        relax_gc: while the agent is open, raise the garbage collector's first
            threshold from CPython's default 700 (2,000 on 3.13) to 100,000
            (only if they are the defaults; restored on close). Turns make no
            cyclic garbage, and with thousands of live conversations the
            default makes collections walking every object take most of the
            time. False leaves the collector alone.
        model_limits: the model provider's budget (``ModelLimits``: requests
            and tokens per minute, concurrent requests): every model call of
            the agent (turns first, then summaries and reflections) waits in
            one scheduler, fair across owners (or conversations), paused for
            everyone when the provider says so; a new turn that would wait
            past ``max_queue_wait`` is refused (``OverloadedError``). None (or
            no limit set): calls go straight to the model.
        close_grace: leaving the block closes the agent (``ChatAgent.close``)
            with this grace: turns still running that many seconds later are
            interrupted (resumed at the next start). None (the default): the
            block's end waits for them however long they take.
        output_retries: a typed turn's (``send(..., output=T)``) invalid
            answers sent back to the model with their error before the turn
            fails with ``invalid_output``.
        describe_image: ``async (ImagePart) -> str``, for a model that takes
            no images (its ``accepts_parts``): each image a request carries is
            sent as ``[image: <description>]`` instead (asked once per image,
            kept in a bounded cache); the stored message keeps the image. None:
            a turn with an image fails with ``unsupported_content`` on such a model.
    """
    _positive("max_tool_rounds", max_tool_rounds)
    if isinstance(max_parallel_tools, bool) or not (
        isinstance(max_parallel_tools, int) and max_parallel_tools > 0
    ):
        raise ValueError(
            f"max_parallel_tools must be a positive integer, got {max_parallel_tools!r}"
        )
    _positive("tool_timeout", tool_timeout)
    _positive("activation_timeout", activation_timeout)
    _positive("idle_timeout", idle_timeout)
    _positive("max_queued_turns", max_queued_turns)
    _positive("max_conversations", max_conversations)
    _positive("max_tool_output", max_tool_output)
    if turn_queue_size < 0:
        raise ValueError(f"turn_queue_size must be >= 0, got {turn_queue_size!r}")
    if approval_timeout is not None:
        _positive("approval_timeout", approval_timeout)
    if isinstance(output_retries, bool) or not (
        isinstance(output_retries, int) and output_retries >= 0
    ):
        raise ValueError(f"output_retries must be an integer >= 0, got {output_retries!r}")
    if close_grace is not None and not (isinstance(close_grace, int | float) and close_grace >= 0):
        raise ValueError(
            f"close_grace must be a number of seconds >= 0 or None, got {close_grace!r}"
        )
    if context is not None and not isinstance(context, ContextPolicy):
        raise TypeError(f"context must be a ContextPolicy or None, got {context!r}")
    if content_limits is not None and not isinstance(content_limits, ContentLimits):
        raise TypeError(f"content_limits must be a ContentLimits or None, got {content_limits!r}")
    if describe_image is not None and not callable(describe_image):
        raise TypeError(f"describe_image must be callable, got {describe_image!r}")
    if approval_policy is not None and not callable(approval_policy):
        raise TypeError(f"approval_policy must be callable, got {approval_policy!r}")
    sources = tuple(toolsets)
    current = tuple(s if isinstance(s, ToolsetContribution) else s.contribution for s in sources)
    core, offered = _core_tools(tools, current, builtin_tools)
    tracing = tracing_for(
        tracer_provider, model=model, agent_name=agent_name, capture_content=capture_content
    )
    admitted, scheduler = limited_model(model, model_limits, context=context, storage=storage)
    runtime = AgentRuntime.build(
        model=admitted,
        storage=storage,
        core_tools=core,
        offered_core=offered,
        sources=sources,
        contributors=(
            default_contributors(system_prompt) if contributors is None else tuple(contributors)
        ),
        settings=AgentSettings(
            max_tool_rounds=max_tool_rounds,
            max_parallel_tools=max_parallel_tools,
            tool_timeout=tool_timeout,
            activation_timeout=activation_timeout,
            idle_timeout=idle_timeout,
            turn_queue_size=turn_queue_size,
            max_queued_turns=max_queued_turns,
            max_conversations=max_conversations,
            max_tool_output=max_tool_output,
            reflection=reflection,
            recent_reflections=recent_reflections,
            approval_timeout=approval_timeout,
            resume_interrupted=resume_interrupted,
            context=context,
            content_limits=content_limits or ContentLimits(),
            output_retries=output_retries,
            describe_image=describe_image,
            descriptions=None
            if describe_image is None or "image" in accepts_parts_of(model)
            else Descriptions(describe_image),
        ),
        approval_policy=approval_policy,
        tracing=tracing,
    )
    _check_approvals_supported(runtime)
    if context is not None:
        log.info(
            "context policy: %d tokens a request; tool schemas take about %d more"
            " (core tools; each active toolset adds its own)",
            context.max_tokens,
            schema_tokens(offered, context.count_tokens),
        )
    # Conversation tasks and the reaper never raise, so a lone error is the
    # body's own: hand it out as itself, as if there were no nursery here.
    with raise_lone_error(), relaxed_gc(relax_gc):
        async with trio.open_nursery() as nursery:
            agent = ChatAgent(
                runtime,
                nursery,
                elicitors=tuple(s for s in sources if isinstance(s, ElicitationSource)),
                tracks_gc=relax_gc,
                scheduler=scheduler,
            )
            try:
                await runtime.warm()
                store = runtime.storage.message_store
                if resume_interrupted:
                    nursery.start_soon(agent._resume_at_start, store)
                yield agent
            finally:
                agent.close(grace=close_grace)


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")

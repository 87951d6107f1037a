"""What a turn's model request carries: the system message, the window of
history, the tools offered.

The system message is built afresh for every request from the prompt
contributors (never stored), or reused while what it was built from is
unchanged; with a context policy the request carries only the window of the
history that fits (``_context``). Reads only: the turn records nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentik._errors import TurnError
from agentik._messages import Message, Role
from agentik.agent._content import described
from agentik.agent._context import ContextExhausted, ContextPolicy, estimate_tokens, select_window
from agentik.agent._output import OutputSpec
from agentik.agent._prompt import PromptContext, render_system_prompt
from agentik.agent._turn_host import PromptInputs as PromptInputs
from agentik.models import ModelRequest
from agentik.toolsets import FIND_TOOLS, NamedTool, ToolsetIndex

if TYPE_CHECKING:
    from agentik.agent._turn_host import TurnHost

NONE_ACTIVE: frozenset[str] = frozenset()


async def build_request(
    conv: TurnHost,
    start: int,
    output: OutputSpec | None = None,
    again: Sequence[Message] = (),
    answer_tool: NamedTool | None = None,
) -> tuple[ModelRequest, ToolsetIndex, frozenset[str]]:
    """The next request of the turn whose user message is ``conv.cache.history[start]``,
    with the toolsets and the active ones it was built for. A typed turn
    (``output``) asks for its schema; ``again``, its invalid answers and
    their errors, follow the history (they are not stored); ``answer_tool``,
    the final-answer tool of a ``structured_output="tool"`` model, is offered
    last."""
    system, index, active = await system_message(conv)
    runtime = conv.runtime
    core = runtime.offered_core
    policy = runtime.settings.context
    if policy is not None and _offers_find(policy, index):
        core = (*core, runtime.core_tools[FIND_TOOLS])
    selection = tuple(s for s in conv.activation.offer_order() if s[0] in active) if active else ()
    tools = offered_tools(core, index, selection)
    # The active toolsets' schemas take their share of the window.
    schemas = index.costs.total(tools[len(core) :]) if policy is not None else 0
    window = conv.cache.history if policy is None else _window(conv, system, start, policy, schemas)
    descriptions = runtime.settings.descriptions
    if descriptions is not None:  # a text-only model: images as their descriptions
        window = await described(window, descriptions)
    messages = (system, *window, *again)
    if output is None:
        return ModelRequest(messages, tools), index, active
    if answer_tool is not None:
        tools = (*tools, answer_tool)
    request = ModelRequest(
        messages,
        tools,
        output_schema=output.schema,
        output_tool=None if answer_tool is None else answer_tool.name,
    )
    return request, index, active


def _window(
    conv: TurnHost, system: Message, start: int, policy: ContextPolicy, schemas: int
) -> Sequence[Message]:
    """The history that fits the window beside the system message and the
    active toolsets' schemas (``schemas`` tokens)."""
    try:
        window = select_window(
            system=conv.cache.cost(system),
            summary=conv.cache.summary_message,
            history=conv.cache.history,
            turn_start=start,
            budget=policy.max_tokens - schemas,
            cost=conv.cache.cost,
        )
    except ContextExhausted as exc:
        raise TurnError(str(exc), code="context_exhausted") from exc
    return window.messages


async def system_message(conv: TurnHost) -> tuple[Message, ToolsetIndex, frozenset[str]]:
    """The system message of the next request (built from the contributors,
    or the last one while its inputs are unchanged), with the toolsets and
    the active ones it was built for."""
    runtime = conv.runtime
    contributions, index = runtime.toolsets()
    active = conv.activation.active_names() if contributions else NONE_ACTIVE
    cached = runtime.cached_prompt_reads(conv.skill_scope)
    if cached is None:
        skills = await runtime.skills(conv.skill_scope)
        reflections = await runtime.reflections()
    else:
        skills, reflections = cached
    memory = conv.memory
    # The system message of the last request, reused while what it was
    # built from is unchanged (only when every contributor is one of
    # agentik's own, which read nothing but their context).
    key = (index, active, skills, reflections, tuple([e.id for e in memory]))
    last = conv.system_prompt
    if last is not None and _same_prompt_inputs(last[0], key):
        return last[1], index, active
    budgets = runtime.budgets
    policy = runtime.settings.context
    context = PromptContext(
        conversation_id=conv.conversation_id,
        contributions=index,
        active_toolsets=active,
        skills=skills,
        memory=memory,
        reflections=reflections,
        skills_budget=budgets.skills,
        memory_budget=budgets.notes,
        reflections_budget=budgets.reflections,
        count_tokens=estimate_tokens if policy is None else policy.count_tokens,
    )
    system = Message(Role.SYSTEM, render_system_prompt(runtime.contributors, context))
    if runtime.pure_prompt:
        conv.system_prompt = (key, system)
    return system, index, active


async def check_room(conv: TurnHost, text: str) -> None:
    """Refuse a user message that cannot fit the context window with the
    system message, before it is stored (``context_exhausted``): stored, it
    would fail its turn and weigh on every later one."""
    policy = conv.runtime.settings.context
    assert policy is not None
    system, _, _ = await system_message(conv)
    needed = conv.cache.cost(system) + conv.cache.cost(Message(Role.USER, text))
    if needed > policy.max_tokens:
        raise TurnError(
            f"the message needs {needed} tokens of context with the system message and"
            f" the window is {policy.max_tokens} (context max_tokens); send a shorter one",
            code="context_exhausted",
        )


def offered_tools(
    core: Sequence[NamedTool],
    index: ToolsetIndex,
    selection: Sequence[tuple[str, frozenset[str] | None]],
) -> tuple[NamedTool, ...]:
    """What the model is offered: core tools (with enable/disable when toolsets
    exist), then the tools enabled of the active toolsets in the order they
    were switched on (``ToolsetActivation.offer_order``): an array that only
    grows at its end until something is switched off, so a request shares
    the longest prefix with the one before (the provider's prompt cache).
    Inactive toolsets stay hidden."""
    if not selection:
        return tuple(core)
    return (*core, *index.tools_of(selection))


def _offers_find(policy: ContextPolicy, index: ToolsetIndex) -> bool:
    """Whether ``find_tools`` is offered: there are toolsets, and the policy
    asks for it, or (by default) they would not all fit the tools budget."""
    if not len(index) or policy.find_tools is False:
        return False
    return policy.find_tools is True or index.total_cost > policy.tools_budget_tokens


def _same_prompt_inputs(a: PromptInputs, b: PromptInputs) -> bool:
    return (
        a[0] is b[0]
        and a[1] == b[1]
        and (a[2] is b[2] or a[2] == b[2])
        and (a[3] is b[3] or a[3] == b[3])
        and a[4] == b[4]
    )

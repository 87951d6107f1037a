"""The context policy: what of a conversation each model request carries. Pure.

A request carries the system message, then the conversation's latest summary
(when there is one and it fits), then the most recent messages that fit in
``ContextPolicy.max_tokens``. The rules, which ``select_window`` keeps and
tests/agent/test_context.py checks on random conversations:

- the current turn is always carried whole; if it does not fit with the
  system message, the turn cannot go on (``ContextExhausted``);
- earlier history is carried in whole turns (a user message and everything up
  to the next one), newest first, so an assistant message with tool calls is
  never separated from its results and the first message after the system
  message (and the summary) is a user message;
- the summary comes before any earlier turn: it stands for everything older.

Tokens are counted by ``ContextPolicy.count_tokens`` over what the model reads:
each message's content, each tool call's name and arguments, plus a few tokens
of framing per message (``MESSAGE_OVERHEAD``). The schemas of the active
toolsets' tools are counted too: they take at most ``tools_budget`` tokens
(enabling past it switches the least recently used toolsets off), and the
window gets what they leave. The core tools' schemas are the same on every
request and come on top (docs/agent.md says how to size for them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from agentik._messages import Message, Role
from agentik._tokens import MESSAGE_OVERHEAD as MESSAGE_OVERHEAD
from agentik._tokens import estimate_tokens as estimate_tokens
from agentik._tokens import message_tokens as message_tokens


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < float("inf")
    ):
        raise ValueError(f"{attribute.name} must be a positive number of seconds, got {value!r}")


def _fraction(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{attribute.name} must be in (0, 1], got {value!r}")


@attrs.frozen(kw_only=True)
class ContextPolicy:
    """How much of a conversation a model request may carry."""

    max_tokens: int = attrs.field(validator=_positive)
    """The budget of every request's prompt: system message, summary, messages
    (content, tool call names and arguments) and the active toolsets' tool
    schemas. The core tools' schemas come on top."""
    count_tokens: Callable[[str], int] = estimate_tokens
    """Tokens in a text; the default is the offline ``estimate_tokens``."""
    summarize_at: float = attrs.field(default=0.75, validator=_fraction)
    """Summarize older history once what the summary does not cover takes this
    fraction of ``max_tokens``: well before the window must drop anything."""
    summary_timeout: float = attrs.field(default=60.0, validator=_seconds)
    """Seconds a summary may take (all its model requests and its write); past
    that it is dropped, changing nothing (the next turn tries again). No turn
    waits for a summary either way: it runs beside the conversation."""
    tools_budget: int | None = attrs.field(default=None)
    """Tokens the active toolsets' schemas may take of ``max_tokens``; None: a
    quarter of it (``tools_budget_tokens``). Enabling a toolset past it
    switches the least recently used ones off."""
    find_tools: bool | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(bool))
    )
    """Offer ``find_tools`` (when there are toolsets): None, when all the
    toolsets' schemas together exceed the tools budget; True, always; False,
    never."""

    @tools_budget.validator
    def _check_tools_budget(
        self, attribute: attrs.Attribute[int | None], value: int | None
    ) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"tools_budget must be a positive integer, got {value!r}")
        if value >= self.max_tokens:
            raise ValueError(
                f"tools_budget must be less than max_tokens ({self.max_tokens}), got {value!r}"
            )

    @property
    def tools_budget_tokens(self) -> int:
        """Tokens the active toolsets' schemas may take: ``tools_budget``, or a
        quarter of ``max_tokens``."""
        return self.max_tokens // 4 if self.tools_budget is None else self.tools_budget


def cut_to_tokens(text: str, budget: int, count: Callable[[str], int]) -> str:
    """``text``, or its longest prefix that fits ``budget`` tokens with a line
    saying how much was cut (a tool result a window could not carry)."""
    if count(text) <= budget:
        return text

    def cut(keep: int) -> str:
        return f"{text[:keep]}\n… [output truncated: {len(text) - keep} more characters]"

    low, high = 0, len(text)  # count(cut(low)) fits, or low is 0
    while low < high:
        middle = (low + high + 1) // 2
        if count(cut(middle)) <= budget:
            low = middle
        else:
            high = middle - 1
    return cut(low)


class ContextExhausted(Exception):
    """The current turn does not fit in the budget even alone."""

    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(
            f"the turn needs {needed} tokens of context (system message and this"
            f" turn's messages) and the budget is {budget} (context max_tokens)"
        )
        self.needed = needed
        self.budget = budget


@attrs.frozen
class Window:
    """The messages one request carries after its system message."""

    messages: tuple[Message, ...]
    """The summary first (if carried), then whole turns, oldest first."""
    tokens: int
    """Their cost, the system message's included."""
    first: int
    """Index in ``history`` of the first history message carried."""


def select_window(
    *,
    system: int,
    summary: Message | None,
    history: Sequence[Message],
    turn_start: int,
    budget: int,
    cost: Callable[[Message], int],
) -> Window:
    """The window of one request.

    Args:
        system: tokens of the system message.
        summary: the latest summary, as the message that carries it.
        history: the messages the summary does not cover, oldest first,
            starting with a user message; the current turn at its end.
        turn_start: index in ``history`` of the current turn's user message.
        budget: ``ContextPolicy.max_tokens``.
        cost: tokens of a message (``message_tokens``, maybe cached).

    Raises ``ContextExhausted`` when the system message and the current turn
    alone exceed the budget.
    """
    used = system
    for message in history[turn_start:]:
        used += cost(message)
    if used > budget:
        raise ContextExhausted(used, budget)
    carried_summary = None
    if summary is not None:
        summary_cost = cost(summary)
        if used + summary_cost <= budget:
            used += summary_cost
            carried_summary = summary
    first = turn_start
    block = 0
    for i in range(turn_start - 1, -1, -1):
        block += cost(history[i])
        if history[i].role is not Role.USER:
            continue
        if used + block > budget:
            break
        used += block
        block = 0
        first = i
    carried = history[first:]
    messages = (carried_summary, *carried) if carried_summary is not None else tuple(carried)
    return Window(messages, used, first)

"""Summaries of older history, asked of the model. Pure, but for the request.

When what the latest summary does not cover grows past
``ContextPolicy.summarize_at`` of the budget, the conversation asks the model
(``ModelRequest.purpose="summary"``) to fold its oldest turns, with the
previous summary, into a new one, keeping its most recent turns (up to half
the budget) verbatim. The new summary covers up to the last folded message;
summaries chain. These functions pick what to fold and build the requests;
``Conversation._compact`` sends them and stores the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentik._messages import Message, Role
from agentik.agent._context import MESSAGE_OVERHEAD
from agentik.models import ModelRequest
from agentik.storage import Summary

SUMMARY_PROMPT = (
    "You summarize a conversation so that it can go on without its earlier messages."
    " Keep what later turns may need: facts, decisions, names, numbers, results of tool"
    " calls, open questions, the user's preferences. Leave out small talk. Write it as"
    " notes, in the conversation's language. Answer with the summary only."
)
SUMMARY_HEADER = "[Summary of the conversation before this point]"


def summary_message(summary: Summary) -> Message:
    """The message that carries ``summary`` in a request, first after the system message."""
    return Message(Role.USER, f"{SUMMARY_HEADER}\n{summary.text}")


def fold_point(history: Sequence[Message], cost: Callable[[Message], int], keep: int) -> int:
    """Index of the first message to keep: the earliest user message from which
    the rest costs at most ``keep`` tokens, and never past the last turn's
    start; 0 when there is nothing to fold."""
    last_turn = max((i for i, m in enumerate(history) if m.role is Role.USER), default=0)
    kept = 0
    point = len(history)
    for i in range(len(history) - 1, -1, -1):
        kept += cost(history[i])
        if history[i].role is not Role.USER:
            continue
        if kept > keep and i < last_turn:
            break
        point = i
    return point


def transcript_line(message: Message) -> str:
    """One message as the summarizer reads it."""
    if message.role is Role.TOOL:
        text = f"tool result [{message.tool_call_id}]: {message.content}"
    else:
        text = f"{message.role.value}: {message.content}"
        for call in message.tool_calls:
            text += f"\n{message.role.value} calls {call.name}({call.arguments}) [{call.id}]"
    return text


def summary_request(
    previous: str | None,
    messages: Sequence[Message],
    budget: int,
    count: Callable[[str], int],
) -> tuple[ModelRequest, int] | None:
    """The request that folds the first messages of ``messages`` (as many as
    fit in ``budget``, at least one, cut if it alone is too large) into
    ``previous``, and how many it folds; None when not even a cut message fits
    beside the prompt. The caller sends it, takes the answer as the summary so
    far, and asks again for the rest.

    A previous summary that would take more than half the room left for the
    transcript is cut to that half (marked): otherwise one long answer would
    leave every later summary no room, and compaction would stop for good.
    The request asks for at most ``summary_limit(budget)`` tokens."""
    ask = f"{_ASK} Keep it under {summary_limit(budget)} tokens."
    fixed = 3 * MESSAGE_OVERHEAD + count(SUMMARY_PROMPT) + count(_FOLLOWED) + count(ask) + 8
    room = budget - fixed
    parts: list[str] = []
    if previous:
        so_far = count(_SO_FAR) + 1
        if count(previous) + so_far > room // 2:
            previous = _cut(previous, room // 2 - so_far, count)
        if previous:
            parts.append(f"{_SO_FAR}\n{previous}")
            room -= count(previous) + so_far
    lines: list[str] = []
    for message in messages:
        line = transcript_line(message)
        tokens = count(line) + 1
        if tokens > room:
            if lines:
                break
            cut = _cut(line, room - 1, count)
            if cut is None:
                return None
            line, tokens = cut, room
        lines.append(line)
        room -= tokens
    parts.append(f"{_FOLLOWED}\n" + "\n".join(lines))
    parts.append(ask)
    system = Message(Role.SYSTEM, SUMMARY_PROMPT)
    request = ModelRequest((system, Message(Role.USER, "\n\n".join(parts))), purpose="summary")
    return request, len(lines)


def summary_limit(budget: int) -> int:
    """The most tokens a summary may take: a quarter of the budget, so the
    summary, the system prompt and the current turn fit in a turn's window."""
    return max(1, budget // 4)


def fit_summary(text: str, budget: int, count: Callable[[str], int]) -> str:
    """The model's summary, cut (marked) to twice ``summary_limit`` if it wrote
    more than that: a summary the window cannot carry would be dropped from
    every turn's request whole, which loses more than its end."""
    limit = 2 * summary_limit(budget)
    if count(text) <= limit:
        return text
    return _cut(text, limit, count) or text[:1]


_SO_FAR = "The summary so far:"
_FOLLOWED = "What followed:"
_ASK = "Write the new summary: the summary so far and what followed, together."
_CUT_MARK = " … [cut]"


def _cut(line: str, room: int, count: Callable[[str], int]) -> str | None:
    """``line`` shortened (marked) to at most ``room`` tokens; None if even the
    mark does not fit."""
    if room <= count(_CUT_MARK):
        return None
    keep = len(line)
    while keep > 0:
        keep = keep * room // (count(line[:keep] + _CUT_MARK) + 1)
        cut = line[:keep] + _CUT_MARK
        if count(cut) <= room:
            return cut
    return _CUT_MARK.strip() if count(_CUT_MARK.strip()) <= room else None

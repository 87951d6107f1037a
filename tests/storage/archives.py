"""Hypothesis strategies for whole conversations as an export holds them:
histories the agent could have written (turns of a user message, rounds of
tool calls with their results in any order, a final answer, or a failure, or,
in the last turn, calls still open), with approvals, turn failures, notes,
reflections and chained summaries, user messages with content parts
(images and files, inline data among them), in the order an export lists them; any
text (U+0000 and every plane), any time, any count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from agentik import MemoryEntry, Message, Reflection, Role, TokenUsage, ToolCall
from agentik.storage import (
    Approval,
    ArchivedApproval,
    ArchivedFailure,
    ArchivedMessage,
    ArchivedNote,
    ArchivedOutput,
    ArchivedReflection,
    ArchivedSummary,
    ArchiveRecord,
    Summary,
)
from tests import strategies

TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=30)
TIMES = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23), timezones=st.just(UTC)
)
PARTS = strategies.parts
"""Images and files by url or inline data (odd bytes, empty), text parts."""
USAGE = st.none() | st.builds(TokenUsage, st.integers(0, 2**63 - 1), st.integers(0, 10**9))


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 4) -> list[ArchiveRecord]:
    """The records of one valid conversation, in export order."""
    messages: list[ArchivedMessage] = []
    approvals: list[ArchivedApproval] = []
    failures: list[ArchivedFailure] = []
    outputs: list[ArchivedOutput] = []
    keys = draw(st.lists(TEXT, unique=True, max_size=max_turns))
    call_ids = iter(
        draw(st.lists(TEXT, unique=True, min_size=6 * max_turns, max_size=6 * max_turns))
    )

    def add(message: Message, key: str | None = None) -> int:
        seq = len(messages) + 1
        stored = Message(
            message.role,
            message.content,
            message.tool_calls,
            message.tool_call_id,
            message.usage,
            seq,
            draw(TIMES),
            draw(st.lists(PARTS, max_size=2)) if message.role is Role.USER else (),
        )
        messages.append(ArchivedMessage(message=stored, idempotency_key=key))
        return seq

    turns = draw(st.integers(0, max_turns))
    for turn in range(turns):
        key = keys[turn] if turn < len(keys) and draw(st.booleans()) else None
        user_seq = add(Message(Role.USER, draw(TEXT)), key)
        last = turn == turns - 1
        for _ in range(draw(st.integers(0, 2))):
            calls = tuple(
                ToolCall(next(call_ids), draw(TEXT), draw(TEXT))
                for _ in range(draw(st.integers(1, 3)))
            )
            seq = add(Message(Role.ASSISTANT, draw(TEXT), calls, usage=draw(USAGE)))
            for call in calls:
                if draw(st.booleans()):
                    asked = draw(TIMES)
                    approved = draw(st.none() | st.booleans())
                    decided = None if approved is None else asked + timedelta(seconds=1)
                    approval = Approval(
                        seq=seq, call_id=call.id, approved=approved, reason=draw(TEXT)
                    )
                    approvals.append(
                        ArchivedApproval(approval=approval, created_at=asked, decided_at=decided)
                    )
            answered = draw(st.permutations(calls))
            if last and draw(st.integers(0, 3)) == 0:  # the last turn may stop with calls open
                for call in answered[: draw(st.integers(0, len(answered) - 1))]:
                    add(Message(Role.TOOL, draw(TEXT), tool_call_id=call.id))
                break
            for call in answered:
                add(Message(Role.TOOL, draw(TEXT), tool_call_id=call.id))
        else:
            if draw(st.integers(0, 3)) == 0:
                failures.append(
                    ArchivedFailure(seq=user_seq, code=draw(TEXT), created_at=draw(TIMES))
                )
            else:
                add(Message(Role.ASSISTANT, draw(TEXT), usage=draw(USAGE)))
                if draw(st.booleans()):  # a typed turn
                    outputs.append(ArchivedOutput(seq=user_seq, created_at=draw(TIMES)))
    notes = [
        ArchivedNote(
            entry=MemoryEntry(id=i, conversation_id="c", text=draw(TEXT), created_at=draw(TIMES)),
            archived=draw(st.booleans()),
        )
        for i in range(1, draw(st.integers(0, 3)) + 1)
    ]
    reflections = [
        ArchivedReflection(
            reflection=Reflection(id=i, conversation_id="c", text=draw(TEXT), created_at=at)
        )
        for i, at in enumerate(sorted(draw(st.lists(TIMES, max_size=3))), 1)
    ]
    covered = sorted(draw(st.sets(st.integers(1, max(1, len(messages))), max_size=3)))
    summaries = [
        ArchivedSummary(summary=Summary(through_seq=seq, text=draw(TEXT), created_at=draw(TIMES)))
        for seq in covered
        if seq <= len(messages)
    ]
    return [*messages, *notes, *reflections, *approvals, *failures, *outputs, *summaries]

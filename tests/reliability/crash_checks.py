"""The crash harness's checks of the database as a killed (or stopped) server
left it, read directly with a read-only apsw connection: integrity, gapless
seqs, every call answered once, every acknowledged turn stored exactly once
and exactly as its response said (``test_crash`` states them all).
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import apsw
import attrs

from agentik import Message, Role, ToolCall
from tests.reliability.crash_client import ConversationLog

INTERRUPTED = "interrupted:"

# (seq, role, content, ((id, name, arguments), ...), tool_call_id): one message
# as the client saw it, as the API serves it, and as the database holds it.
Row = tuple[int, str, str, tuple[tuple[str, str, str], ...], str | None]


# --- the database, read directly --------------------------------------------


@attrs.frozen
class StoredMessage:
    row: Row
    key: str | None


@attrs.frozen
class Snapshot:
    integrity: tuple[str, ...]
    conversations: dict[str, list[StoredMessage]]
    approvals: dict[str, dict[str, bool | None]]
    """Conversation -> call id -> its decision (None while it waits)."""
    failures: list[str]
    """Turns recorded as failed (``turn_failure`` rows): none is expected."""


def read_database(path: Path) -> Snapshot:
    """Read every message, approval and failed turn with a read-only apsw
    connection (after a SIGKILL too: SQLite recovers the WAL index; the
    database file itself is not written)."""
    connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        integrity = tuple(str(row[0]) for row in connection.execute("PRAGMA integrity_check"))
        conversations: dict[str, list[StoredMessage]] = collections.defaultdict(list)
        for cid, seq, role, content, calls, call_id, key in connection.execute(
            "SELECT conversation_id, seq, role, content, tool_calls, tool_call_id,"
            " idempotency_key FROM message ORDER BY conversation_id, seq"
        ):
            parsed = json.loads(calls) if calls else []
            row: Row = (
                seq,
                role,
                content,
                tuple((c["id"], c["name"], c["arguments"]) for c in parsed),
                call_id,
            )
            conversations[cid].append(StoredMessage(row, key))
        approvals: dict[str, dict[str, bool | None]] = collections.defaultdict(dict)
        for cid, call_id, approved in connection.execute(
            "SELECT conversation_id, call_id, approved FROM approval"
        ):
            approvals[cid][call_id] = None if approved is None else bool(approved)
        failures = [
            f"{cid}: the turn at seq {seq} is recorded as failed ({code})"
            for cid, seq, code in connection.execute(
                "SELECT conversation_id, seq, code FROM turn_failure"
            )
        ]
    finally:
        connection.close()
    return Snapshot(integrity, dict(conversations), dict(approvals), failures)


def api_row(message: object) -> Row:
    """A message of the native API's JSON (a TurnResult's or a history page's)."""
    assert isinstance(message, dict)
    calls = message.get("tool_calls") or []
    assert isinstance(calls, list)
    return (
        message["seq"],
        message["role"],
        message["content"],
        tuple((c["id"], c["name"], c["arguments"]) for c in calls),
        message.get("tool_call_id"),
    )


def as_message(row: Row) -> Message:
    seq, role, content, calls, call_id = row
    return Message(
        Role(role),
        content,
        tool_calls=tuple(ToolCall(*c) for c in calls),
        tool_call_id=call_id,
        seq=seq,
    )


# --- the checks ---------------------------------------------------------------


@attrs.define
class Tally:
    """What one check of a snapshot found."""

    problems: list[str] = attrs.Factory(list)
    lost: int = 0
    duplicated: int = 0
    mismatched: int = 0
    open_calls: int = 0
    """Tool calls without a result, parked ones aside (expected only right after a kill)."""
    interrupted: list[str] = attrs.Factory(list)
    """Keys of the turns a kill left unfinished and not waiting for a decision."""
    repaired: int = 0
    """Tool results ``interrupted: ...`` (calls a kill interrupted, not run again)."""
    messages: int = 0


def history_problems(cid: str, rows: Sequence[Row]) -> tuple[list[str], set[str]]:
    """Gapless seqs, results only for open calls, each answered once, no user
    message while a call is open; returns the problems and the calls left open."""
    problems = []
    seqs = [r[0] for r in rows]
    if seqs != list(range(1, len(rows) + 1)):
        problems.append(f"{cid}: seqs are not 1..{len(rows)}: {_gaps(seqs)}")
    open_calls: set[str] = set()
    answered: set[str] = set()
    for seq, role, _, calls, call_id in rows:
        if role == "user" and open_calls:
            problems.append(f"{cid}: user message at seq {seq} while {sorted(open_calls)} open")
        open_calls.update(c[0] for c in calls)
        if role == "tool":
            if call_id in answered:
                problems.append(f"{cid}: call {call_id} answered twice (seq {seq})")
            elif call_id not in open_calls:
                problems.append(f"{cid}: result at seq {seq} for unknown call {call_id}")
            open_calls.discard(call_id or "")
            answered.add(call_id or "")
    return problems, open_calls


def _gaps(seqs: list[int]) -> str:
    expected = set(range(1, len(seqs) + 1))
    return f"missing {sorted(expected - set(seqs))[:10]}, extra {sorted(set(seqs) - expected)[:10]}"


def check_snapshot(
    snapshot: Snapshot, logs: Sequence[ConversationLog], *, after_kill: bool
) -> Tally:
    """Every acknowledged turn stored exactly once, as its response said.

    ``after_kill``: the database as a killed process left it, where the
    unknown turn of a conversation may be half-stored and its last call
    open; otherwise every turn sent must be acknowledged and complete (a
    parked one: its call still waiting)."""
    tally = Tally(problems=list(snapshot.failures))
    if snapshot.integrity != ("ok",):
        tally.problems.append(f"integrity_check: {list(snapshot.integrity)[:10]}")
    known = {log.conversation_id for log in logs}
    for cid in sorted(set(snapshot.conversations) - known):
        tally.problems.append(f"{cid}: a conversation no client started")
    for log in logs:
        cid = log.conversation_id
        stored = snapshot.conversations.get(cid, [])
        rows = [m.row for m in stored]
        tally.messages += len(rows)
        tally.repaired += sum(1 for r in rows if r[1] == "tool" and r[2].startswith(INTERRUPTED))
        problems, open_calls = history_problems(cid, rows)
        tally.problems += problems
        decisions = snapshot.approvals.get(cid, {})
        waiting = {c for c in open_calls if c in decisions and decisions[c] is None}
        parked = {t.approval["call_id"] for t in log.turns if t.parked and t.result is None}
        if parked - waiting:
            tally.problems.append(f"{cid}: parked call(s) {sorted(parked - waiting)} not waiting")
        tally.open_calls += len(open_calls - parked)
        if open_calls - parked and not after_kill:
            tally.problems.append(f"{cid}: call(s) {sorted(open_calls - parked)} never answered")
        last = max((i for i, m in enumerate(stored) if m.row[1] == "user"), default=None)
        if after_kill and last is not None and not waiting:
            final = stored[-1].row
            if len(stored) - last < 2 or final[1] != "assistant" or final[3]:
                tally.interrupted.append(stored[last].key or "")
        _check_turns(log, stored, tally, after_kill=after_kill)
    return tally


def _check_turns(
    log: ConversationLog, stored: list[StoredMessage], tally: Tally, *, after_kill: bool
) -> None:
    cid = log.conversation_id
    users = [i for i, m in enumerate(stored) if m.row[1] == "user"]
    by_key: dict[str | None, list[int]] = collections.defaultdict(list)
    for i in users:
        by_key[stored[i].key].append(i)
    sent = {t.key: t for t in log.turns}
    for key, found in by_key.items():
        if key is None:
            tally.problems.append(f"{cid}: user message(s) without a key at {found}")
        elif key not in sent:
            tally.problems.append(f"{cid}: user message with a key no client sent: {key!r}")
    texts = collections.Counter(stored[i].row[2] for i in users)
    bounds = [*users, len(stored)]
    ends = dict(itertools.pairwise(bounds))  # a turn runs up to the next user message
    for turn in log.turns:
        found = by_key.get(turn.key, [])
        if len(found) > 1 or texts[turn.text] > 1:
            tally.duplicated += 1
            tally.problems.append(f"{cid}: turn {turn.key} stored {max(len(found), 2)} times")
            continue
        acknowledged = turn.acknowledged
        if acknowledged is None:
            if not after_kill and turn is not log.pending:
                tally.problems.append(f"{cid}: turn {turn.key} never acknowledged")
            continue
        if not found:
            tally.lost += 1
            tally.problems.append(f"{cid}: acknowledged turn {turn.key} LOST")
            continue
        start = found[0]
        span = [m.row for m in stored[start : ends[start]]]
        messages = acknowledged["messages"]
        assert isinstance(messages, list)
        received = [api_row(m) for m in messages]
        if turn.result is not None:  # finished: exactly as received
            same = span == received and turn.result["text"] == span[-1][2]
        else:  # paused: as received, then whatever its decision (if it came) added
            same = span[: len(received)] == received and (span == received or not turn.parked)
        if not same or span[0][2] != turn.text:
            tally.mismatched += 1
            tally.problems.append(
                f"{cid}: acknowledged turn {turn.key} stored differently:\n"
                f"  received {received}\n  stored   {span}"
            )

"""A2A ListTasks: one page of tasks, at a cost that follows the page, not the
number of tasks (but for an exact count under a filter, below).

With a contextId, tasks come from stored history: one
``FullMessageStore.list_keyed_turns`` read returns the page's turns newest
first, each with the messages its view is built from, and the page token
carries the seq of the last task listed (keyset pagination), so the hundredth
page costs what the first does. ``totalSize`` is one index-only count. Tasks
accepted but whose user message is not stored yet (from the ledger) lead the
first page.

Without a contextId (or with a store that has no such index) the tasks are
those the in-process ledger remembers, newest first: walking the bounded
ledger costs no reads, and only the page's tasks are read from the store. The
token carries the last task id listed.

A filter (``status``, ``statusTimestampAfter``) is not an index lookup (a
task's state is in its last message, its turn's record and the ledger), and
``totalSize`` counts the tasks that match it, as the a2a-sdk server counts
them: so a filtered call examines the listing's tasks, newest first, and
returns full pages. ``statusTimestampAfter`` keeps the tasks whose status
timestamp (their last stored message; now, for one not stored yet) is at or
after it; a context's turns run one after another, so its tasks newest first
are also latest update first, and the walk ends at the first older task: a
bound after every task costs two turns' reads. A ``status`` filter in a
context reads every task of it (without a contextId, every task the ledger
holds, at most 10,000): the price of an exact count.

Page tokens are opaque to clients (URL-safe base64 of a small JSON object);
anything that is not one this code made is ``-32602`` invalid params.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import json
import re
from collections.abc import Awaitable, Callable

import attrs

from agentik._input import InputError, decode_json, shown
from agentik._json import JsonObject, JsonValue
from agentik._messages import Message, Role
from agentik.server._owners import Caller
from agentik.server.a2a._ledger import TaskLedger
from agentik.server.a2a._rpc import (
    A2AError,
    context_of,
    history_length,
    invalid_params,
    valid_context_id,
)
from agentik.server.a2a._views import TaskView, is_finished, is_interrupted, view_from_turn
from agentik.storage import FullMessageStore, KeyedTurn, TurnRecord

SCAN_LIMIT = 200
"""Tasks accepted whose user message is not stored yet, listed at most."""
MAX_TURN_MESSAGES = 1000
"""Messages of one turn read to build its view (GetTask reads as many)."""
TASK_STATES = frozenset(
    {
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)
_FILTER_BATCH = 101
"""Turns read per store call under a filter, at most."""
_TOP = 2**62
"""Above every seq: the position of a listing's first stored task."""
_MAX_TOKEN = 1024
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]+")
_BAD_TOKEN = "field 'pageToken' must be a token from a previous ListTasks"

FindTask = Callable[[Caller, str], Awaitable[TaskView]]
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


@attrs.frozen
class Query:
    """A validated ListTasks request."""

    context: str | None
    size: int
    after: int | str | None
    """Where the previous page ended: a seq (context listing) or a task id (ledger)."""
    state: str | None
    history: int | None
    artifacts: bool
    since: datetime.datetime | None = None
    """``statusTimestampAfter``: only tasks whose status timestamp is at or after it."""

    def keeps(self, view: TaskView) -> bool:
        return self.state in (None, view.state) and (self.since is None or view.at >= self.since)


@attrs.frozen
class Page:
    views: list[TaskView]
    after: int | str | None
    """Where the next page starts; None when this one is the last."""
    total: int


def encode_token(after: int | str) -> str:
    position = {"seq": after} if isinstance(after, int) else {"task": after}
    payload = json.dumps(position, separators=(",", ":")).encode("ascii")
    return base64.urlsafe_b64encode(payload).decode("ascii").rstrip("=")


def decode_token(token: JsonValue) -> int | str | None:
    """The position a page token names; "" and an absent token start at the top."""
    if token is None or token == "":
        return None
    if not isinstance(token, str) or len(token) > _MAX_TOKEN or not _TOKEN_CHARS.fullmatch(token):
        raise invalid_params(_BAD_TOKEN)
    try:
        data = decode_json(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, InputError):
        raise invalid_params(_BAD_TOKEN) from None
    if isinstance(data, dict) and len(data) == 1:
        seq, task = data.get("seq"), data.get("task")
        if isinstance(seq, int) and not isinstance(seq, bool) and 1 <= seq <= _TOP:
            return seq
        if isinstance(task, str) and context_of(task) is not None:
            return task
    raise invalid_params(_BAD_TOKEN)


def parse_query(params: JsonObject) -> Query:
    context = params.get("contextId")
    if context is not None and (not isinstance(context, str) or not valid_context_id(context)):
        raise invalid_params("field 'contextId' must be 1..200 printable characters")
    size = params.get("pageSize", 50)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 100:
        raise invalid_params("field 'pageSize' must be an integer 1..100")
    state = params.get("status")
    if state == "TASK_STATE_UNSPECIFIED":
        state = None
    if state is not None and state not in TASK_STATES:
        shown_state = shown(state) if isinstance(state, str) else "a non-string"
        raise invalid_params(f"field 'status' must be a TaskState, got {shown_state}")
    assert state is None or isinstance(state, str)
    artifacts = params.get("includeArtifacts", False)
    if not isinstance(artifacts, bool):
        raise invalid_params("field 'includeArtifacts' must be true or false")
    return Query(
        context=context,
        size=size,
        after=decode_token(params.get("pageToken")),
        state=state,
        history=history_length(params),
        artifacts=artifacts,
        since=parse_timestamp(params.get("statusTimestampAfter")),
    )


def parse_timestamp(value: JsonValue) -> datetime.datetime | None:
    """``statusTimestampAfter``: a google.protobuf.Timestamp in ProtoJSON, an
    RFC 3339 date and time with a zone (``2026-10-27T10:00:00Z``)."""
    if value is None:
        return None
    if isinstance(value, str) and _RFC3339.fullmatch(value):
        text = value.upper()
        seconds, dot, rest = text.partition(".")
        if dot:  # Python reads at most microseconds: drop the nanoseconds
            digits = re.match(r"\d+", rest)
            assert digits is not None
            text = f"{seconds}.{digits.group()[:6]}{rest[digits.end() :]}"
        with contextlib.suppress(ValueError):  # a month 13, a day 32 ...
            return datetime.datetime.fromisoformat(text)
    got = shown(value) if isinstance(value, str) else repr(value)
    raise invalid_params(
        "field 'statusTimestampAfter' must be an RFC 3339 timestamp with a zone,"
        f" such as '2026-10-27T10:00:00Z', got {got}"
    )


def page_json(query: Query, page: Page) -> JsonObject:
    tasks: list[JsonValue] = []
    for view in page.views:
        task = view.to_json(history_length=query.history)
        if not query.artifacts:
            task.pop("artifacts", None)
        tasks.append(task)
    return {
        "tasks": tasks,
        "nextPageToken": "" if page.after is None else encode_token(page.after),
        "pageSize": query.size,
        "totalSize": page.total,
    }


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def context_page(
    store: FullMessageStore,
    index: FullMessageStore,
    ledger: TaskLedger,
    caller: Caller,
    query: Query,
) -> Page:
    """One page of a context's tasks from stored history (see the module
    docstring); ``store`` and ``index`` are the same message store."""
    assert query.context is not None
    if isinstance(query.after, str):
        raise invalid_params(_BAD_TOKEN)  # a ledger token, from a listing without contextId
    context, stored = query.context, caller.internal(query.context)
    fresh: list[TaskView] = []  # accepted, the user message not stored yet: newest of all
    accepted = [task_id for where, task_id in reversed(ledger.running) if where == stored]
    for task_id in accepted[:SCAN_LIMIT]:  # a handful, unless streams were left early
        if await store.find_idempotency_key(stored, task_id) is None:
            fresh.append(TaskView(task_id, context, "TASK_STATE_SUBMITTED", _now()))
    if query.state is not None or query.since is not None:
        return await _filtered_context_page(store, index, ledger, stored, query, fresh)
    views = fresh[: query.size] if query.after is None else []
    suffix = f".{context}"
    total = len(fresh) + await index.count_idempotency_keys(stored, key_suffix=suffix)
    before = _TOP if query.after is None else query.after
    while True:
        batch = query.size - len(views) + 1
        turns = await index.list_keyed_turns(
            stored,
            before_seq=before,
            limit=batch,
            key_suffix=suffix,
            max_messages=MAX_TURN_MESSAGES,
        )
        for turn in turns:
            if len(views) == query.size:
                return Page(views, before, total)  # this turn, at least, is left
            before = turn.seq
            found = await _view(store, ledger, stored, context, turn)
            if found is not None:
                views.append(found)
        if len(turns) < batch:
            return Page(views, None, total)


async def _filtered_context_page(
    store: FullMessageStore,
    index: FullMessageStore,
    ledger: TaskLedger,
    stored: str,
    query: Query,
    fresh: list[TaskView],
) -> Page:
    """A page under a ``status`` or ``statusTimestampAfter`` filter, and how
    many tasks match: a walk of the context's tasks newest first, to the
    first task older than ``statusTimestampAfter`` (tasks newest first are
    latest update first), else to the oldest."""
    assert query.context is not None
    assert not isinstance(query.after, str)
    context, after = query.context, query.after
    matching = [view for view in fresh if query.keeps(view)]
    views = matching[: query.size] if query.after is None else []
    total, more = len(matching), len(matching) > query.size
    listed: int | None = None  # the seq of the page's last stored task
    before, batch = _TOP, 1  # doubled before each read: a bound after every task reads two
    while True:
        batch = min(2 * batch, _FILTER_BATCH)
        turns = await index.list_keyed_turns(
            stored,
            before_seq=before,
            limit=batch,
            key_suffix=f".{context}",
            max_messages=MAX_TURN_MESSAGES,
        )
        for turn in turns:
            before = turn.seq
            found = await _view(store, ledger, stored, context, turn)
            if found is None:
                continue
            if query.since is not None and found.at < query.since:
                turns = []  # every older task is older still
                break
            if not query.keeps(found):
                continue
            total += 1
            if after is not None and turn.seq >= after:
                continue  # on an earlier page
            if len(views) < query.size:
                views.append(found)
                listed = turn.seq
            else:
                more = True
        if len(turns) < batch:
            break
    return Page(views, (_TOP if listed is None else listed) if more else None, total)


async def _view(
    store: FullMessageStore, ledger: TaskLedger, stored: str, context: str, turn: KeyedTurn
) -> TaskView | None:
    if context_of(turn.key) != context:
        return None  # a key that merely ends like a task id of this context
    key = (stored, turn.key)
    messages = list(turn.messages)
    in_progress = ledger.runs(key)
    record = None
    resumes = False
    if is_finished(messages):
        record = await store.turn_record(stored, turn.seq)  # a typed answer?
    elif not in_progress:
        record = await store.turn_record(stored, turn.seq)  # waiting, cancelled, failed
        resumes = await will_resume(store, ledger, stored, messages, record)
    return view_from_turn(
        turn.key,
        context,
        messages,
        running=in_progress,
        cancelled=key in ledger.cancelled,
        record=record,
        resumes=resumes,
    )


async def will_resume(
    store: FullMessageStore,
    ledger: TaskLedger,
    stored: str,
    turn: list[Message],
    record: TurnRecord,
) -> bool:
    """Whether the agent will resume ``turn`` (its user message first), which
    stored state shows interrupted: only its conversation's last turn is (one
    read of the message after it, and only for an interrupted turn)."""
    seq, last = turn[0].seq, turn[-1].seq
    assert seq is not None, "stored messages carry their seq"
    assert last is not None, "stored messages carry their seq"
    if not is_interrupted(turn, record) or not ledger.turn_resumes(stored, seq):
        return False
    async for message in store.get_messages(stored, after_seq=last, page_size=1):
        return message.role is not Role.USER  # a later turn: this one will not resume
    return True


async def ledger_page(
    ledger: TaskLedger, find_task: FindTask, caller: Caller, query: Query
) -> Page:
    """One page of the tasks this process remembers (see the module docstring)."""
    if isinstance(query.after, int):
        raise invalid_params(_BAD_TOKEN)  # a history token, from a listing with contextId
    candidates = [
        task_id
        for stored, task_id in reversed(ledger.created)
        if (mine := caller.external(stored)) is not None and query.context in (None, mine)
    ]
    start = 0
    if query.after is not None:
        try:
            start = candidates.index(query.after) + 1
        except ValueError:  # the ledger forgot it, and so everything older
            start = len(candidates)
    filtered = query.state is not None or query.since is not None
    views: list[TaskView] = []
    total, more, listed = 0, False, None
    for position, task_id in enumerate(candidates):
        if not filtered and position < start:
            continue
        if not filtered and len(views) == query.size:
            return Page(views, listed, len(candidates))
        try:
            view = await find_task(caller, task_id)
        except A2AError:
            continue
        if not query.keeps(view):
            continue
        total += 1
        if position < start:
            continue  # counted; on an earlier page
        if len(views) < query.size:
            views.append(view)
            listed = task_id
        else:
            more = True
    if not filtered:
        return Page(views, None, len(candidates))
    return Page(views, listed if more else None, total)

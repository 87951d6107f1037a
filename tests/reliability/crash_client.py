"""The client side of the crash harness: what each conversation sent, what was
acknowledged, and the requests (native API over httpx2).

One task per conversation sends turns in sequence, each with a fresh
idempotency key, a third as SSE streams. The text names one tool (the demo
model calls the first offered tool the text names): ``crash_work`` of the
``crash`` toolset (or else ``enable_toolset``, when a kill has made the
toolset inactive), or one of the core tools ``fetch_work`` (idempotent),
``approve_work`` (needs approval) or ``once_work``. A turn that comes back
``awaiting_approval`` is decided over HTTP, approved or denied; a quarter of
the conversations *park* at their second approval request instead: they
leave it waiting and send nothing more, so the call waits across every kill
that follows, and is decided only at the end.

A turn is *acknowledged* when a 200 response carrying it arrived in full
(for a stream: its ``turn_finished`` frame and the end); a decision, when its
200 response did. Anything unanswered (the kill dropped the connection) is
retried after the restart with the same key and text, or the same decision,
until answered; half the time as two requests at once, whose answers must
then agree.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable

import attrs
import httpx2
import trio

JsonDict = dict[str, object]

STREAMED = 1 / 3
"""The share of turns sent as SSE streams rather than plain JSON requests."""
DOUBLE_RETRIES = 1 / 2
"""The share of retries sent as two concurrent requests."""
TOOL_SHARES = (
    ("crash_work", 0.35),
    ("fetch_work", 0.2),
    ("approve_work", 0.25),
    ("once_work", 0.2),
)
PARKERS = 1 / 4
"""The share of conversations that leave an approval waiting (at their second)."""
PARK_AT = 2
APPROVED = 0.7
"""The share of decisions that approve."""


@attrs.define
class SentTurn:
    """One turn a client sent: its key and text never change across retries."""

    key: str
    tag: str
    """Names the turn in its text and in its tool call's arguments."""
    text: str
    stream: bool
    """Sent as SSE (acknowledged by its ``turn_finished`` frame) or as JSON."""
    tool: str
    attempts: int = 0
    doubled: bool = False
    """Retried at least once with two requests at once."""
    paused: JsonDict | None = None
    """The ``awaiting_approval`` TurnResult JSON, once received in full."""
    decision: tuple[bool, str] | None = None
    """(approve, reason), chosen once; resent unchanged until answered."""
    decision_attempts: int = 0
    parked: bool = False
    """Left waiting for a decision across the kills that follow."""
    result: JsonDict | None = None
    """The finished TurnResult JSON, once received in full."""

    @property
    def acknowledged(self) -> JsonDict | None:
        """The last result received: finished, else paused, else None."""
        return self.result if self.result is not None else self.paused

    @property
    def approval(self) -> JsonDict:
        """The call waiting for a decision (the turn makes one call)."""
        assert self.paused is not None
        approvals = self.paused["approvals"]
        assert isinstance(approvals, list)
        first = approvals[0]
        assert isinstance(first, dict)
        return first


@attrs.define
class ConversationLog:
    """Everything one client did in its conversation, in order."""

    conversation_id: str
    rng: random.Random
    parks_at: int | None = None
    """Park at this approval request (1-based); None: never."""
    turns: list[SentTurn] = attrs.Factory(list)
    pending: SentTurn | None = None
    """The turn not finished yet, unless parked (at most one: turns go in sequence)."""
    parked: SentTurn | None = None
    approvals_seen: int = 0
    parked_checks: int = 0
    """Restarts after which the parked call was listed as still waiting."""
    refusals: list[str] = attrs.Factory(list)
    """Non-200 answers and answers of the wrong shape: none is expected, the
    server only ever dies."""
    disagreements: list[str] = attrs.Factory(list)
    """Two answers to one key, or to one decision, that differ (none is expected)."""

    def new_turn(self) -> SentTurn:
        n = len(self.turns) + 1
        ms = self.rng.randint(5, 50)  # long enough for kills to land mid-call
        tag = f"{self.conversation_id}-{n}"
        draw, tool = self.rng.random(), TOOL_SHARES[-1][0]
        for name, share in TOOL_SHARES:
            if draw < share:
                tool = name
                break
            draw -= share
        text = f"{tag}: {tool} {json.dumps({'ms': ms, 'tag': tag})}"
        if tool == "crash_work":
            text += f" or else enable_toolset {json.dumps({'name': 'crash'})}"
        key = f"{tag}-{self.rng.getrandbits(32):08x}"
        stream = self.rng.random() < STREAMED
        turn = SentTurn(key=key, tag=tag, text=text, stream=stream, tool=tool)
        self.turns.append(turn)
        return turn

    @property
    def acknowledged(self) -> list[SentTurn]:
        """Turns acknowledged finished."""
        return [t for t in self.turns if t.result is not None]


Post = Callable[[httpx2.AsyncClient, "ConversationLog", SentTurn], Awaitable["JsonDict | None"]]


async def _once(
    post: Post, client: httpx2.AsyncClient, log: ConversationLog, turn: SentTurn
) -> JsonDict | None:
    return await post(client, log, turn)


async def _twice(
    post: Post, client: httpx2.AsyncClient, log: ConversationLog, turn: SentTurn
) -> JsonDict | None:
    """Two requests at once (an impatient client): both answers must agree."""
    results: list[JsonDict | None] = [None, None]

    async def one(i: int) -> None:
        results[i] = await post(client, log, turn)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 0)
        nursery.start_soon(one, 1)
    answered = [r for r in results if r is not None]
    if len(answered) == 2 and answered[0] != answered[1]:
        log.disagreements.append(f"{turn.key}: {answered[0]} != {answered[1]}")
    return answered[0] if answered else None


async def post_turn(
    client: httpx2.AsyncClient, log: ConversationLog, turn: SentTurn
) -> JsonDict | None:
    """One request for ``turn``: its TurnResult JSON, or None (no answer, or a
    refusal, which is recorded)."""
    turn.attempts += 1
    headers = {"Accept": "text/event-stream"} if turn.stream else {}
    try:
        async with client.stream(
            "POST",
            f"/agentik/conversations/{log.conversation_id}/turns",
            json={"text": turn.text, "idempotency_key": turn.key},
            headers=headers,
        ) as response:
            body = await response.aread()
    except httpx2.TransportError:
        return None
    refusal = f"{turn.key}: HTTP {response.status_code} {body[:300]!r}"
    if response.status_code != 200:
        log.refusals.append(refusal)
        return None
    result = json.loads(body) if not turn.stream else finished_frame(body.decode())
    if not isinstance(result, dict):
        log.refusals.append(f"{refusal} (a stream without turn_finished)")
        return None
    return result


async def post_decision(
    client: httpx2.AsyncClient, log: ConversationLog, turn: SentTurn
) -> JsonDict | None:
    """One request deciding ``turn``'s call: the TurnResult JSON, or None."""
    assert turn.decision is not None
    turn.decision_attempts += 1
    approve, reason = turn.decision
    call_id = turn.approval["call_id"]
    path = f"/agentik/conversations/{log.conversation_id}/approvals/{call_id}"
    try:
        response = await client.post(path, json={"approve": approve, "reason": reason})
    except httpx2.TransportError:
        return None
    if response.status_code != 200:
        log.refusals.append(f"{turn.key} decision: HTTP {response.status_code} {response.text}")
        return None
    result: JsonDict = response.json()
    return result


def finished_frame(body: str) -> object:
    """The TurnResult JSON of a stream's ``turn_finished`` frame, if any."""
    for frame in body.split("\n\n"):
        for line in frame.split("\n"):
            if line.startswith("data:"):
                data = json.loads(line[5:])
                if data.get("type") == "turn_finished":
                    return data["result"]
    return None


def _accept(log: ConversationLog, turn: SentTurn, result: JsonDict, *, decided: bool) -> bool:
    """Keep ``result``; False (and a refusal recorded) if its shape is wrong:
    a turn of ``approve_work`` pauses with its one call until decided, every
    other turn finishes."""
    status, approvals = result.get("status"), result.get("approvals")
    if status == "finished" and approvals == []:
        turn.result = result
        return True
    waits = status == "awaiting_approval" and turn.tool == "approve_work" and not decided
    if waits and isinstance(approvals, list) and len(approvals) == 1:
        call = approvals[0]
        if isinstance(call, dict) and call.get("name") == "approve_work":
            turn.paused = result
            return True
    log.refusals.append(f"{turn.key}: unexpected answer {str(result)[:300]}")
    return False


async def advance(
    client: httpx2.AsyncClient, log: ConversationLog, turn: SentTurn, *, may_park: bool
) -> bool:
    """Take ``turn`` as far as it goes: sent (again, with its key, if it got no
    answer before), then, if it waits for approval, decided (or parked, when
    ``may_park`` and it is this conversation's turn to park). True once it
    finished or parked; False when an answer did not come (the kill): it
    stays ``pending``, never lost."""
    log.pending = turn
    if turn.acknowledged is None:
        again = turn.attempts > 0
        if again and log.rng.random() < DOUBLE_RETRIES:
            turn.doubled = True
            result = await _twice(post_turn, client, log, turn)
        else:
            result = await _once(post_turn, client, log, turn)
        if result is None or not _accept(log, turn, result, decided=False):
            return False
    if turn.result is None:
        if turn.decision is None:
            log.approvals_seen += 1
            if may_park and log.approvals_seen == log.parks_at:
                turn.parked = True
                log.parked, log.pending = turn, None
                return True
            approve = log.rng.random() < APPROVED
            turn.decision = (approve, "" if approve else f"not now, {turn.key}")
        again = turn.decision_attempts > 0
        twice = again and log.rng.random() < DOUBLE_RETRIES
        result = await (_twice if twice else _once)(post_decision, client, log, turn)
        if result is None or not _accept(log, turn, result, decided=True):
            return False
    log.pending = None
    return True


async def drive(client: httpx2.AsyncClient, log: ConversationLog) -> None:
    """Send turns in sequence, an unfinished one (from the last round) first,
    until one gets no answer (only the kill makes that happen) or parks."""
    if log.parked is not None:
        return
    if log.pending is not None and not await advance(client, log, log.pending, may_park=True):
        return
    while log.parked is None:
        if not await advance(client, log, log.new_turn(), may_park=True):
            return


async def check_parked(client: httpx2.AsyncClient, log: ConversationLog) -> bool | None:
    """Whether the parked call is listed as waiting (None: no answer, the kill)."""
    assert log.parked is not None
    try:
        response = await client.get(f"/agentik/conversations/{log.conversation_id}/approvals")
    except httpx2.TransportError:
        return None
    expected = {"conversation_id": log.conversation_id, "approvals": [log.parked.approval]}
    if response.status_code == 200 and response.json() == expected:
        log.parked_checks += 1
        return True
    log.refusals.append(f"{log.parked.key}: parked, but listed as {response.text[:300]}")
    return False


async def decide_parked(client: httpx2.AsyncClient, log: ConversationLog) -> bool:
    """Decide the parked call at last (approve or deny); True once finished."""
    turn = log.parked
    assert turn is not None
    log.parked = None
    return await advance(client, log, turn, may_park=False)

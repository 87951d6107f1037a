"""Crash harness: ``agentik serve`` in a subprocess, SIGKILLed at random moments
under concurrent load, restarted on the same database, then checked.

Load: one trio task per conversation, each sending turns one after another
over the native API with a fresh idempotency key per turn, a third of them
as SSE streams (``Accept: text/event-stream``), the rest as plain JSON. The
turn text names ``crash_work`` (a tool that takes a few real milliseconds,
loaded by entry point from ``tests.reliability.crash_tools``) and, after it,
``enable_toolset``: the demo model calls the first offered tool the text
names, so a conversation whose ``crash`` toolset is active (in memory, lost
at every kill) runs ``crash_work`` and any other enables it. Every turn makes
one tool call, and kills land inside tool calls as well as inside writes.

A turn is *acknowledged* only when its 200 response body was received in
full (for a stream: its ``turn_finished`` frame and its end). A turn that got
no answer (the kill dropped the connection) is *unknown*: the client retries
it, with the same key and text, after the restart, until it is acknowledged;
half the time with two requests at once, whose answers must then agree.

Checks, on the database read directly (apsw, read-only) and through the API:

- after every kill, on the database as the killed process left it: integrity
  ok, seqs 1..n gapless, every turn acknowledged so far stored exactly once
  and exactly as its response said (the same messages at the same seqs);
- after the last kill: the server restarts on the database, every unknown
  turn retried with its key returns a result, and then every turn ever sent
  is in the history exactly once with the messages the client received,
  every tool call has exactly one result, the API serves the same messages,
  one earlier turn per conversation resent with its key gets its first
  answer again and adds nothing, and one more turn in every conversation
  works.

``test_crash`` runs 4 kills (CI); ``AGENTIK_LONG=1`` also runs
``test_crash_long`` (``AGENTIK_CRASH_KILLS``, default 25). The seed comes from
``AGENTIK_CRASH_SEED`` or is drawn and printed; ``bench/crash.py`` runs the
same harness from the command line and prints the figures.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import apsw
import attrs
import httpx
import pytest
import trio

from agentik import Message, Role, ToolCall
from tests.agent.helpers import assert_valid_history

ROOT = Path(__file__).resolve().parents[2]
TOOLSET = "tests.reliability.crash_tools:crash"
START_SECONDS = 30.0
STOP_SECONDS = 30.0
SETTLE_SECONDS = 60.0
MAX_SETTLE_ATTEMPTS = 20
INTERRUPTED = "interrupted:"
STREAMED = 1 / 3
"""The share of turns sent as SSE streams rather than plain JSON requests."""
DOUBLE_RETRIES = 1 / 2
"""The share of unknown turns retried with two concurrent requests."""
LONG = os.environ.get("AGENTIK_LONG") == "1"

# (seq, role, content, ((id, name, arguments), ...), tool_call_id): one message
# as the client saw it, as the API serves it, and as the database holds it.
Row = tuple[int, str, str, tuple[tuple[str, str, str], ...], str | None]


# --- the client side: what was sent, what was acknowledged -------------------


@attrs.define
class SentTurn:
    """One turn a client sent: its key and text never change across retries."""

    key: str
    text: str
    stream: bool
    """Sent as SSE (acknowledged by its ``turn_finished`` frame) or as JSON."""
    attempts: int = 0
    doubled: bool = False
    """Retried at least once with two requests at once."""
    result: dict[str, object] | None = None
    """The TurnResult JSON of the 200 response, once received in full."""


@attrs.define
class ConversationLog:
    """Everything one client did in its conversation, in order."""

    conversation_id: str
    rng: random.Random
    turns: list[SentTurn] = attrs.Factory(list)
    pending: SentTurn | None = None
    """The turn sent and not acknowledged (at most one: turns go in sequence)."""
    refusals: list[str] = attrs.Factory(list)
    disagreements: list[str] = attrs.Factory(list)
    """Two answers to one key that differ (none is expected)."""
    """Non-200 answers: none is expected, the server only ever dies."""

    def new_turn(self) -> SentTurn:
        n = len(self.turns) + 1
        ms = self.rng.randint(5, 50)  # long enough for kills to land mid-call
        tag = f"{self.conversation_id}-{n}"
        text = (
            f"{tag}: crash_work {json.dumps({'ms': ms, 'tag': tag})}"
            f" or else enable_toolset {json.dumps({'name': 'crash'})}"
        )
        key = f"{tag}-{self.rng.getrandbits(32):08x}"
        turn = SentTurn(key=key, text=text, stream=self.rng.random() < STREAMED)
        self.turns.append(turn)
        return turn

    @property
    def acknowledged(self) -> list[SentTurn]:
        return [t for t in self.turns if t.result is not None]


async def send(client: httpx.AsyncClient, log: ConversationLog, turn: SentTurn) -> bool:
    """Send ``turn`` once; True when its 200 response arrived in full (for a
    stream: every frame, ``turn_finished`` among them, and the end).

    ``pending`` is set before sending, so a cancellation anywhere leaves the
    turn unknown, never lost."""
    log.pending = turn
    turn.attempts += 1
    result = await post_turn(client, log, turn)
    if result is None:
        return False
    turn.result = result
    log.pending = None
    return True


async def send_twice(client: httpx.AsyncClient, log: ConversationLog, turn: SentTurn) -> bool:
    """Retry ``turn`` with two requests at once (an impatient client): when
    both are answered, the answers must be the same."""
    log.pending = turn
    turn.attempts += 2
    turn.doubled = True
    results: list[dict[str, object] | None] = [None, None]

    async def one(i: int) -> None:
        results[i] = await post_turn(client, log, turn)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 0)
        nursery.start_soon(one, 1)
    answered = [r for r in results if r is not None]
    if len(answered) == 2 and answered[0] != answered[1]:
        log.disagreements.append(f"{turn.key}: {answered[0]} != {answered[1]}")
    if not answered:
        return False
    turn.result = answered[0]
    log.pending = None
    return True


async def post_turn(
    client: httpx.AsyncClient, log: ConversationLog, turn: SentTurn
) -> dict[str, object] | None:
    """One request for ``turn``: its TurnResult JSON, or None (no answer, or
    a refusal, which is recorded)."""
    headers = {"Accept": "text/event-stream"} if turn.stream else {}
    try:
        async with client.stream(
            "POST",
            f"/agentik/conversations/{log.conversation_id}/turns",
            json={"text": turn.text, "idempotency_key": turn.key},
            headers=headers,
        ) as response:
            body = await response.aread()
    except httpx.TransportError:
        return None
    refusal = f"{turn.key}: HTTP {response.status_code} {body[:300]!r}"
    if response.status_code != 200:
        log.refusals.append(refusal)
        return None
    result = json.loads(body) if not turn.stream else _finished(body.decode())
    if not isinstance(result, dict):
        log.refusals.append(f"{refusal} (a stream without turn_finished)")
        return None
    return result


def _finished(body: str) -> object:
    """The TurnResult JSON of a stream's ``turn_finished`` frame, if any."""
    for frame in body.split("\n\n"):
        for line in frame.split("\n"):
            if line.startswith("data:"):
                data = json.loads(line[5:])
                if data.get("type") == "turn_finished":
                    return data["result"]
    return None


async def drive(client: httpx.AsyncClient, log: ConversationLog) -> None:
    """Send turns in sequence, an unknown one (from the last round) first, until
    one gets no answer: only the kill makes that happen."""
    if log.pending is not None and not await retry(client, log):
        return
    while await send(client, log, log.new_turn()):
        pass


async def retry(client: httpx.AsyncClient, log: ConversationLog) -> bool:
    """Retry the unknown turn with its key: half the time as two requests at once."""
    assert log.pending is not None
    twice = log.rng.random() < DOUBLE_RETRIES
    return await (send_twice if twice else send)(client, log, log.pending)


# --- the server process -------------------------------------------------------


@attrs.define(eq=False)
class ServerProcess:
    """``agentik serve`` on a database, in a child process."""

    process: trio.Process
    url: str | None = None
    bound: trio.Event = attrs.Factory(trio.Event)
    tail: collections.deque[str] = attrs.Factory(lambda: collections.deque(maxlen=60))
    errors: list[str] = attrs.Factory(list)
    """Log lines at ERROR or with a traceback."""

    async def read_log(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        buffer = b""
        async for chunk in stream:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                line = raw.decode(errors="replace")
                self.tail.append(line)
                if " ERROR " in line or "Traceback" in line:
                    self.errors.append(line)
                if self.url is None and "serving url=" in line:
                    self.url = line.split("url=")[1].split()[0]
                    self.bound.set()
        self.bound.set()  # exited: whoever waits must not wait forever

    def log_tail(self) -> str:
        return "\n".join(self.tail)

    async def kill(self) -> None:
        """SIGKILL: no drain, no checkpoint, no goodbye."""
        self.process.kill()
        with trio.fail_after(STOP_SECONDS):
            code = await self.process.wait()
        assert code == -signal.SIGKILL, f"exit code {code} after SIGKILL\n{self.log_tail()}"

    async def stop(self) -> None:
        """SIGTERM: the server drains and must exit 0."""
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(STOP_SECONDS):
            code = await self.process.wait()
        assert code == 0, f"exit code {code} after SIGTERM\n{self.log_tail()}"


@asynccontextmanager
async def running_server(database: Path) -> AsyncIterator[ServerProcess]:
    """Start ``agentik serve`` on ``database`` (port 0), wait until /health
    answers; on exit the process is gone (killed if the body left it running)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [
        sys.executable,
        "-m",
        "agentik.cli",
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--database",
        str(database),
        "--toolset",
        TOOLSET,
    ]
    process = await trio.lowlevel.open_process(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=database.parent,
        env=env,
    )
    server = ServerProcess(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.read_log)
            with trio.fail_after(START_SECONDS):
                await server.bound.wait()
                if server.url is None:
                    code = await process.wait()
                    raise AssertionError(
                        f"agentik serve exited ({code}) before serving on {database}\n"
                        + server.log_tail()
                    )
                async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
                    health = await client.get("/health")
                assert health.status_code == 200, health.text
            yield server
            if process.returncode is None:
                process.kill()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


def client_for(server: ServerProcess, conversations: int) -> httpx.AsyncClient:
    assert server.url is not None
    return httpx.AsyncClient(
        base_url=server.url,
        timeout=httpx.Timeout(20.0),
        limits=httpx.Limits(max_connections=conversations + 8, max_keepalive_connections=None),
    )


# --- the database, read directly --------------------------------------------


@attrs.frozen
class StoredMessage:
    row: Row
    key: str | None


@attrs.frozen
class Snapshot:
    integrity: tuple[str, ...]
    conversations: dict[str, list[StoredMessage]]


def read_database(path: Path) -> Snapshot:
    """Read every message with a read-only apsw connection (after a SIGKILL too:
    SQLite recovers the WAL index; the database file itself is not written)."""
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
    finally:
        connection.close()
    return Snapshot(integrity, dict(conversations))


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
    """Tool calls without a result (expected only right after a kill)."""
    repaired: int = 0
    """Tool results written by crash repair (``interrupted: ...``)."""
    messages: int = 0


def history_problems(cid: str, rows: Sequence[Row]) -> tuple[list[str], int]:
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
    return problems, len(open_calls)


def _gaps(seqs: list[int]) -> str:
    expected = set(range(1, len(seqs) + 1))
    return f"missing {sorted(expected - set(seqs))[:10]}, extra {sorted(set(seqs) - expected)[:10]}"


def check_snapshot(
    snapshot: Snapshot, logs: Sequence[ConversationLog], *, after_kill: bool
) -> Tally:
    """Every acknowledged turn stored exactly once, as its response said.

    ``after_kill``: the database as a killed process left it, where the
    unknown turn of a conversation may be half-stored and its last call
    open; otherwise every turn sent must be acknowledged and complete."""
    tally = Tally()
    if snapshot.integrity != ("ok",):
        tally.problems.append(f"integrity_check: {list(snapshot.integrity)[:10]}")
    known = {log.conversation_id for log in logs}
    for cid in sorted(set(snapshot.conversations) - known):
        tally.problems.append(f"{cid}: a conversation no client started")
    for log in logs:
        stored = snapshot.conversations.get(log.conversation_id, [])
        rows = [m.row for m in stored]
        tally.messages += len(rows)
        tally.repaired += sum(1 for r in rows if r[2].startswith(INTERRUPTED))
        problems, open_calls = history_problems(log.conversation_id, rows)
        tally.problems += problems
        tally.open_calls += open_calls
        if open_calls and not after_kill:
            tally.problems.append(f"{log.conversation_id}: {open_calls} call(s) never answered")
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
        if turn.result is None:
            if not after_kill and turn is not log.pending:
                tally.problems.append(f"{cid}: turn {turn.key} never acknowledged")
            continue
        if not found:
            tally.lost += 1
            tally.problems.append(f"{cid}: acknowledged turn {turn.key} LOST")
            continue
        start = found[0]
        span = [m.row for m in stored[start : ends[start]]]
        messages = turn.result["messages"]
        assert isinstance(messages, list)
        received = [api_row(m) for m in messages]
        if span != received or turn.result["text"] != span[-1][2] or span[0][2] != turn.text:
            tally.mismatched += 1
            tally.problems.append(
                f"{cid}: acknowledged turn {turn.key} stored differently:\n"
                f"  received {received}\n  stored   {span}"
            )


# --- the run --------------------------------------------------------------------


@attrs.define
class Figures:
    seed: int
    kills: int
    conversations: int
    turns_sent: int = 0
    acknowledged: int = 0
    streamed: int = 0
    """Acknowledged turns sent as SSE streams."""
    retried_with_same_key: int = 0
    """Turns whose first attempt got no answer (in flight at a kill), then
    acknowledged when retried with the same key after the restart."""
    retried_twice_at_once: int = 0
    """Of those, turns retried (at least once) with two concurrent requests."""
    lost: int = 0
    duplicated: int = 0
    mismatched: int = 0
    kills_with_open_call: int = 0
    """Kills after which the database held a tool call without its result."""
    repaired_calls: int = 0
    messages: int = 0
    refusals: int = 0
    server_error_lines: int = 0
    wall_seconds: float = 0.0

    def summary(self) -> str:
        return json.dumps(attrs.asdict(self), indent=2)


@attrs.define
class Report:
    figures: Figures
    problems: list[str]
    final_histories: dict[str, list[Row]]


def kill_delay(rng: random.Random, max_delay: float) -> float:
    """A fifth of the kills come early (conversations loading and repairing),
    the rest anywhere in the round."""
    if rng.random() < 0.2:
        return rng.uniform(0.02, 0.3)
    return rng.uniform(0.3, max_delay)


async def load_round(server: ServerProcess, logs: list[ConversationLog], delay: float) -> None:
    """All clients send turns; SIGKILL after ``delay`` seconds; each client
    stops when its turn in flight gets no answer (it stays unknown)."""
    async with client_for(server, len(logs)) as client, trio.open_nursery() as nursery:
        for log in logs:
            nursery.start_soon(drive, client, log)
        await trio.sleep(delay)
        await server.kill()
        # Each client stops at its first unanswered turn; a client still
        # waiting after this long is a harness bug, not a server one.
        nursery.cancel_scope.deadline = trio.current_time() + 10.0


async def settle(server: ServerProcess, logs: list[ConversationLog]) -> None:
    """Retry every unknown turn with its key until it is acknowledged."""
    async with client_for(server, len(logs)) as client:
        with trio.move_on_after(SETTLE_SECONDS):
            async with trio.open_nursery() as nursery:
                for log in logs:
                    if log.pending is not None:
                        nursery.start_soon(_settle_one, client, log)


async def _settle_one(client: httpx.AsyncClient, log: ConversationLog) -> None:
    for _ in range(MAX_SETTLE_ATTEMPTS):
        if await retry(client, log):
            return
        await trio.sleep(0.1)


async def check_api(
    server: ServerProcess, snapshot: Snapshot, logs: list[ConversationLog]
) -> list[str]:
    """The API serves exactly the messages the database holds."""
    problems = []
    async with client_for(server, len(logs)) as client:
        for log in logs:
            cid = log.conversation_id
            rows: list[Row] = []
            after: int | None = 0
            while after is not None:
                page = await client.get(
                    f"/agentik/conversations/{cid}/messages",
                    params={"after_seq": after, "limit": 1000},
                )
                if page.status_code != 200:
                    problems.append(f"{cid}: GET messages: HTTP {page.status_code} {page.text}")
                    break
                body = page.json()
                rows += [api_row(m) for m in body["messages"]]
                after = body["next_after_seq"]
            stored = [m.row for m in snapshot.conversations.get(cid, [])]
            if rows != stored:
                problems.append(f"{cid}: the API serves {len(rows)} messages, stored {len(stored)}")
    return problems


async def replay_earlier(
    server: ServerProcess, logs: list[ConversationLog], rng: random.Random
) -> list[str]:
    """Resend one earlier acknowledged turn per conversation with its key: the
    answer must be the first one (the final check shows nothing was added)."""
    problems: list[str] = []
    async with client_for(server, len(logs)) as client:
        for log in logs:
            first = rng.choice(log.acknowledged)
            response = await client.post(  # JSON, whichever way the turn was sent
                f"/agentik/conversations/{log.conversation_id}/turns",
                json={"text": first.text, "idempotency_key": first.key},
            )
            if response.status_code != 200 or response.json() != first.result:
                problems.append(
                    f"{log.conversation_id}: resending {first.key} answered"
                    f" HTTP {response.status_code} {response.text[:300]},"
                    f" not the first result {first.result}"
                )
    return problems


async def next_turns(
    server: ServerProcess, snapshot: Snapshot, logs: list[ConversationLog]
) -> list[str]:
    """One more turn in every conversation, at once; each must be acknowledged
    and start right after the history's last message."""
    problems: list[str] = []
    async with client_for(server, len(logs)) as client:
        async with trio.open_nursery() as nursery:
            for log in logs:
                nursery.start_soon(send, client, log, log.new_turn())
    for log in logs:
        turn = log.turns[-1]
        if turn.result is None:
            problems.append(f"{log.conversation_id}: the next turn failed: {log.refusals[-1:]}")
            continue
        messages = turn.result["messages"]
        assert isinstance(messages, list)
        first = api_row(messages[0])[0]
        if first != len(snapshot.conversations.get(log.conversation_id, [])) + 1:
            problems.append(f"{log.conversation_id}: the next turn starts at seq {first}")
    return problems


async def run_crash(
    directory: Path,
    *,
    kills: int,
    conversations: int,
    seed: int,
    max_delay: float = 1.5,
    progress: bool = False,
) -> Report:
    """The whole harness: ``kills`` rounds of load and SIGKILL, then recovery,
    the checks, and one more turn per conversation."""
    began = time.monotonic()
    rng = random.Random(seed)
    database = directory / "crash.db"
    logs = [
        ConversationLog(f"c{i:03d}", random.Random(rng.getrandbits(64)))
        for i in range(conversations)
    ]
    figures = Figures(seed=seed, kills=0, conversations=conversations)
    problems: list[str] = []
    error_lines: list[str] = []
    for round_no in range(1, kills + 1):
        delay = kill_delay(rng, max_delay)
        async with running_server(database) as server:
            await load_round(server, logs, delay)
        error_lines += server.errors
        figures.kills += 1
        tally = check_snapshot(read_database(database), logs, after_kill=True)
        figures.kills_with_open_call += tally.open_calls > 0
        problems += [f"after kill {round_no}: {p}" for p in tally.problems]
        if progress:
            acknowledged = sum(len(log.acknowledged) for log in logs)
            print(
                f"kill {round_no}/{kills} after {delay:.2f}s: {acknowledged} acknowledged,"
                f" {sum(log.pending is not None for log in logs)} unknown,"
                f" {tally.open_calls} open call(s), {len(tally.problems)} problem(s)",
                flush=True,
            )
    # Recovery: the server restarts on the killed database; unknown turns retried.
    async with running_server(database) as server:
        await settle(server, logs)
        await server.stop()
    error_lines += server.errors
    snapshot = read_database(database)
    tally = check_snapshot(snapshot, logs, after_kill=False)
    problems += [f"after recovery: {p}" for p in tally.problems]
    for log in logs:
        if log.pending is not None:
            problems.append(f"{log.conversation_id}: retrying {log.pending.key} got no result")
    figures.lost, figures.duplicated, figures.mismatched = (
        tally.lost,
        tally.duplicated,
        tally.mismatched,
    )
    figures.turns_sent = sum(len(log.turns) for log in logs)
    figures.acknowledged = sum(len(log.acknowledged) for log in logs)
    figures.streamed = sum(1 for log in logs for t in log.acknowledged if t.stream)
    figures.retried_with_same_key = sum(1 for log in logs for t in log.turns if t.attempts > 1)
    figures.retried_twice_at_once = sum(1 for log in logs for t in log.turns if t.doubled)
    # Once more: the API agrees with the file, and every conversation goes on.
    async with running_server(database) as server:
        problems += await check_api(server, snapshot, logs)
        problems += await replay_earlier(server, logs, rng)
        problems += await next_turns(server, snapshot, logs)
        await server.stop()
    error_lines += server.errors
    snapshot = read_database(database)
    tally = check_snapshot(snapshot, logs, after_kill=False)
    problems += [f"after the next turns: {p}" for p in tally.problems]
    figures.repaired_calls = tally.repaired
    figures.messages = tally.messages
    figures.refusals = sum(len(log.refusals) for log in logs)
    problems += [f"{log.conversation_id}: refused: {r}" for log in logs for r in log.refusals]
    problems += [
        f"{log.conversation_id}: two answers: {d}" for log in logs for d in log.disagreements
    ]
    figures.server_error_lines = len(error_lines)
    problems += [f"server log: {line}" for line in error_lines[:20]]
    figures.wall_seconds = round(time.monotonic() - began, 1)
    histories = {cid: [m.row for m in rows] for cid, rows in snapshot.conversations.items()}
    return Report(figures, problems, histories)


# --- the tests ------------------------------------------------------------------


def _seed() -> int:
    text = os.environ.get("AGENTIK_CRASH_SEED")
    return int(text) if text else random.randrange(2**32)


def _assert_clean(report: Report, kills: int) -> None:
    figures = report.figures
    print(figures.summary())
    where = f"seed {figures.seed} (rerun with AGENTIK_CRASH_SEED={figures.seed})"
    assert not report.problems, f"{where}:\n" + "\n".join(report.problems[:40])
    assert figures.kills >= kills
    assert (figures.lost, figures.duplicated, figures.mismatched) == (0, 0, 0), where
    assert figures.acknowledged == figures.turns_sent > 0
    for rows in report.final_histories.values():
        assert_valid_history([as_message(r) for r in rows])


async def test_crash(tmp_path: Path) -> None:
    """Four SIGKILLs under load of 24 conversations lose and duplicate no
    acknowledged turn, and the server restarts and goes on."""
    report = await run_crash(tmp_path, kills=4, conversations=24, seed=_seed(), max_delay=1.5)
    _assert_clean(report, 4)


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="the long crash run: set AGENTIK_LONG=1")
async def test_crash_long(tmp_path: Path) -> None:
    """The long run: AGENTIK_CRASH_KILLS (default 25) kills, 40 conversations."""
    kills = int(os.environ.get("AGENTIK_CRASH_KILLS", "25"))
    report = await run_crash(
        tmp_path, kills=kills, conversations=40, seed=_seed(), max_delay=3.0, progress=True
    )
    _assert_clean(report, kills)

"""Crash harness: ``agentik serve`` in a subprocess, SIGKILLed at random moments
under concurrent load, restarted on the same database, then checked.

Load (``crash_client``): one trio task per conversation, each sending turns
one after another over the native API with a fresh idempotency key per turn,
a third as SSE streams. Every turn makes one tool call of the harness's tools
(``crash_tools``): ``crash_work`` of the ``crash`` toolset (active only until
the next kill), or a core tool: ``fetch_work`` (idempotent), ``approve_work``
(needs approval: the client approves or denies it over HTTP; a quarter of the
conversations leave one waiting, *parked*, across all later kills) or
``once_work``. Kills land inside tool calls, writes and decisions; every tool
run is written to a side channel that survives the kill (``crash_runs``).

A turn is *acknowledged* when a 200 response carrying it arrived in full (for
a stream: its ``turn_finished`` frame and the end): finished, or waiting for
approval; a decision likewise. Anything unanswered is retried after the
restart with the same key and text, or the same decision, until answered;
half the time as two requests at once, whose answers must then agree. The
restart resumes the turns a kill interrupted, on their conversation's first
touch (the retry).

Checks, on the database read directly (apsw, read-only) and through the API:

- after every kill, on the database as the killed process left it: integrity
  ok, seqs 1..n gapless, every turn acknowledged so far stored exactly once
  and exactly as its response said (a finished one: the same messages at the
  same seqs; a paused one: starting with them), no turn recorded as failed;
  the unfinished turns that do not wait for a decision are counted
  (*interrupted*);
- after each restart: every parked call is listed as still waiting;
- after the last kill: the server restarts on the database, every unknown
  turn and decision retried returns its result; then every turn is stored
  exactly once with the messages the client received, finished (but the
  parked ones, still waiting), every tool call but the parked ones has
  exactly one result; a clean restart later the parked calls are still
  listed and are decided over HTTP, and their turns finish; the API serves
  the same messages as the file, one earlier turn per conversation resent
  with its key gets its first answer again and adds nothing, and one more
  turn in every conversation works;
- tool runs (``crash_runs``): no run without its call stored; a call of a
  tool that is not idempotent ran at most once, an idempotent one again only
  after a kill interrupted it; answers agree with the runs (the output: it
  ran; ``interrupted:``: not idempotent; ``denied``: never ran; approved
  before it ran).

``test_crash`` runs 4 kills (CI); ``AGENTIK_LONG=1`` also runs
``test_crash_long`` (``AGENTIK_CRASH_KILLS``, default 25). The seed comes from
``AGENTIK_CRASH_SEED`` or is drawn and printed; ``bench/crash.py`` runs the
same harness from the command line and prints the figures.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import attrs
import httpx2
import pytest
import trio

from tests.agent.helpers import assert_valid_history
from tests.reliability.crash_checks import (
    Row,
    Snapshot,
    api_row,
    as_message,
    check_snapshot,
    read_database,
)
from tests.reliability.crash_client import (
    PARK_AT,
    PARKERS,
    ConversationLog,
    SentTurn,
    advance,
    check_parked,
    decide_parked,
    drive,
)
from tests.reliability.crash_runs import RunFigures, check_runs, read_runs, stored_calls
from tests.reliability.crash_tools import RUNS_DIR

ROOT = Path(__file__).resolve().parents[2]
TOOLSET = "tests.reliability.crash_tools:crash"
TOOLS = "tests.reliability.crash_tools:core"
START_SECONDS = 30.0
STOP_SECONDS = 30.0
SETTLE_SECONDS = 60.0
MAX_SETTLE_ATTEMPTS = 20
LONG = os.environ.get("AGENTIK_LONG") == "1"

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
    resumed: int = 0
    """Turns it resumed (its log says so, one line each)."""

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
                if "resuming a turn the process stopped in" in line:
                    self.resumed += 1
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
async def running_server(
    database: Path, *, toolsets: tuple[str, ...] = (TOOLSET,), tools: tuple[str, ...] = (TOOLS,)
) -> AsyncIterator[ServerProcess]:
    """Start ``agentik serve`` on ``database`` (port 0) with ``toolsets`` and
    ``tools`` (entry points), wait until /health answers; on exit the process
    is gone (killed if the body left it running). Its tools record their runs
    in ``runs/`` beside the database."""
    runs = database.parent / "runs"
    runs.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[RUNS_DIR] = str(runs)
    command = [
        sys.executable,
        "-m",
        "agentik.cli",
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--database",
        str(database),
        *(arg for spec in toolsets for arg in ("--toolset", spec)),
        *(arg for spec in tools for arg in ("--tool", spec)),
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
                async with httpx2.AsyncClient(base_url=server.url, timeout=10) as client:
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


def client_for(server: ServerProcess, conversations: int) -> httpx2.AsyncClient:
    assert server.url is not None
    return httpx2.AsyncClient(
        base_url=server.url,
        timeout=httpx2.Timeout(20.0),
        limits=httpx2.Limits(max_connections=conversations + 8, max_keepalive_connections=None),
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
    interrupted_at_kills: int = 0
    """Turns a kill left unfinished and not waiting for a decision, summed over
    the kills (a turn left so by two kills in a row counts twice)."""
    interrupted_turns: int = 0
    """Distinct such turns: each finished exactly once in the end."""
    resumed_by_server: int = 0
    """Turns the restarted servers resumed (their log lines)."""
    repaired_calls: int = 0
    """Calls answered ``interrupted: ...`` (not idempotent, cut short by a kill)."""
    paused_turns: int = 0
    """Turns acknowledged as waiting for approval."""
    approved: int = 0
    denied: int = 0
    decisions_retried: int = 0
    """Decisions sent again after a kill left them unanswered."""
    parked: int = 0
    """Calls left waiting for a decision across the kills that followed."""
    parked_listed_after_restart: int = 0
    """Times a parked call was listed, still waiting, after a restart."""
    parked_decided_at_end: int = 0
    tool_runs: dict[str, int] = attrs.Factory(dict)
    idempotent_calls_run_again: int = 0
    most_runs_of_one_call: int = 0
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
    """A fifth of the kills come early (conversations loading and resuming),
    the rest anywhere in the round."""
    if rng.random() < 0.2:
        return rng.uniform(0.02, 0.3)
    return rng.uniform(0.3, max_delay)


async def load_round(server: ServerProcess, logs: list[ConversationLog], delay: float) -> None:
    """All clients send turns (a parked one only checks its call still waits);
    SIGKILL after ``delay`` seconds; each client stops when its turn or
    decision in flight gets no answer (it stays unknown)."""
    async with client_for(server, len(logs)) as client, trio.open_nursery() as nursery:
        for log in logs:
            nursery.start_soon(drive if log.parked is None else check_parked, client, log)
        await trio.sleep(delay)
        await server.kill()
        # Each client stops at its first unanswered request; a client still
        # waiting after this long is a harness bug, not a server one.
        nursery.cancel_scope.deadline = trio.current_time() + 10.0


async def settle(server: ServerProcess, logs: list[ConversationLog]) -> None:
    """Retry every unknown turn and decision until answered; check every
    parked call still waits."""
    async with client_for(server, len(logs)) as client:
        with trio.move_on_after(SETTLE_SECONDS):
            async with trio.open_nursery() as nursery:
                for log in logs:
                    if log.pending is not None:
                        nursery.start_soon(_settle_one, client, log)
                    if log.parked is not None:
                        nursery.start_soon(check_parked, client, log)


async def _settle_one(client: httpx2.AsyncClient, log: ConversationLog) -> None:
    for _ in range(MAX_SETTLE_ATTEMPTS):
        assert log.pending is not None
        if await advance(client, log, log.pending, may_park=False):
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


async def finish_parked(server: ServerProcess, logs: list[ConversationLog]) -> list[str]:
    """Every parked call is still listed as waiting; decide each (approve or
    deny, over HTTP): its turn must finish."""
    problems: list[str] = []
    async with client_for(server, len(logs)) as client:
        for log in logs:
            if log.parked is None:
                continue
            turn = log.parked
            if await check_parked(client, log) and await decide_parked(client, log):
                continue
            problems.append(f"{log.conversation_id}: the parked turn {turn.key} did not finish")
    return problems


async def replay_earlier(
    server: ServerProcess, logs: list[ConversationLog], rng: random.Random
) -> list[str]:
    """Resend one earlier finished turn per conversation with its key: the
    answer must be the first one (the final check shows nothing was added)."""
    problems: list[str] = []
    async with client_for(server, len(logs)) as client:
        for log in logs:
            if not log.acknowledged:
                problems.append(f"{log.conversation_id}: no turn finished")
                continue
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


def _last_seq(turn: SentTurn) -> int:
    assert turn.result is not None
    messages = turn.result["messages"]
    assert isinstance(messages, list)
    return api_row(messages[-1])[0]


async def next_turns(server: ServerProcess, logs: list[ConversationLog]) -> list[str]:
    """One more turn in every conversation, at once; each must finish (decided
    if it asks) and start right after the history's last message."""
    problems: list[str] = []
    before = {log.conversation_id: _last_seq(log.turns[-1]) for log in logs if log.acknowledged}
    async with client_for(server, len(logs)) as client:
        async with trio.open_nursery() as nursery:
            for log in logs:
                nursery.start_soon(partial(advance, client, log, log.new_turn(), may_park=False))
    for log in logs:
        turn = log.turns[-1]
        if turn.result is None:
            problems.append(f"{log.conversation_id}: the next turn failed: {log.refusals[-1:]}")
            continue
        messages = turn.result["messages"]
        assert isinstance(messages, list)
        first = api_row(messages[0])[0]
        if first != before.get(log.conversation_id, 0) + 1:
            problems.append(f"{log.conversation_id}: the next turn starts at seq {first}")
    return problems


def check_tool_runs(
    directory: Path, snapshot: Snapshot, killed: frozenset[int]
) -> tuple[list[str], RunFigures]:
    """The runs the tools recorded agree with the calls and answers stored."""
    calls = {}
    for cid, stored in snapshot.conversations.items():
        rows = [m.row for m in stored]
        calls.update(stored_calls(rows, cid, snapshot.approvals.get(cid, {})))
    return check_runs(read_runs(directory / "runs"), calls, killed)


def _parked_did_not_run(directory: Path, logs: list[ConversationLog]) -> list[str]:
    runs = read_runs(directory / "runs")
    return [
        f"{log.conversation_id}: the parked call of {log.parked.key} ran"
        for log in logs
        if log.parked is not None and ("approve_work", log.parked.tag) in runs
    ]


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
    the checks, the parked calls decided, and one more turn per conversation."""
    began = time.monotonic()
    rng = random.Random(seed)
    database = directory / "crash.db"
    logs = []
    for i in range(conversations):
        log_rng = random.Random(rng.getrandbits(64))
        parks_at = PARK_AT if log_rng.random() < PARKERS else None
        logs.append(ConversationLog(f"c{i:03d}", log_rng, parks_at))
    figures = Figures(seed=seed, kills=0, conversations=conversations)
    problems: list[str] = []
    error_lines: list[str] = []
    killed: set[int] = set()
    interrupted: set[str] = set()
    for round_no in range(1, kills + 1):
        delay = kill_delay(rng, max_delay)
        async with running_server(database) as server:
            killed.add(server.process.pid)
            await load_round(server, logs, delay)
        error_lines += server.errors
        figures.resumed_by_server += server.resumed
        figures.kills += 1
        tally = check_snapshot(read_database(database), logs, after_kill=True)
        figures.kills_with_open_call += tally.open_calls > 0
        figures.interrupted_at_kills += len(tally.interrupted)
        interrupted.update(tally.interrupted)
        problems += [f"after kill {round_no}: {p}" for p in tally.problems]
        if progress:
            acknowledged = sum(t.acknowledged is not None for log in logs for t in log.turns)
            print(
                f"kill {round_no}/{kills} after {delay:.2f}s: {acknowledged} acknowledged,"
                f" {sum(log.pending is not None for log in logs)} unknown,"
                f" {len(tally.interrupted)} interrupted, {tally.open_calls} open call(s),"
                f" {sum(log.parked is not None for log in logs)} parked,"
                f" {len(tally.problems)} problem(s)",
                flush=True,
            )
    # Recovery: the server restarts on the killed database; unknown turns and
    # decisions retried (the retry resumes an interrupted turn).
    async with running_server(database) as server:
        await settle(server, logs)
        await server.stop()
    error_lines += server.errors
    figures.resumed_by_server += server.resumed
    snapshot = read_database(database)
    tally = check_snapshot(snapshot, logs, after_kill=False)
    problems += [f"after recovery: {p}" for p in tally.problems]
    problems += _parked_did_not_run(directory, logs)
    for log in logs:
        if log.pending is not None:
            problems.append(f"{log.conversation_id}: retrying {log.pending.key} got no result")
    figures.lost, figures.duplicated, figures.mismatched = (
        tally.lost,
        tally.duplicated,
        tally.mismatched,
    )
    turns = [t for log in logs for t in log.turns]
    figures.interrupted_turns = len(interrupted)
    figures.turns_sent = len(turns)
    figures.acknowledged = sum(t.acknowledged is not None for t in turns)
    figures.streamed = sum(1 for t in turns if t.acknowledged is not None and t.stream)
    figures.retried_with_same_key = sum(1 for t in turns if t.attempts > 1)
    figures.retried_twice_at_once = sum(1 for t in turns if t.doubled)
    figures.parked = sum(1 for t in turns if t.parked)
    figures.parked_listed_after_restart = sum(log.parked_checks for log in logs)
    # Once more: the API agrees with the file, the parked calls still wait and
    # are decided, keyed replays, and every conversation goes on.
    async with running_server(database) as server:
        problems += await check_api(server, snapshot, logs)
        problems += await finish_parked(server, logs)
        problems += await replay_earlier(server, logs, rng)
        problems += await next_turns(server, logs)
        await server.stop()
    error_lines += server.errors
    snapshot = read_database(database)
    tally = check_snapshot(snapshot, logs, after_kill=False)
    problems += [f"after the next turns: {p}" for p in tally.problems]
    turns = [t for log in logs for t in log.turns]
    finished = {t.key for t in turns if t.result is not None}
    # At the end, not before: an interrupted turn may be resumed into waiting
    # for approval, and parked there until the end.
    problems += [
        f"the interrupted turn {key} did not finish" for key in sorted(interrupted - finished)
    ]
    figures.parked_decided_at_end = sum(1 for t in turns if t.parked and t.result is not None)
    figures.paused_turns = sum(1 for t in turns if t.paused is not None)
    figures.approved = sum(1 for t in turns if t.decision is not None and t.decision[0])
    figures.denied = sum(1 for t in turns if t.decision is not None and not t.decision[0])
    figures.decisions_retried = sum(1 for t in turns if t.decision_attempts > 1)
    run_problems, runs = check_tool_runs(directory, snapshot, frozenset(killed))
    problems += run_problems
    figures.tool_runs = dict(sorted(runs.runs.items()))
    figures.idempotent_calls_run_again = runs.ran_again
    figures.most_runs_of_one_call = runs.most_runs_of_one_call
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
    assert figures.parked == figures.parked_decided_at_end
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

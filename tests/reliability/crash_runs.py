"""Tool runs in the crash harness, as the tools recorded them in their side
channel (``crash_tools.record_run``), checked against what the database says
answered each call.

The rules (issue 15, "every interrupted turn finished exactly once"):

- a call's tool runs only once its call is stored (a run whose call is in no
  history was a side effect nobody can see or answer);
- at most once per server process; a call of a tool that is not idempotent
  at most once in all; an idempotent one again only after the process it
  ran in was killed (so twice when one kill interrupted it);
- a call answered with the tool's output ran (to its end); one answered
  ``interrupted: …`` is of a tool that is not idempotent (those run again)
  and ran at most once, in a killed process; a denied call never ran, and a
  call that needed approval ran only once approved.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from tests.reliability.crash_tools import IDEMPOTENT, TOOLS

NEEDS_APPROVAL = frozenset({"approve_work"})
INTERRUPTED = "interrupted:"


@attrs.frozen
class Run:
    pid: int
    ended: bool


CallKey = tuple[str, str]
"""(tool, tag): the harness's turns make one call each, tagged with the turn."""


def read_runs(folder: Path) -> dict[CallKey, list[Run]]:
    """Every run of every call, in the order they started."""
    runs: dict[CallKey, list[Run]] = collections.defaultdict(list)
    for tool in TOOLS:
        path = folder / f"{tool}.runs"
        if not path.exists():
            continue
        started: dict[tuple[str, int], int] = {}
        for line in path.read_text().splitlines():
            phase, tag, pid_text = line.split(" ")
            pid = int(pid_text)
            calls = runs[(tool, tag)]
            if phase == "start":
                started[(tag, pid)] = len(calls)
                calls.append(Run(pid, ended=False))
            else:
                at = started[(tag, pid)]
                calls[at] = attrs.evolve(calls[at], ended=True)
    return dict(runs)


@attrs.frozen
class StoredCall:
    """A call of one of the harness's tools, as the final database holds it."""

    conversation_id: str
    call_id: str
    result: str | None
    """The content of its tool result; None if it has none."""
    approved: bool | None
    """Its decision, for a call that needed approval (None: waiting, or none needed)."""


@attrs.define
class RunFigures:
    runs: dict[str, int] = attrs.Factory(dict)
    """Tool -> runs (starts) in all."""
    ran_again: int = 0
    """Idempotent calls that ran more than once (a crash interrupted them)."""
    most_runs_of_one_call: int = 0
    answered_interrupted: int = 0
    denied: int = 0
    approved: int = 0


def stored_calls(
    rows: Sequence[tuple[int, str, str, tuple[tuple[str, str, str], ...], str | None]],
    conversation_id: str,
    approvals: Mapping[str, bool | None],
) -> dict[CallKey, StoredCall]:
    """The harness tools' calls of one conversation's history (``Row``s), by
    (tool, tag); ``approvals`` maps call ids to their decisions."""
    results = {r[4]: r[2] for r in rows if r[1] == "tool"}
    found: dict[CallKey, StoredCall] = {}
    for _, _, _, calls, _ in rows:
        for call_id, name, arguments in calls:
            if name not in TOOLS:
                continue
            tag = json.loads(arguments).get("tag", "")
            found[(name, tag)] = StoredCall(
                conversation_id, call_id, results.get(call_id), approvals.get(call_id)
            )
    return found


def check_runs(
    runs: Mapping[CallKey, list[Run]],
    calls: Mapping[CallKey, StoredCall],
    killed: frozenset[int],
) -> tuple[list[str], RunFigures]:
    """The rules of the module docstring; the problems found and the figures."""
    problems: list[str] = []
    figures = RunFigures()
    for (tool, tag), done in sorted(runs.items()):
        figures.runs[tool] = figures.runs.get(tool, 0) + len(done)
        figures.most_runs_of_one_call = max(figures.most_runs_of_one_call, len(done))
        where = f"{tool} {tag}"
        if (tool, tag) not in calls:
            problems.append(f"{where}: ran {len(done)} time(s), but no history holds its call")
        pids = [r.pid for r in done]
        if len(set(pids)) != len(pids):
            problems.append(f"{where}: ran twice in one server process ({pids})")
        if tool not in IDEMPOTENT and len(done) > 1:
            problems.append(f"{where}: not idempotent, ran {len(done)} times ({pids})")
        if any(r.pid not in killed for r in done[:-1]):
            problems.append(f"{where}: ran again after a run in a process that was not killed")
        figures.ran_again += len(done) > 1
    for (tool, tag), call in sorted(calls.items()):
        done = runs.get((tool, tag), [])
        problems += _check_answer(f"{tool} {tag} ({call.call_id})", tool, call, done, killed)
        if call.result is not None:
            figures.answered_interrupted += call.result.startswith(INTERRUPTED)
            figures.denied += call.result.startswith("denied")
        figures.approved += call.approved is True
    return problems, figures


def _check_answer(
    where: str, tool: str, call: StoredCall, done: list[Run], killed: frozenset[int]
) -> list[str]:
    result = call.result
    if tool in NEEDS_APPROVAL and done and call.approved is not True:
        return [f"{where}: ran {len(done)} time(s) without being approved ({call.approved})"]
    if result is None:
        return [f"{where}: ran {len(done)} time(s) and has no result"] if done else []
    if result.startswith("worked "):
        if not any(r.ended for r in done):
            return [f"{where}: answered with the tool's output, but no run of it ended"]
        return []
    if result.startswith(INTERRUPTED):
        if tool in IDEMPOTENT:
            return [f"{where}: idempotent, yet answered {result!r} rather than run again"]
        if any(r.pid not in killed for r in done):
            return [f"{where}: answered interrupted, but it ran in a process not killed"]
        return []
    if result.startswith("denied"):
        if tool not in NEEDS_APPROVAL or call.approved is not False:
            return [f"{where}: answered {result!r} but was not denied ({call.approved})"]
        return [f"{where}: denied, yet ran {len(done)} time(s)"] if done else []
    return [f"{where}: an unexpected result {result!r}"]

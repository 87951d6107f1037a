"""The crash harness's tool-run checks can fail: each rule of ``crash_runs``
on a record that breaks it, and the side channel read back as written.

Hypothesis draws the history of one call across server processes (how many
times it ran, in which processes, which were killed, how it was answered);
the checks must flag it exactly when it breaks a rule, for every tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.reliability.crash_runs import (
    IDEMPOTENT,
    NEEDS_APPROVAL,
    Run,
    StoredCall,
    check_runs,
    read_runs,
)
from tests.reliability.crash_tools import RUNS_DIR, TOOLS, record_run

KILLED = frozenset({101, 102, 103})
ALIVE = 200
"""A process that was stopped, not killed (the last one of a run)."""
OUTPUT = "worked 5 ms on c000-1"


def call(result: str | None, approved: bool | None = None) -> StoredCall:
    return StoredCall("c000", "call_2", result, approved)


def problems(tool: str, runs: list[Run], stored: StoredCall | None) -> list[str]:
    calls = {} if stored is None else {(tool, "c000-1"): stored}
    found, _ = check_runs({(tool, "c000-1"): runs} if runs else {}, calls, KILLED)
    return found


class TestEachRuleCanFail:
    def test_a_clean_record_passes(self) -> None:
        assert problems("once_work", [Run(ALIVE, ended=True)], call(OUTPUT)) == []
        assert problems("fetch_work", [Run(101, False), Run(ALIVE, True)], call(OUTPUT)) == []
        assert problems("once_work", [Run(101, ended=False)], call("interrupted: x")) == []
        assert problems("approve_work", [], call("denied: no", approved=False)) == []

    @pytest.mark.parametrize(
        ("tool", "runs", "stored", "message"),
        [
            ("once_work", [Run(ALIVE, True)], None, "no history holds its call"),
            ("once_work", [Run(101, False), Run(ALIVE, True)], call(OUTPUT), "ran 2 times"),
            ("fetch_work", [Run(ALIVE, False), Run(ALIVE, True)], call(OUTPUT), "one server"),
            ("fetch_work", [Run(ALIVE, False), Run(101, True)], call(OUTPUT), "not killed"),
            ("fetch_work", [Run(101, False)], call("interrupted: x"), "rather than run again"),
            ("once_work", [Run(ALIVE, False)], call("interrupted: x"), "a process not killed"),
            ("once_work", [Run(101, ended=False)], call(OUTPUT), "no run of it ended"),
            ("approve_work", [Run(ALIVE, True)], call(OUTPUT, approved=None), "without being"),
            ("approve_work", [Run(ALIVE, True)], call("denied", approved=False), "without being"),
            ("once_work", [], call("denied"), "was not denied"),
            ("once_work", [Run(ALIVE, True)], call(None), "has no result"),
            ("once_work", [], call("error: boom"), "an unexpected result"),
        ],
    )
    def test_a_broken_record_is_flagged(
        self, tool: str, runs: list[Run], stored: StoredCall | None, message: str
    ) -> None:
        found = problems(tool, runs, stored)
        assert any(message in p for p in found), found


processes = st.sampled_from([*sorted(KILLED), ALIVE])


@settings(max_examples=300, deadline=None)
@given(
    tool=st.sampled_from(TOOLS),
    pids=st.lists(processes, max_size=4),
    ended=st.booleans(),
    answer=st.sampled_from(["output", "interrupted", "denied", "approved-output"]),
)
def test_flagged_exactly_when_a_rule_is_broken(
    tool: str, pids: list[int], ended: bool, answer: str
) -> None:
    """The rules, written out once more as a predicate, agree with the checks."""
    runs = [Run(pid, ended=ended or i < len(pids) - 1) for i, pid in enumerate(pids)]
    approved = None
    if tool in NEEDS_APPROVAL:
        approved = answer != "denied"
    result = {"denied": "denied: no", "interrupted": "interrupted: gone"}.get(answer, OUTPUT)
    found = problems(tool, runs, call(result, approved))
    broken = (
        len(set(pids)) != len(pids)
        or (tool not in IDEMPOTENT and len(pids) > 1)
        or any(pid not in KILLED for pid in pids[:-1])
        or (result == OUTPUT and not any(r.ended for r in runs))
        or (result.startswith("interrupted") and tool in IDEMPOTENT)
        or (result.startswith("interrupted") and any(pid not in KILLED for pid in pids))
        or (result.startswith("denied") and (tool not in NEEDS_APPROVAL or bool(pids)))
    )
    assert bool(found) == broken, (runs, result, found)


def test_the_side_channel_reads_back_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUNS_DIR, str(tmp_path))
    record_run("fetch_work", "start", "c001-4")
    record_run("fetch_work", "start", "c002-1")
    record_run("fetch_work", "end", "c002-1")
    record_run("once_work", "start", "c001-5")
    runs = read_runs(tmp_path)
    pid = runs[("fetch_work", "c001-4")][0].pid
    assert runs == {
        ("fetch_work", "c001-4"): [Run(pid, ended=False)],
        ("fetch_work", "c002-1"): [Run(pid, ended=True)],
        ("once_work", "c001-5"): [Run(pid, ended=False)],
    }

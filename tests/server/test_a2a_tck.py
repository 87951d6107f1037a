"""The official A2A TCK (``tests/kits/a2a-tck``, vendored: see its README)
against ``agentik serve``: categories mandatory, capabilities and quality,
over JSON-RPC, each run against a real server on 127.0.0.1 (a fresh SQLite
file each, port 0), as the kit's ``run_tck.py`` runs them (the same paths,
markers and options). Every failure must be listed in the kit's
``known-tck-issues.txt`` with its reason; a failure that is not fails here.
A listed test that passes is named in a warning (re-judge its entry).

The TCK runs in a virtual environment of its own (its pinned requirements
conflict with agentik's test dependencies): ``.tck-venv`` at the repository
root, which ``.ci/run`` makes from PyPI with the kit's ``constraints.txt``,
or the Python ``AGENTIK_TCK_PYTHON`` names. Without it the tests are skipped
*loudly* (a warning in every run's summary says why and what to run), and
under CI (``CI`` set) they fail instead.

The TCK's ListTasks tests wait 5 s for a task to be WORKING after a blocking
SendMessage (which A2A 1.0 answers only once the task is done: listed as
T-beh), so its listing file is split by class over a few servers run at the
same time; the whole TCK then takes about 30 s, mostly waiting.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import attrs
import pytest
import trio

from tests.reliability.test_crash import running_server

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "tests" / "kits" / "a2a-tck"
KNOWN = KIT / "known-tck-issues.txt"
MANDATORY = "mandatory or mandatory_protocol or mandatory_jsonrpc"
"""run_tck.py's markers for the mandatory category, with JSON-RPC's."""
LISTING = "tests/mandatory/protocol/test_tasks_list_method.py"
RUN_SECONDS = 300


def _python() -> Path | None:
    named = os.environ.get("AGENTIK_TCK_PYTHON")
    python = Path(named) if named else ROOT / ".tck-venv" / "bin" / "python"
    return python if python.exists() else None


def _missing() -> str | None:
    if not (KIT / "tests").is_dir():
        return f"the A2A TCK kit is not at {KIT}"
    if _python() is None:
        return (
            "the A2A TCK's virtual environment is missing: run `python3 -m venv .tck-venv &&"
            " .tck-venv/bin/pip install -c tests/kits/a2a-tck/constraints.txt"
            " -r tests/kits/a2a-tck/requirements.txt pyOpenSSL aiohttp` (as .ci/run does),"
            " or set AGENTIK_TCK_PYTHON"
        )
    return None


MISSING = _missing()
if MISSING is not None and not os.environ.get("CI"):
    warnings.warn(
        f"the A2A TCK tests (tests/server/test_a2a_tck.py) are skipped: {MISSING}",
        pytest.PytestWarning,
        stacklevel=1,
    )
    pytestmark = pytest.mark.skip(reason=MISSING)


@pytest.fixture(autouse=True)
def _required_under_ci() -> None:
    """CI makes the TCK's environment (``.ci/run``): missing there is a failure."""
    if MISSING is not None:
        pytest.fail(f"CI must run the A2A TCK: {MISSING}")


@attrs.frozen
class Invocation:
    """One pytest run of the TCK, as run_tck.py makes it for a category."""

    category: str
    args: tuple[str, ...]


def _mandatory(*selection: str) -> Invocation:
    return Invocation("mandatory", (*selection, "-m", MANDATORY))


SHARDS: tuple[tuple[Invocation, ...], ...] = (
    (
        _mandatory("tests/mandatory/", "--ignore", LISTING),
        Invocation("capabilities", ("tests/optional/capabilities/",)),
        Invocation("quality", ("tests/optional/quality/",)),
    ),
    (_mandatory(f"{LISTING}::TestBasicListing", f"{LISTING}::TestEdgeCasesAndErrors"),),
    (_mandatory(f"{LISTING}::TestFiltering"),),
    (_mandatory(f"{LISTING}::TestPagination"),),
    (_mandatory(f"{LISTING}::TestHistoryLimiting", f"{LISTING}::TestArtifactInclusion"),),
)
"""Run at the same time, each shard on a server of its own, its runs in order."""


@attrs.define
class Report:
    outcomes: dict[str, str] = attrs.Factory(dict)
    """Node id -> passed, failed, error, skipped, xfailed, xpassed."""
    crashes: dict[str, str] = attrs.Factory(dict)
    """Node id -> what a failing test said."""
    runs: list[tuple[Invocation, int, str]] = attrs.Factory(list)
    """Each run, its exit code and the tail of its output."""
    seconds: float = 0.0


def known_issues() -> dict[str, str]:
    """The listed node ids, each with its class and reason."""
    listed = {}
    for line in KNOWN.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            node_id, _, reason = line.partition(" ")
            listed[node_id] = reason.strip()
    return listed


async def _invoke(
    python: Path, url: str, invocation: Invocation, results: Path, report: Report
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "PYTEST_"))}
    env.update(PYTHONPATH=str(KIT / "shim"), PYTHONDONTWRITEBYTECODE="1")
    command = [
        str(python),
        "-m",
        "pytest",
        *invocation.args,
        f"--sut-url={url}",
        "--test-scope=all",
        "--tb=line",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "tck_a2a_version",
        "--json-report",
        f"--json-report-file={results}",
    ]
    done = await trio.run_process(
        command, cwd=KIT, env=env, capture_stdout=True, capture_stderr=True, check=False
    )
    output = (done.stdout + done.stderr).decode(errors="replace")
    report.runs.append((invocation, done.returncode, output[-3000:]))
    _record(results, invocation, report)


def _record(results: Path, invocation: Invocation, report: Report) -> None:
    """The outcomes pytest-json-report wrote for one run (none if it wrote nothing)."""
    if not results.exists():
        return
    data = json.loads(results.read_text())
    for collector in data.get("collectors", []):
        if collector.get("outcome") == "failed":
            node = collector.get("nodeid") or invocation.category
            report.outcomes[node] = "error"
            report.crashes[node] = str(collector.get("longrepr", ""))[-500:]
    for test in data.get("tests", []):
        node, outcome = test["nodeid"], test["outcome"]
        report.outcomes[node] = outcome
        if outcome in ("failed", "error"):
            stage = next(
                (test[s] for s in ("setup", "call", "teardown") if test.get(s, {}).get("crash")),
                {},
            )
            report.crashes[node] = str(stage.get("crash", {}).get("message", ""))[:500]


async def _run_all(python: Path, out: Path) -> Report:
    report = Report()
    began = time.monotonic()

    async def shard(n: int, invocations: tuple[Invocation, ...]) -> None:
        async with running_server(out / f"shard{n}.db", toolsets=(), tools=()) as server:
            assert server.url is not None
            # localhost, not 127.0.0.1: the card names the host the client used,
            # and the TCK reads a card naming a loopback address as a leak
            url = server.url.replace("127.0.0.1", "localhost") + "/a2a"
            for i, invocation in enumerate(invocations):
                await _invoke(python, url, invocation, out / f"shard{n}-{i}.json", report)

    with trio.fail_after(RUN_SECONDS):
        async with trio.open_nursery() as nursery:
            for n, invocations in enumerate(SHARDS):
                nursery.start_soon(shard, n, invocations)
    report.seconds = time.monotonic() - began
    return report


@pytest.fixture(scope="session")
def tck(tmp_path_factory: pytest.TempPathFactory) -> Report:
    python = _python()
    if python is None or MISSING is not None:
        pytest.fail(f"CI must run the A2A TCK: {MISSING}")
    out = tmp_path_factory.mktemp("a2a-tck")
    report = trio.run(_run_all, python, out)
    print(f"\nA2A TCK: {len(report.outcomes)} tests in {report.seconds:.0f} s", file=sys.stderr)
    listed = known_issues()
    stale = sorted(n for n in listed if report.outcomes.get(n) in ("passed", "xpassed"))
    if stale:
        warnings.warn(
            "listed in known-tck-issues.txt but passed (re-judge the entries): " + ", ".join(stale),
            pytest.PytestWarning,
            stacklevel=1,
        )
    return report


def test_the_tck_ran_every_category(tck: Report) -> None:
    """Every run collected its tests and ended with the TCK's verdict (pytest
    exit code 0, or 1 when tests failed); each category passed tests."""
    for invocation, code, output in tck.runs:
        assert code in (0, 1), f"{invocation.category} {invocation.args}: exit {code}\n{output}"
    assert len(tck.runs) == sum(len(shard) for shard in SHARDS)
    for category in ("mandatory", "capabilities", "quality"):
        passed = [
            node
            for node, outcome in tck.outcomes.items()
            if outcome == "passed" and node.startswith(_path_of(category))
        ]
        assert passed, f"no {category} test passed"


def _path_of(category: str) -> str:
    return "tests/mandatory/" if category == "mandatory" else f"tests/optional/{category}/"


def test_every_failure_is_a_known_tck_issue(tck: Report) -> None:
    """A failure that ``known-tck-issues.txt`` does not list is agentik's to fix
    (or to judge and list, with its reason)."""
    listed = known_issues()
    unknown = sorted(
        node
        for node, outcome in tck.outcomes.items()
        if outcome in ("failed", "error") and node not in listed
    )
    assert not unknown, "A2A TCK failures not in known-tck-issues.txt:\n" + "\n".join(
        f"{node}: {tck.crashes.get(node, '')}" for node in unknown
    )


def test_every_listed_issue_is_a_tck_test(tck: Report) -> None:
    """An entry naming no test the runs saw is stale (the TCK renamed it)."""
    missing = sorted(node for node in known_issues() if node not in tck.outcomes)
    assert not missing, f"known-tck-issues.txt lists tests the TCK no longer has: {missing}"

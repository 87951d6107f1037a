"""The pytest plugin as a user meets it: a separate pytest run in a fresh
directory, the plugin loaded by its ``pytest11`` entry point (no conftest),
running the examples of docs/testing.md and scenarios that must fail.

One subprocess for all of them (pytest's start-up is most of the cost);
outcomes are read from its JUnit XML report.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

DOCS = Path(__file__).parent.parent.parent / "docs" / "testing.md"

# Scenarios that must fail, and the message each must fail with.
FAILING = """
import pytest
from agentik import TurnError


async def test_unexpected_request_fails_at_teardown(agentik_agent, agentik_script):
    agentik_script.when_user_says("hello").answer("hi")
    with pytest.raises(TurnError):
        await agentik_agent.send("c", "something else")


async def test_step_past_the_script_fails(agentik_agent, agentik_script):
    agentik_script.when_user_says("hello").call("memory_add", {"text": "x"})
    with pytest.raises(TurnError):
        await agentik_agent.send("c", "hello")

"""

UNKNOWN_BACKEND = """
import pytest


@pytest.fixture
def agentik_backend():
    return "postgres"


async def test_an_unknown_backend_is_refused(agentik_storage):
    pass
"""

PASSING = """
import pytest


@pytest.mark.parametrize("agentik_backend", ["sqlite"])
async def test_sqlite_backend(agentik_agent, agentik_storage, agentik_script, tmp_path):
    agentik_script.when_user_says("hello").answer("hi")
    await agentik_agent.send("c", "hello")
    assert (tmp_path / "agentik.db").exists()
"""

EXPECTED_FAILURES = {
    "test_unexpected_request_fails_at_teardown": (
        "unexpected model request: nothing is scripted for the user saying 'something else'"
    ),
    "test_step_past_the_script_fails": (
        "unexpected model request: step 2 for the user saying 'hello', but the script has 1"
    ),
    "test_an_unknown_backend_is_refused": (
        "agentik_backend must be one of memory, sqlite, got 'postgres'"
    ),
}


def _doc_examples() -> dict[str, str]:
    """Each ```python block of docs/testing.md that starts with ``# test_….py``."""
    examples = {}
    for block in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S):
        name = re.match(r"# (test_\w+\.py)\n", block)
        if name:
            examples[name.group(1)] = block
    return examples


def test_docs_examples_pass_and_broken_scripts_fail(tmp_path: Path) -> None:
    """The documented examples pass; an unexpected request fails its test (at
    teardown, though the test caught the turn's error), as does a bad backend."""
    examples = _doc_examples()
    assert len(examples) >= 3, "docs/testing.md lost its examples"
    for name, code in examples.items():
        (tmp_path / name).write_text(code)
    (tmp_path / "test_failing.py").write_text(FAILING)
    (tmp_path / "test_passing.py").write_text(PASSING)
    (tmp_path / "test_unknown_backend.py").write_text(UNKNOWN_BACKEND)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    report = tmp_path / "report.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        name = case.get("name", "").split("[")[0]
        outcomes[name] = "passed" if problem is None else problem.get("message", "")
    passing = {n for n in outcomes if n not in EXPECTED_FAILURES}
    assert passing, done.stdout
    for name in passing:
        assert outcomes[name] == "passed", f"{name}: {outcomes[name]}\n{done.stdout}"
    for name, message in EXPECTED_FAILURES.items():
        assert message in outcomes[name], f"{name}: {outcomes[name]!r}\n{done.stdout}"
    assert done.returncode == 1

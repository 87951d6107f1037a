"""Fixtures every test package may use: the PostgreSQL server (see tests/postgres.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kits import summary_lines
from tests.postgres import postgres_server


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a PostgreSQL server for this test session (skips loudly, or
    fails under CI, when there is none)."""
    with postgres_server() as dsn:
        yield dsn


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in summary_lines(terminalreporter.stats.get("skipped", [])):
        terminalreporter.write_line(line, red=True, bold=True)

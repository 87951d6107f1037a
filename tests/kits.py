"""Tests that need a kit from outside Python (PostgreSQL, the npm packages of
``npm ci``, haproxy): when the kit is missing they skip *loudly* outside CI (the
reason is printed in red at the end of the run, so a green run cannot hide
that they did not run) and fail under CI (``CI`` set), where ``.ci/run``
installs every kit.

The README's test command (``pip install -e '.[test,dev]' && python -m
pytest``) must pass on a fresh machine with or without node: a test gated
here is the way a missing kit is allowed to show.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import NoReturn

import pytest

_SKIPPED = re.compile(r"(?:Skipped: )?(?P<what>.+?) tests skipped: (?P<reason>.+)", re.DOTALL)
"""The reason ``missing_kit`` skips with, as a skip report carries it."""


def under_ci() -> bool:
    """Whether this run is CI's (``.ci/run`` runs with ``CI=true``)."""
    return bool(os.environ.get("CI"))


def missing_kit(what: str, reason: str) -> NoReturn:
    """Skip the test (outside CI, noted for the summary) or fail it (under CI):
    ``what`` names the tests (``MCP conformance``), ``reason`` the missing kit
    and the command that installs it."""
    if under_ci():
        pytest.fail(f"CI must run the {what} tests: {reason}")
    pytest.skip(f"{what} tests skipped: {reason}")


def summary_lines(skipped: Iterable[pytest.TestReport]) -> list[str]:
    """One line per kit found missing, each once, from the run's skip reports
    (read from the reports, not from a list kept in this process: under
    pytest-xdist the skips happen in the workers)."""
    found: dict[tuple[str, str], None] = {}
    for report in skipped:
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            match = _SKIPPED.fullmatch(str(longrepr[2]))
            if match is not None:
                found[match["what"], match["reason"]] = None
    return [f"{what.upper()} TESTS SKIPPED: {reason}" for what, reason in found]

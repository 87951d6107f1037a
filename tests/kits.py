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
from typing import NoReturn

import pytest

MISSING: list[tuple[str, str]] = []
"""(what, why) for each kit found missing in this run, for the end-of-run summary."""


def under_ci() -> bool:
    """Whether this run is CI's (``.ci/run`` runs with ``CI=true``)."""
    return bool(os.environ.get("CI"))


def missing_kit(what: str, reason: str) -> NoReturn:
    """Skip the test (outside CI, noted for the summary) or fail it (under CI):
    ``what`` names the tests (``MCP conformance``), ``reason`` the missing kit
    and the command that installs it."""
    if under_ci():
        pytest.fail(f"CI must run the {what} tests: {reason}")
    MISSING.append((what, reason))
    pytest.skip(f"{what} tests skipped: {reason}")


def summary_lines() -> list[str]:
    """One line per kit found missing, each once."""
    return [f"{what.upper()} TESTS SKIPPED: {reason}" for what, reason in dict.fromkeys(MISSING)]

"""The pytest plugin (entry point ``pytest11: agentik``): fixtures for testing
code built on agentik under pytest-trio.

- ``agentik_script``: a fresh ``Script``; at teardown the test fails if the
  model got a request the script does not cover.
- ``agentik_backend``: ``"memory"`` (override it, e.g. with
  ``params=["memory", "sqlite"]``, to run a test on both backends).
- ``agentik_storage``: a fresh ``StorageBundle`` of that backend (SQLite in a
  file under ``tmp_path``, its writer task in the fixture).
- ``agentik_agent_options``: extra ``open_chat_agent`` arguments (``{}``;
  override it to add tools, toolsets, a system prompt …).
- ``agentik_agent``: a ``ChatAgent`` over the script's model and that storage.

Nothing here sleeps or reads the wall clock: a test that takes trio's
``autojump_clock`` drives turns, tool timeouts and toolset expiry on mock time.
Use the memory backend there: while SQLite's writer thread works, trio sees
every task blocked and the autojump clock jumps ahead.
The module imports only pytest at start-up: pytest loads it in every session of
an environment where agentik is installed, and agentik itself loads with the
first fixture used.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from agentik.agent import ChatAgent
    from agentik.storage import StorageBundle
    from agentik.testing._script import Script

BACKENDS = ("memory", "sqlite")


@pytest.fixture
def agentik_script() -> Iterator[Script]:
    """A fresh ``Script``; unexpected model requests fail the test at teardown."""
    from agentik.testing._script import Script

    script = Script()
    yield script
    if script.unexpected:
        pytest.fail("; ".join(script.unexpected), pytrace=False)


@pytest.fixture
def agentik_backend() -> str:
    """Which storage ``agentik_storage`` opens: ``memory`` or ``sqlite``."""
    return "memory"


@pytest.fixture
async def agentik_storage(agentik_backend: str, tmp_path: Path) -> AsyncIterator[StorageBundle]:
    """A fresh, empty storage bundle of ``agentik_backend``."""
    from agentik.storage import in_memory_storage, open_sqlite_storage

    if agentik_backend == "memory":
        yield in_memory_storage()
    elif agentik_backend == "sqlite":
        async with open_sqlite_storage(tmp_path / "agentik.db") as storage:
            yield storage
    else:
        raise ValueError(
            f"agentik_backend must be one of {', '.join(BACKENDS)}, got {agentik_backend!r}"
        )


@pytest.fixture
def agentik_agent_options() -> dict[str, object]:
    """Keyword arguments added to ``open_chat_agent`` by ``agentik_agent``."""
    return {}


@pytest.fixture
async def agentik_agent(
    agentik_script: Script,
    agentik_storage: StorageBundle,
    agentik_agent_options: dict[str, object],
) -> AsyncIterator[ChatAgent]:
    """A ``ChatAgent`` playing ``agentik_script`` over ``agentik_storage``."""
    from agentik.agent import open_chat_agent

    options = dict(agentik_agent_options)
    for taken in ("model", "storage"):
        if taken in options:
            raise ValueError(
                f"agentik_agent_options must not set {taken!r}: agentik_agent passes it"
            )
    async with open_chat_agent(
        model=agentik_script.model(),
        storage=agentik_storage,
        **options,  # type: ignore[arg-type]
    ) as agent:
        yield agent

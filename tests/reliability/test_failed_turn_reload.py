"""A turn whose last batch (its tool result and its answer) fails to commit is
told ``store_error``; it is over for this process: a reload of its
conversation in the same agent answers the call it left open and does not
resume it (the model is not asked to go on, no answer of it is stored).

Why it matters: the failure record cannot be written (the storage is
failing), so the stored turn looks interrupted; only the failure the agent
remembers in memory (``AgentRuntime.remember_failure``) tells a reload in
this process that the caller was told it failed. A reload comes from the
conversation's next request, or, racing the turn, from the resume pass the
agent runs as it opens (``_resume.py``): its listing may read the store
while the turn is under way, see it open, and queue a status request behind
it. That race is what made ``test_commit_fails_mid_turn`` fail about once in
a hundred runs under I/O load; here it is forced.

After a restart the turn is resumed (``test_commit_fails_mid_turn``): no
record says it failed, so it is taken for interrupted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from agentik import NamedTool, Role
from agentik.storage import Storage, StorageBundle, open_sqlite_storage
from tests.reliability.faulty_vfs import FAULTS, FaultyVFS
from tests.reliability.helpers import check_history, go_fails_then_next, history, shape
from tests.reliability.test_storage_faults import Model, agent

UNRECORDED = (
    "error: the turn failed before this call's result was stored; it may or may not have run"
)


@attrs.define
class ListingGate:
    """A message store that forwards everything to a real one, except that
    ``interrupted_conversations`` (the resume pass's listing) waits for
    ``opened`` before it reads, then sets ``listed``."""

    inner: object
    opened: trio.Event = attrs.Factory(trio.Event)
    listed: trio.Event = attrs.Factory(trio.Event)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def interrupted_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> list[str]:
        await self.opened.wait()
        found: list[str] = await self.inner.interrupted_conversations(  # type: ignore[attr-defined]
            after=after, limit=limit
        )
        self.listed.set()
        return found


def failing_probe(
    bundles: list[StorageBundle],
    faulty_vfs: FaultyVFS,
    fault: str,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> NamedTool:
    """A tool that, once the turn's user message and call are committed, runs
    ``meanwhile`` and arms the fault: the turn's next batch (the tool result
    and the answer) fails."""

    async def run_probe(arguments: dict[str, object]) -> str:
        # Writes commit in order: once this one is back, so are the turn's.
        # (Working memory: a message would make a conversation to resume.)
        await bundles[0].working_memory_store.append("barrier", "barrier")
        if meanwhile is not None:
            await meanwhile()
        faulty_vfs.fail = fault
        return "probed"

    return NamedTool("probe", "Probe.", {"type": "object"}, run_probe)


@pytest.mark.parametrize("fault", FAULTS)
async def test_next_request_does_not_resume_the_failed_turn(
    fault: str, faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    """The next request reloads the conversation: the failed turn's open call
    is answered, the model is asked only about the new message."""
    model = Model()
    bundles: list[StorageBundle] = []
    probe = failing_probe(bundles, faulty_vfs, fault)
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        bundles.append(bundle)
        async with agent(model, bundle, probe) as chat:
            await go_fails_then_next(chat, faulty_vfs.disarm, model.last_messages)
        final = await history(bundle, "c")
    check_history(final, once=("warmup", "next"))
    assert [shape(m)[:3] for m in final[2:]] == [
        (Role.USER, "go", None),
        (Role.ASSISTANT, "", None),
        (Role.TOOL, UNRECORDED, "call-1"),
        (Role.USER, "next", None),
        (Role.ASSISTANT, "answer to next", None),
    ]


@pytest.mark.parametrize("fault", FAULTS)
async def test_resume_pass_racing_the_turn_does_not_resume_it(
    fault: str, faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    """The resume pass lists the conversations while the turn runs (its call
    stored, no result yet), so it queues a status request behind the turn;
    when the turn fails, that request's reload answers the open call and
    does not resume the turn, and the next turn works."""
    model = Model()
    bundles: list[StorageBundle] = []
    gate: ListingGate

    async def let_the_pass_list() -> None:
        gate.opened.set()  # the listing now sees "c" with its call open
        await gate.listed.wait()
        # The pass routes its status request to "c" and waits for the reply.
        await trio.testing.wait_all_tasks_blocked()

    probe = failing_probe(bundles, faulty_vfs, fault, let_the_pass_list)
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        bundles.append(bundle)
        gate = ListingGate(bundle.message_store)
        gated = attrs.evolve(bundle, message_store=gate)
        assert isinstance(gated, Storage)
        async with agent(model, gated, probe) as chat:
            await go_fails_then_next(chat, faulty_vfs.disarm, model.last_messages)
        final = await history(bundle, "c")
    check_history(final, once=("warmup", "next"))
    assert [m.content for m in final if m.role is Role.TOOL] == [UNRECORDED]
    assert "done" not in [m.content for m in final]

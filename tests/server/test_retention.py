"""``[storage] retention_days``: conversations idle longer are deleted, in
batches, on the storage's clock; a conversation a turn used is kept; the task
stops with the server. MockClock drives the periods; the stores' clock is a
variable the test moves."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from agentik import Message, ModelResponse, Role, ScriptedModel, StoreError
from agentik.agent import open_chat_agent
from agentik.server import ConfigError, ServerConfig, load_config, serve_agentik
from agentik.server._retention import run_retention
from agentik.storage import StorageBundle, in_memory_storage

START = datetime(2026, 1, 1, tzinfo=UTC)


class Calendar:
    """A wall clock the test turns."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


async def test_idle_conversations_are_deleted_in_batches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calendar = Calendar()
    storage = in_memory_storage(clock=calendar)
    model = ScriptedModel(lambda r: ModelResponse(text="ok"))
    async with open_chat_agent(model=model, storage=storage, idle_timeout=5) as agent:
        for i in range(7):
            await agent.send(f"old-{i}", "hello")
        calendar.now = START + timedelta(days=20)
        await agent.send("recent", "hello")
        await agent.send("old-6", "back again")  # used again: not idle any more
        calendar.now = START + timedelta(days=31)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_retention(agent, 30, period=3600, batch=2, clock=calendar)
            )
            await trio.sleep(1)
            left = await storage.message_store.list_conversations()
            assert left == ["old-6", "recent"], left
            calendar.now = START + timedelta(days=51)
            await trio.sleep(3600)
            assert await storage.message_store.list_conversations() == []
            nursery.cancel_scope.cancel()
        result = await agent.send("old-0", "new life")
        assert [m.seq for m in result.messages] == [1, 2]


class _FailingDeletes:
    """The in-memory message store, but its deletes fail while ``failing``."""

    def __init__(self, inner: object) -> None:
        self._inner = inner
        self.failing = True

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def delete_conversation(self, conversation_id: str, **kwargs: object) -> bool:
        if self.failing:
            raise StoreError(f"disk full deleting {conversation_id!r}")
        result = await self._inner.delete_conversation(conversation_id, **kwargs)  # type: ignore[attr-defined]
        assert isinstance(result, bool)
        return result


async def test_a_failing_batch_is_logged_and_retried_next_period(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Deletes that fail (an exception group from the batch's concurrent
    deletes; how many fail before the first cancels the rest varies) stop
    this period's pass with a warning, not the task: the next period deletes
    them."""
    calendar = Calendar()
    bundle = in_memory_storage(clock=calendar)
    store = _FailingDeletes(bundle.message_store)
    storage = attrs.evolve(bundle, message_store=store)
    model = ScriptedModel(lambda r: ModelResponse(text="ok"))
    async with open_chat_agent(model=model, storage=storage, idle_timeout=5) as agent:
        for i in range(3):
            await agent.send(f"old-{i}", "hello")
        calendar.now = START + timedelta(days=31)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_retention(agent, 30, period=3600, batch=10, clock=calendar)
            )
            with caplog.at_level(logging.WARNING, logger="agentik.server"):
                await trio.sleep(1)
            assert len(await bundle.message_store.list_conversations()) == 3
            (warning,) = [r for r in caplog.records if r.name == "agentik.server"]
            assert "retention stopped until the next period" in warning.getMessage()
            assert "disk full deleting 'old-" in warning.getMessage()
            store.failing = False
            await trio.sleep(3600)
            assert await bundle.message_store.list_conversations() == []
            nursery.cancel_scope.cancel()


def test_retention_days_is_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text("[storage]\nretention_days = 30\n", encoding="utf-8")
    assert load_config(path, env={}).retention_days == 30.0
    assert load_config(None, env={"AGENTIK_RETENTION_DAYS": "0.5"}).retention_days == 0.5
    assert load_config(None, env={}).retention_days is None
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(ConfigError, match="retention_days must be a positive number"):
            load_config(None, env={"AGENTIK_RETENTION_DAYS": bad})


async def test_the_server_runs_retention_and_stops_it(tmp_path: Path) -> None:
    """serve_agentik with retention_days deletes what was idle at start-up, and
    shuts down promptly (the retention task does not hold the nursery). Real
    sockets, so real time: the first pass runs at once, polled briefly."""
    calendar = Calendar()
    storage = in_memory_storage(clock=calendar)
    # Finished turns: an unfinished one would be resumed at start (a new message).
    await storage.message_store.append("stale", Message(Role.USER, "old"))
    await storage.message_store.append("stale", Message(Role.ASSISTANT, "ok"))
    calendar.now = START + timedelta(days=10)
    config = attrs.evolve(ServerConfig(port=0, database=str(tmp_path / "x.db")), retention_days=2.0)
    stop = trio.Event()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve_agentik(
                    config,
                    storage=storage,
                    model=ScriptedModel(lambda r: ModelResponse(text="ok")),
                    shutdown_trigger=stop.wait,
                    task_status=task_status,
                )
            )
            # The store has no event to wait on: poll it (real time, bounded above).
            while await storage.message_store.list_conversations():  # noqa: ASYNC110
                await trio.sleep(0.01)
            stop.set()


class _CannotDelete:
    """A seed message store (a third-party one, in a plain ``StorageBundle``),
    without the full protocol's lifecycle methods: every other attribute is
    the in-memory store's."""

    _HIDDEN = frozenset(
        {"delete_conversation", "idle_conversations", "export_conversation", "import_conversation"}
    )

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name in self._HIDDEN:
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_storage_that_cannot_delete_is_refused_clearly(tmp_path: Path) -> None:
    """retention_days on such storage: the server starts (a warning, no task);
    DELETE and export answer 501, not a 500 from a TypeError."""
    import httpx2

    bundle = in_memory_storage()
    storage = StorageBundle(
        _CannotDelete(bundle.message_store),  # type: ignore[arg-type]
        bundle.working_memory_store,
        bundle.reflection_store,
        bundle.skill_store,
    )
    config = attrs.evolve(ServerConfig(port=0, database=str(tmp_path / "x.db")), retention_days=1.0)
    stop = trio.Event()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve_agentik(
                    config,
                    storage=storage,
                    model=ScriptedModel(lambda r: ModelResponse(text="ok")),
                    shutdown_trigger=stop.wait,
                    task_status=task_status,
                )
            )
            async with httpx2.AsyncClient(base_url=url) as client:
                turn = await client.post("/agentik/conversations/c/turns", json={"text": "hi"})
                assert turn.status_code == 200, turn.text
                deleted = await client.delete("/agentik/conversations/c")
                exported = await client.get("/agentik/conversations/c/export")
            stop.set()
    assert (deleted.status_code, deleted.json()["error"]["code"]) == (501, "not_supported")
    assert exported.status_code == 501


async def test_the_server_runs_retention_on_postgres(postgres_dsn: str) -> None:
    """The same on a PostgreSQL bundle (its store deletes conversations): what was
    idle at start-up is deleted, what is recent stays. Real time, as above."""
    from agentik.storage import open_postgres_storage
    from tests.postgres import fresh_schema

    calendar = Calendar()
    calendar.now = datetime.now(UTC) - timedelta(days=10)  # the server's cutoff is wall time
    config = attrs.evolve(ServerConfig(port=0, database="unused.db"), retention_days=2.0)
    stop = trio.Event()
    async with open_postgres_storage(
        postgres_dsn, schema=fresh_schema(), readers=1, clock=calendar
    ) as storage:
        # Finished turns: an unfinished one would be resumed at start (a new message).
        await storage.message_store.append("stale", Message(Role.USER, "old"))
        await storage.message_store.append("stale", Message(Role.ASSISTANT, "ok"))
        calendar.now = datetime.now(UTC)
        await storage.message_store.append("fresh", Message(Role.USER, "new"))
        await storage.message_store.append("fresh", Message(Role.ASSISTANT, "ok"))
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    lambda task_status: serve_agentik(
                        config,
                        storage=storage,
                        model=ScriptedModel(lambda r: ModelResponse(text="ok")),
                        shutdown_trigger=stop.wait,
                        task_status=task_status,
                    )
                )
                # Polled: the store has no event to wait on (bounded above).
                while await storage.message_store.list_conversations() != ["fresh"]:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                stop.set()

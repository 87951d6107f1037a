"""Shard leases between nodes sharing one PostgreSQL database, in one
process: bundles opened with ``lease_seconds`` are nodes, each with an agent.
Real PostgreSQL; the lease's own timing is real time (it is judged by the
database's clock), kept short and bounded. Few shards (``SHARDS``), so a
test can find a conversation in any node's shards."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import psycopg
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import Message, ModelRequest, ModelResponse, Role, StoreError, ToolCall, TurnError
from agentik.agent import ChatAgent, open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import (
    NotOwnedError,
    StorageBundle,
    open_postgres_storage,
    shard_of,
)
from agentik.storage.postgres import _lease_sql, _lease_upkeep
from agentik.storage.postgres._leases import NodeLease
from agentik.storage.postgres._migrate import migrations
from agentik.toolsets import tool
from tests.postgres import fresh_schema

SHARDS = 8


def echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"echo {request.messages[-1].content}")


@asynccontextmanager
async def storage(
    dsn: str, schema: str, url: str, lease: float = 60.0, shards: int = SHARDS
) -> AsyncIterator[StorageBundle]:
    async with open_postgres_storage(
        dsn, schema=schema, readers=1, lease_seconds=lease, advertise_url=url, shards=shards
    ) as bundle:
        yield bundle


@asynccontextmanager
async def node(
    dsn: str, schema: str, url: str, lease: float = 60.0
) -> AsyncIterator[tuple[StorageBundle, ChatAgent]]:
    async with storage(dsn, schema, url, lease) as bundle:
        async with open_chat_agent(model=ScriptedModel(echo), storage=bundle) as agent:
            yield bundle, agent


def lease_of(bundle: StorageBundle) -> NodeLease:
    assert isinstance(bundle.ownership, NodeLease)
    return bundle.ownership


def in_shards(shards: frozenset[int], prefix: str = "c") -> str:
    """A conversation id in one of ``shards``."""
    for i in range(10_000):
        conversation = f"{prefix}{i}"
        if shard_of(conversation, SHARDS) in shards:
            return conversation
    raise AssertionError(f"no id in shards {sorted(shards)}")


async def balanced(*bundles: StorageBundle) -> None:
    """Until the nodes hold an even spread of every shard, nothing handed off."""
    leases = [lease_of(b) for b in bundles]
    share = math.ceil(SHARDS / len(leases))
    with trio.fail_after(15):
        while True:
            held = [lease.held_shards() for lease in leases]
            if (
                sum(len(h) for h in held) == SHARDS
                and all(len(h) <= share for h in held)
                and not any(lease.releasing_shards() for lease in leases)
            ):
                return
            await trio.sleep(0.05)


def expire(dsn: str, schema: str, node_id: str) -> None:
    """What a node that stopped renewing looks like once its lease ran out."""
    with psycopg.connect(dsn) as connection:
        connection.execute(
            f"UPDATE {schema}.agentik_node SET expires_at = clock_timestamp() - interval '1 s'"
            " WHERE node_id = %s",
            (node_id,),
        )


async def contents(bundle: StorageBundle, conversation_id: str) -> list[str]:
    return [m.content async for m in bundle.message_store.get_messages(conversation_id)]


@given(st.text(max_size=40), st.integers(min_value=1, max_value=65_536))
def test_a_conversations_shard_is_a_stable_hash_of_its_id(conversation: str, shards: int) -> None:
    """The shard is crc32 of the UTF-8 id, the same in every process and
    Python version (never ``hash()``, which is salted per process)."""
    import zlib

    expected = zlib.crc32(conversation.encode("utf-8", "surrogatepass")) % shards
    assert shard_of(conversation, shards) == expected
    assert 0 <= expected < shards


def test_known_shards_do_not_change() -> None:
    """Pinned values: changing the hash would move every conversation."""
    assert [shard_of(c, 256) for c in ("", "a", "conversation-1", "日本")] == [0, 67, 252, 204]


async def test_the_shard_count_is_fixed_once_set(postgres_dsn: str) -> None:
    """Fixed by the first node (an open with a lease); an open without one
    (a CLI command, a lone process) neither sets nor checks it."""
    schema = fresh_schema()
    async with open_postgres_storage(postgres_dsn, schema=schema, readers=1, shards=16):
        pass  # no lease: sets nothing
    async with storage(postgres_dsn, schema, "http://a"):
        pass
    async with open_postgres_storage(postgres_dsn, schema=schema, readers=1):
        pass  # no lease, the default 256: not refused
    with pytest.raises(StoreError, match=r"^shards is 16, but the database at .* split into 8"):
        async with storage(postgres_dsn, schema, "http://a", shards=16):
            pass
    async with storage(postgres_dsn, schema, "http://a") as again:  # unchanged
        assert len(lease_of(again).held_shards()) == SHARDS


async def test_a_conversation_runs_on_its_shard_holder_only(postgres_dsn: str) -> None:
    """Each node holds half the shards; a conversation runs on the holder of
    its shard; the other is told where it lives (NotOwnedError with the
    holder's URL) and cannot write its messages even through the store."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a") as (a, agent_a):
        async with node(postgres_dsn, schema, "http://b") as (b, agent_b):
            await balanced(a, b)
            x = in_shards(lease_of(a).held_shards())
            y = in_shards(lease_of(b).held_shards())
            assert (await agent_a.send(x, "hi")).text == "echo hi"
            with pytest.raises(NotOwnedError) as refused:
                await agent_b.send(x, "hello")
            assert refused.value.owner_url == "http://a"
            with pytest.raises(StoreError, match=rf"^conversation '{x}' is not owned by this node"):
                await b.message_store.append(x, Message(Role.USER, "sneaked in"))
            assert (await agent_b.send(y, "other")).text == "echo other"
            assert (await agent_a.send(x, "again")).messages[0].seq == 3
        assert await contents(a, x) == ["hi", "echo hi", "again", "echo again"]


async def test_three_nodes_spread_the_shards_evenly_and_close_up_when_one_leaves(
    postgres_dsn: str,
) -> None:
    schema = fresh_schema()
    async with storage(postgres_dsn, schema, "http://a") as a:
        assert lease_of(a).held_shards() == frozenset(range(SHARDS))
        async with storage(postgres_dsn, schema, "http://b") as b:
            async with storage(postgres_dsn, schema, "http://c") as c:
                await balanced(a, b, c)
                assert sorted(len(lease_of(n).held_shards()) for n in (a, b, c)) == [2, 3, 3]
            await balanced(a, b)  # c released its shards as it stopped: taken in seconds
        await balanced(a)


async def test_an_expired_holder_is_taken_over_and_fenced(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node A's lease runs out (it stopped renewing: its rounds do nothing
    from here on, its row is expired by hand, and its 60 s lease keeps it
    from noticing): B takes A's shards, and A's writes are refused by the
    database although A still believes it owns them."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a") as (a, agent_a):
        async with node(postgres_dsn, schema, "http://b") as (_, agent_b):
            x = in_shards(lease_of(a).held_shards())
            await agent_a.send(x, "one")

            async def frozen() -> None:
                await trio.sleep_forever()

            monkeypatch.setattr(lease_of(a), "round", frozen)
            await trio.to_thread.run_sync(expire, postgres_dsn, schema, lease_of(a).node_id)
            with trio.fail_after(10):
                while True:
                    try:
                        reply = await agent_b.send(x, "two")
                        break
                    except NotOwnedError:
                        await trio.sleep(0.05)
            assert reply.messages[0].seq == 3
            assert lease_of(a).owns(x), "A has not noticed"
            with pytest.raises(StoreError, match=rf"^conversation '{x}' is not owned"):
                await a.message_store.append(x, Message(Role.USER, "late"))


def bump_generation(dsn: str, schema: str, shard: int) -> None:
    """The shard moved away and back behind the node's back: a new generation."""
    with psycopg.connect(dsn) as connection:
        connection.execute(
            f"UPDATE {schema}.agentik_shard SET generation = generation + 1 WHERE shard = %s",
            (shard,),
        )


async def test_a_write_with_a_stale_generation_is_refused_and_nothing_commits(
    postgres_dsn: str,
) -> None:
    """The writer checks each shard's generation (the fencing token) in the
    batch's transaction: a node whose hold is of an older generation writes
    nothing, not even the parts of a turn that came first."""
    schema = fresh_schema()
    async with storage(postgres_dsn, schema, "http://a") as a:
        store = a.message_store
        x = in_shards(frozenset({3}))
        await store.append(x, Message(Role.USER, "before"))
        await trio.to_thread.run_sync(bump_generation, postgres_dsn, schema, 3)
        with pytest.raises(StoreError, match=rf"^conversation '{x}' is not owned by this node"):
            await store.append(x, Message(Role.USER, "stale"))
        with pytest.raises(StoreError, match=rf"^conversation '{x}' is not owned by this node"):
            await (await store.submit_turn_failure(x, 1, "cancelled")).wait()
        other = in_shards(frozenset({4}))
        await store.append(other, Message(Role.USER, "fine"))  # other shards unaffected
        assert await contents(a, x) == ["before"]
        record = await store.turn_record(x, 1)
        assert record.failure is None


async def test_a_node_that_finds_its_lease_expired_drops_everything_and_rejoins(
    postgres_dsn: str,
) -> None:
    """Its next round finds the row expired: the agent's conversations are
    dropped, the node joins under a new id, and a conversation of a shard
    now B's is refused to it."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a", lease=1) as (a, agent_a):
        x = in_shards(lease_of(a).held_shards())
        await agent_a.send(x, "one")
        lost = trio.Event()
        lease_of(a).on_lost(lost.set)
        old = lease_of(a).node_id
        await trio.to_thread.run_sync(expire, postgres_dsn, schema, old)
        async with node(postgres_dsn, schema, "http://b") as (b, agent_b):
            with trio.fail_after(10):
                await lost.wait()
            assert agent_a.live_conversations == 0
            assert not lease_of(a).owns(x)
            await balanced(a, b)
            x = in_shards(lease_of(b).held_shards())
            await agent_b.send(x, "two")
            assert lease_of(a).node_id != old
            with pytest.raises(NotOwnedError):
                await agent_a.send(x, "three")


async def test_a_hanging_renewal_still_gives_everything_up_in_time(postgres_dsn: str) -> None:
    """A's renewal cannot go through (another transaction holds A's node
    row): the watchdog gives every shard up when A's lease runs out
    locally, before the database could let another node take over, and A
    refuses turns meanwhile."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a", lease=1) as (a, agent_a):
        x = in_shards(lease_of(a).held_shards())
        await agent_a.send(x, "one")
        lost = trio.Event()
        lease_of(a).on_lost(lost.set)
        with psycopg.connect(postgres_dsn) as blocker:
            blocker.execute(
                f"SELECT 1 FROM {schema}.agentik_node WHERE node_id = %s FOR UPDATE",
                (lease_of(a).node_id,),
            )
            began = trio.current_time()
            with trio.fail_after(5):
                await lost.wait()
            assert trio.current_time() - began < 1.0, "lost after the lease, not before"
            assert agent_a.live_conversations == 0
            with pytest.raises(StoreError, match=r"lease has lapsed"):
                await agent_a.send(x, "two")


async def test_a_node_whose_event_loop_stalls_keeps_its_lease(postgres_dsn: str) -> None:
    """The event loop blocked for more than twice the lease (a thousand
    requests at once, a long collection, an overloaded machine): no round and
    no watchdog runs meanwhile, but the node's row is renewed from a thread of
    its own, so once the loop runs again the node still holds its lease, its
    node id and its shards, and has lost nothing. (With the rounds alone the
    lease lapsed, the node dropped every conversation and rejoined.)"""
    schema = fresh_schema()
    async with storage(postgres_dsn, schema, "http://a", lease=1) as bundle:
        lease = lease_of(bundle)
        node_id, held = lease.node_id, lease.held_shards()
        assert held
        lost: list[bool] = []
        lease.on_lost(lambda: lost.append(True))
        await trio.sleep(0.1)  # the node's rounds have started
        time.sleep(2.5)  # noqa: ASYNC251 (the point: the loop is stuck)
        await trio.sleep(0.5)  # the loop's watchdog and a round run
        assert lost == []
        assert lease.node_id == node_id
        assert lease.held_shards() == held
        assert lease.lease_state().valid


def hold_every_shard(dsn: str, schema: str) -> psycopg.Connection:
    """A session holding every shard row's lock in an open transaction, as
    the writer of a node frozen mid-batch (SIGSTOP) would."""
    connection = psycopg.connect(dsn)
    connection.execute(f"SELECT shard FROM {schema}.agentik_shard FOR SHARE")
    return connection


async def test_a_round_is_not_delayed_by_a_session_holding_shard_locks(postgres_dsn: str) -> None:
    """A frozen node's writer holds its shards' rows locked; its lease
    expires. A healthy node's rounds skip the locked shards instead of
    waiting for them, so its own renewals go on; it takes them once the
    locks are gone."""
    schema = fresh_schema()
    async with storage(postgres_dsn, schema, "http://first") as first:
        await lease_of(first).leave()  # the schema and its shards exist; no node live
    async with bare_leases(postgres_dsn, schema) as make:
        frozen = await make("http://frozen")  # holds every shard, then renews no more
        assert frozen.held_shards() == frozenset(range(SHARDS))
        async with storage(postgres_dsn, schema, "http://a") as a:
            blocker = await trio.to_thread.run_sync(hold_every_shard, postgres_dsn, schema)
            try:
                await trio.to_thread.run_sync(expire, postgres_dsn, schema, frozen.node_id)
                began = trio.current_time()
                await lease_of(a).round()
                assert trio.current_time() - began < 2.0  # a loaded machine: no lock wait
                assert lease_of(a).lease_state().valid
                assert lease_of(a).held_shards() == frozenset()
            finally:
                await trio.to_thread.run_sync(blocker.rollback)  # its locks go with the answer
                await trio.to_thread.run_sync(blocker.close)
            await lease_of(a).round()
            assert lease_of(a).held_shards() == frozenset(range(SHARDS))


@asynccontextmanager
async def bare_leases(
    dsn: str, schema: str
) -> AsyncIterator[Callable[[str], Awaitable[NodeLease]]]:
    """Node leases driven by the test alone: joined, with no rounds of their own."""
    from functools import partial

    from agentik.storage.postgres._connect import connect
    from agentik.storage.postgres._watchdog import Watchdog

    watchdog = Watchdog()
    connect_lease = partial(
        connect, dsn, schema=schema, role="lease", timeout=10, watchdog=watchdog
    )
    made: list[NodeLease] = []

    async def make(url: str) -> NodeLease:
        lease = NodeLease(connect_lease, 60, url, watchdog=watchdog, shards=SHARDS)
        await lease.join()
        made.append(lease)
        return lease

    try:
        yield make
    finally:
        for lease in made:
            await lease.leave()


async def test_a_node_that_lost_the_shard_starts_no_model_call(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two shards, a turn running a long tool in each; B joins and A must
    hand one off although its turn runs longer than a hand-off may wait. B
    takes it. When the tools return, A asks the model again only for the
    turn whose shard it kept (the check before each call); the other turn
    ends interrupted, not failed, so B may resume it."""
    monkeypatch.setattr(_lease_upkeep, "RELEASE_WAIT", 0.3)
    schema = fresh_schema()
    calls: list[str] = []
    finish = trio.Event()
    running: list[str] = []

    @tool
    async def slow() -> str:
        """Runs until the test lets it finish."""
        running.append("one")
        await finish.wait()
        return "done"

    def model(request: ModelRequest) -> ModelResponse:
        text = request.messages[1].content  # after the system prompt: the user's
        calls.append(text)
        if calls.count(text) == 1:
            return ModelResponse(tool_calls=(ToolCall("t1", "slow", "{}"),))
        return ModelResponse(text="after the tool")

    outcomes: dict[str, object] = {}
    async with storage(postgres_dsn, schema, "http://a", shards=2) as a:
        async with open_chat_agent(model=ScriptedModel(model), storage=a, tools=[slow]) as agent:
            ids = {
                shard: next(f"c{i}" for i in range(99) if shard_of(f"c{i}", 2) == shard)
                for shard in (0, 1)
            }

            async def send(conversation: str) -> None:
                try:
                    outcomes[conversation] = (await agent.send(conversation, conversation)).text
                except TurnError as error:
                    outcomes[conversation] = error.code

            async with trio.open_nursery() as nursery:
                for conversation in ids.values():
                    nursery.start_soon(send, conversation)
                with trio.fail_after(10):
                    while len(running) < 2:  # noqa: ASYNC110 (the tools' own progress)
                        await trio.sleep(0.01)
                async with storage(postgres_dsn, schema, "http://b", shards=2) as b:
                    with trio.fail_after(10):
                        while not lease_of(b).held_shards():  # noqa: ASYNC110 (real leases)
                            await trio.sleep(0.05)
                    (moved,) = lease_of(b).held_shards()
                    finish.set()
    kept = ids[1 - moved]
    assert outcomes == {kept: "after the tool", ids[moved]: "interrupted"}
    assert calls.count(ids[moved]) == 1, "a model call started on a node that lost the shard"
    async with storage(postgres_dsn, schema, "http://c", shards=2) as c:
        record = await c.message_store.turn_record(ids[moved], 1)
    assert record.failure is None, "a node that lost the shard must not mark the turn failed"


async def test_a_node_that_takes_a_shard_resumes_its_interrupted_turns_at_once(
    postgres_dsn: str,
) -> None:
    """A holds every shard and dies with a turn interrupted (a user message
    without an answer); B, already running, takes the shards at its next
    round and resumes the turn without any request for it."""
    schema = fresh_schema()
    async with storage(postgres_dsn, schema, "http://a") as a:
        x = in_shards(lease_of(a).held_shards())
        await a.message_store.append(x, Message(Role.USER, "work"))
        async with node(postgres_dsn, schema, "http://b") as (b, agent_b):
            assert not lease_of(b).owns(x)
            await trio.sleep(0.3)
            assert await contents(b, x) == ["work"], "resumed before B held the shard"
            await trio.to_thread.run_sync(expire, postgres_dsn, schema, lease_of(a).node_id)
            with trio.fail_after(10):
                while await contents(b, x) != ["work", "echo work"]:  # noqa: ASYNC110 (real leases)
                    await trio.sleep(0.05)
            assert agent_b.stats.turns_resumed == 1


async def test_a_joining_node_gets_a_shard_once_its_running_turn_finishes(
    postgres_dsn: str,
) -> None:
    """Two shards, a turn running in each on A; B joins and A hands one off:
    a new turn in the shard being handed off is refused (NotOwnedError
    without a URL: retry), the running turn finishes on A, and only then
    does B take the shard."""
    schema = fresh_schema()
    release = trio.Event()
    started: list[str] = []

    class Slow:
        async def complete(self, request: ModelRequest) -> ModelResponse:
            started.append(request.messages[-1].content)
            await release.wait()
            return ModelResponse(text="slow answer")

    def in_shard(shard: int, prefix: str = "c") -> str:
        return next(f"{prefix}{i}" for i in range(99) if shard_of(f"{prefix}{i}", 2) == shard)

    async with storage(postgres_dsn, schema, "http://a", shards=2) as a:
        async with open_chat_agent(model=Slow(), storage=a) as agent_a:
            lease_a = lease_of(a)
            async with trio.open_nursery() as nursery:
                for shard in (0, 1):
                    nursery.start_soon(agent_a.send, in_shard(shard), "long")
                with trio.fail_after(10):
                    while len(started) < 2:  # noqa: ASYNC110 (the model's own progress)
                        await trio.sleep(0.01)
                async with storage(postgres_dsn, schema, "http://b", shards=2) as b:
                    with trio.fail_after(10):
                        while not lease_a.releasing_shards():  # noqa: ASYNC110 (real leases)
                            await trio.sleep(0.05)
                    (moving,) = lease_a.releasing_shards()
                    with pytest.raises(NotOwnedError) as refused:
                        await agent_a.send(in_shard(moving, "n"), "new")
                    assert refused.value.owner_url == ""
                    await trio.sleep(0.5)
                    assert moving in lease_a.held_shards(), "handed off with a turn running"
                    assert not lease_of(b).held_shards()
                    release.set()
                    with trio.fail_after(10):
                        while lease_of(b).held_shards() != {moving}:  # noqa: ASYNC110
                            await trio.sleep(0.05)
            assert await contents(a, in_shard(moving)) == ["long", "slow answer"]


def owners_now(leases: list[NodeLease]) -> dict[int, list[str]]:
    held: dict[int, list[str]] = {}
    for lease in leases:
        for shard in lease.held_shards():
            held.setdefault(shard, []).append(lease.node_id)
    return held


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.sampled_from(["join", "leave", "expire", "round"]), max_size=12))
async def test_shards_converge_and_never_have_two_holders(
    postgres_dsn: str, steps: list[str]
) -> None:
    """Any sequence of joins, clean leaves, expiries (a node that stopped
    renewing, its local lease run out too) and rounds: no shard is held by
    two nodes whose leases are valid at any point, and rounds bring the
    live nodes to an even spread of every shard."""
    schema = fresh_schema()
    async with storage(postgres_dsn, schema, "http://first") as first:
        await lease_of(first).leave()  # the schema and its shards exist; no node live
    live: list[NodeLease] = []

    def check() -> None:
        for shard, holders in owners_now(live).items():
            assert len(holders) == 1, (shard, holders)

    async with bare_leases(postgres_dsn, schema) as make:
        for step in [*steps, "join"]:
            if step == "join" or not live:
                live.append(await make(f"http://n{len(live)}"))
            elif step == "leave":
                await live.pop(0).leave()
            elif step == "expire":
                gone = live.pop(0)
                await trio.to_thread.run_sync(expire, postgres_dsn, schema, gone.node_id)
                gone._lose()  # its own clock says so too
            else:
                for lease in live:
                    await lease.round()
            check()
        for _ in range(4):  # live counts settle, hand-offs finish, free shards are taken
            for lease in live:
                await lease.round()
                check()
        held = owners_now(live)
        assert sorted(held) == list(range(SHARDS))
        share = math.ceil(SHARDS / len(live))
        assert all(len(lease.held_shards()) <= share for lease in live)


def at_version_5(dsn: str, schema: str, conversations: list[str]) -> None:
    """A database from before shards: messages, and conversation_owner rows
    naming a node that was live when it stopped."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
        connection.execute(f"SET search_path TO {schema}")
        connection.execute(
            "CREATE TABLE agentik_schema_version ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, step in migrations()[:5]:
            connection.execute(step.encode())
            connection.execute("INSERT INTO agentik_schema_version VALUES (%s)", (version,))
        connection.execute(
            "INSERT INTO agentik_node (node_id, url, expires_at)"
            " VALUES ('old', 'http://old', clock_timestamp() - interval '1 s')"
        )
        for conversation in conversations:
            connection.execute(
                "INSERT INTO message (conversation_id, seq, role, content, created_at)"
                " VALUES (%s, 1, 'user', %s, now())",
                (conversation.encode(), b"from before"),
            )
            connection.execute(
                "INSERT INTO conversation_owner (conversation_id, node_id) VALUES (%s, 'old')",
                (conversation.encode(),),
            )


async def test_a_database_from_before_shards_migrates_with_its_conversations(
    postgres_dsn: str,
) -> None:
    """Version 5 had a claim per conversation: the upgrade drops the claims
    (ownership is by shard now), keeps every message, and the node that
    opens it owns and writes those conversations on from their last seq."""
    schema = fresh_schema()
    conversations = [f"old-{i}" for i in range(20)]
    await trio.to_thread.run_sync(at_version_5, postgres_dsn, schema, conversations)
    async with storage(postgres_dsn, schema, "http://a") as a:
        for conversation in conversations:
            assert lease_of(a).owns(conversation)
            stored = await a.message_store.append(conversation, Message(Role.USER, "after"))
            assert stored.seq == 2
            assert await contents(a, conversation) == ["from before", "after"]

    def tables() -> set[str]:
        with psycopg.connect(postgres_dsn) as connection:
            rows = connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
        return {str(row[0]) for row in rows}

    assert "conversation_owner" not in await trio.to_thread.run_sync(tables)


async def test_a_node_resumes_at_start_only_the_interrupted_turns_it_can_own(
    postgres_dsn: str,
) -> None:
    """A and B hold half the shards each, with an interrupted turn in each
    half. An agent opening on B resumes B's at once and leaves A's alone
    while A lives; once A stops, B takes its shards and resumes that one
    too, without a request."""
    schema = fresh_schema()
    work = Message(Role.USER, "work")
    stop_a = trio.Event()

    async def run_a(task_status: trio.TaskStatus[StorageBundle]) -> None:
        async with storage(postgres_dsn, schema, "http://a") as a:
            task_status.started(a)
            await stop_a.wait()

    async with trio.open_nursery() as nursery:
        a: StorageBundle = await nursery.start(run_a)
        async with storage(postgres_dsn, schema, "http://b") as b:
            await balanced(a, b)
            on_a = in_shards(lease_of(a).held_shards())
            on_b = in_shards(lease_of(b).held_shards())
            await a.message_store.append(on_a, work)
            await b.message_store.append(on_b, work)
            async with open_chat_agent(model=ScriptedModel(echo), storage=b) as agent:
                with trio.fail_after(10):
                    while await contents(b, on_b) != ["work", "echo work"]:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                await trio.sleep(0.5)
                assert await contents(b, on_a) == ["work"], "resumed a live node's turn"
                assert agent.stats.turns_resumed == 1
                stop_a.set()  # A stops cleanly: its shards are free
                with trio.fail_after(10):
                    while await contents(b, on_a) != ["work", "echo work"]:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                assert agent.stats.turns_resumed == 2


async def test_requests_for_another_nodes_shards_never_queue_before_renewals(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of requests landing on the wrong node is redirected from the
    last round's map: not one of them asks the database on the lease's
    connection, where they would queue in front of the renewals."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a") as (a, _):
        async with node(postgres_dsn, schema, "http://b") as (b, agent_b):
            await balanced(a, b)
            await lease_of(b).round()  # the map as of now
            asked: list[object] = []
            real = lease_of(b)._db

            async def counted(operation: Callable[..., object], *args: object) -> object:
                if operation is not _lease_sql._round:
                    asked.append(operation)
                return await real(operation, *args)

            monkeypatch.setattr(lease_of(b), "_db", counted)
            foreign = [c for c in (f"w{i}" for i in range(200)) if not lease_of(b).owns(c)]
            refused: list[str] = []

            async def send(conversation: str) -> None:
                try:
                    await agent_b.send(conversation, "hi")
                except NotOwnedError as error:
                    refused.append(error.owner_url)

            async with trio.open_nursery() as nursery:
                for conversation in foreign:
                    nursery.start_soon(send, conversation)
            assert refused == ["http://a"] * len(foreign)
            assert asked == []


async def test_a_shard_that_moved_since_the_last_round_is_looked_up_once(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's map of the other nodes' shards is stale (as right after a hand-off
    between others): a burst of requests for A's conversations is still
    redirected to A, after one look-up shared by all of them."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a") as (a, _):
        async with node(postgres_dsn, schema, "http://b") as (b, agent_b):
            await balanced(a, b)
            asked: list[object] = []
            real = lease_of(b)._db

            async def counted(operation: Callable[..., object], *args: object) -> object:
                if operation is not _lease_sql._round:
                    asked.append(operation)
                return await real(operation, *args)

            async def no_rounds() -> None:  # none refreshes the map meanwhile
                await trio.sleep_forever()

            monkeypatch.setattr(lease_of(b), "round", no_rounds)
            monkeypatch.setattr(lease_of(b), "_db", counted)
            monkeypatch.setattr(lease_of(b), "_elsewhere", {})
            foreign = [c for c in (f"m{i}" for i in range(100)) if not lease_of(b).owns(c)]
            refused: list[str] = []

            async def send(conversation: str) -> None:
                try:
                    await agent_b.send(conversation, "hi")
                except NotOwnedError as error:
                    refused.append(error.owner_url)

            async with trio.open_nursery() as nursery:
                for conversation in foreign:
                    nursery.start_soon(send, conversation)
            assert refused == ["http://a"] * len(foreign)
            assert asked == [_lease_sql._elsewhere]

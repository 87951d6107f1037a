"""Conversation ownership between nodes sharing one PostgreSQL database, in
one process: two bundles opened with ``lease_seconds`` are two nodes, each
with an agent. Real PostgreSQL; the lease's own timing is real time (it is
judged by the database's clock), kept short: leases of 1 s, waits bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import trio

from agentik import Message, ModelRequest, ModelResponse, Role, StoreError
from agentik.agent import ChatAgent, open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import (
    NotOwnedError,
    StorageBundle,
    open_postgres_storage,
)
from agentik.storage.postgres._leases import NodeLease
from tests.postgres import fresh_schema


def echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"echo {request.messages[-1].content}")


@asynccontextmanager
async def node(
    dsn: str, schema: str, url: str, lease: float = 1.0
) -> AsyncIterator[tuple[StorageBundle, ChatAgent]]:
    async with open_postgres_storage(
        dsn, schema=schema, readers=1, lease_seconds=lease, advertise_url=url
    ) as bundle:
        async with open_chat_agent(model=ScriptedModel(echo), storage=bundle) as agent:
            yield bundle, agent


def lease_of(bundle: StorageBundle) -> NodeLease:
    assert isinstance(bundle.ownership, NodeLease)
    return bundle.ownership


def expire(dsn: str, schema: str, node_id: str) -> None:
    """What a node that stopped renewing looks like once its lease ran out."""
    with psycopg.connect(dsn) as connection:
        connection.execute(
            f"UPDATE {schema}.agentik_node SET expires_at = clock_timestamp() - interval '1 s'"
            " WHERE node_id = %s",
            (node_id,),
        )


async def test_a_conversation_runs_on_its_owner_only(postgres_dsn: str) -> None:
    """The first node to run a turn owns the conversation; the other is told
    where it lives (NotOwnedError with the owner's URL) and cannot write its
    messages even directly through the store."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a") as (a, agent_a):
        async with node(postgres_dsn, schema, "http://b") as (b, agent_b):
            assert (await agent_a.send("x", "hi")).text == "echo hi"
            with pytest.raises(NotOwnedError) as refused:
                await agent_b.send("x", "hello")
            assert refused.value.owner_url == "http://a"
            with pytest.raises(StoreError, match=r"^conversation 'x' is not owned by this node"):
                await b.message_store.append("x", Message(Role.USER, "sneaked in"))
            assert (await agent_b.send("y", "other")).text == "echo other"
            assert (await agent_a.send("x", "again")).messages[0].seq == 3
        history = [m.content async for m in a.message_store.get_messages("x")]
        assert history == ["hi", "echo hi", "again", "echo again"]


async def test_a_clean_stop_frees_conversations_at_once(postgres_dsn: str) -> None:
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://b", lease=60) as (_, agent_b):
        async with node(postgres_dsn, schema, "http://a", lease=60) as (_, agent_a):
            await agent_a.send("x", "one")
        assert (await agent_b.send("x", "two")).messages[0].seq == 3


async def test_an_expired_owner_is_taken_over_and_fenced(postgres_dsn: str) -> None:
    """Node A's lease runs out (it stopped renewing: here its row is expired
    by hand, and its 60 s lease keeps it from noticing): B takes the
    conversation over, and A's writes to it are refused by the database
    although A still believes it owns it."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a", lease=60) as (a, agent_a):
        async with node(postgres_dsn, schema, "http://b", lease=60) as (_, agent_b):
            await agent_a.send("x", "one")
            await trio.to_thread.run_sync(expire, postgres_dsn, schema, lease_of(a).node_id)
            assert (await agent_b.send("x", "two")).messages[0].seq == 3
            assert lease_of(a).owns("x"), "A has not noticed"
            with pytest.raises(StoreError, match=r"^conversation 'x' is not owned"):
                await a.message_store.append("x", Message(Role.USER, "late"))


async def test_a_node_that_finds_its_lease_expired_drops_everything_and_rejoins(
    postgres_dsn: str,
) -> None:
    """Its next renewal (a third of a 1 s lease later) finds the row expired:
    the agent's conversations are dropped, the node joins under a new id, and
    the conversation, now B's, is refused to it."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a", lease=1) as (a, agent_a):
        async with node(postgres_dsn, schema, "http://b", lease=60) as (_, agent_b):
            await agent_a.send("x", "one")
            lost = trio.Event()
            lease_of(a).on_lost(lost.set)
            old = lease_of(a).node_id
            await trio.to_thread.run_sync(expire, postgres_dsn, schema, old)
            await agent_b.send("x", "two")
            with trio.fail_after(10):
                await lost.wait()
            assert agent_a.live_conversations == 0 and not lease_of(a).owns("x")
            with trio.fail_after(10):
                while lease_of(a).node_id == old:  # noqa: ASYNC110 (the lease task's state)
                    await trio.sleep(0.05)
            with pytest.raises(NotOwnedError):
                await agent_a.send("x", "three")


async def test_a_hanging_renewal_still_gives_everything_up_in_time(postgres_dsn: str) -> None:
    """A's renewal hangs (another transaction holds A's node row, as a dead
    network would hold the call): the watchdog gives every claim up when
    A's lease runs out locally, before the database could let another node
    take over, and A refuses to claim meanwhile."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a", lease=1) as (a, agent_a):
        await agent_a.send("x", "one")
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
                await agent_a.send("x", "two")


async def test_a_deleted_conversation_stays_with_its_owner(postgres_dsn: str) -> None:
    """Deleting empties the conversation but keeps its ownership row: the
    owner goes on writing it from seq 1 (its claim is still valid for the
    writer's fence), and another node can neither run it nor delete or import
    it behind the owner's back (refused, nothing changed)."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a", lease=60) as (a, agent_a):
        async with node(postgres_dsn, schema, "http://b", lease=60) as (b, agent_b):
            await agent_a.send("x", "one")
            assert await agent_a.delete_conversation("x")
            assert (await agent_a.send("x", "two")).messages[0].seq == 1
            with pytest.raises(NotOwnedError):
                await agent_b.send("x", "sneak")
            store_b = b.message_store
            with pytest.raises(StoreError, match=r"^conversation 'x' is not owned by this node"):
                await store_b.delete_conversation("x")
            with pytest.raises(StoreError, match=r"^conversation 'y' is not owned by this node"):
                await store_b.import_conversation("y", [])
            history = [m.content async for m in a.message_store.get_messages("x")]
            assert history == ["two", "echo two"]


async def test_retention_on_one_node_leaves_other_nodes_conversations_alone(
    postgres_dsn: str,
) -> None:
    """Every node runs retention over the shared database: node B's pass
    deletes the idle conversations it can claim and skips those a live node
    A owns (A's own pass deletes them), instead of failing on them."""
    schema = fresh_schema()
    async with node(postgres_dsn, schema, "http://a", lease=60) as (_, agent_a):
        async with node(postgres_dsn, schema, "http://b", lease=60) as (_, agent_b):
            await agent_a.send("on-a", "hi")
            await agent_b.send("on-b", "hi")
            await agent_a.send("free", "hi")
            future = datetime.now(UTC) + timedelta(days=1)
            assert await agent_b.delete_idle_conversations(future) == ["on-b"]
            assert await agent_a.delete_idle_conversations(future) == ["free", "on-a"]


async def _answered(bundle: StorageBundle, conversation_id: str) -> bool:
    contents = [m.content async for m in bundle.message_store.get_messages(conversation_id)]
    return contents == ["work", "echo work"]


async def test_a_node_resumes_at_start_only_the_interrupted_turns_it_can_own(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted turns resume as an agent opens (``_resume``), each by the
    node that can own its conversation: a free one at once; one a live node
    owns is left to it, and taken over once that node's lease has expired
    (a dead node's turns do not wait for a request)."""
    from agentik.agent import _resume

    monkeypatch.setattr(_resume, "RETRY_SECONDS", 0.1)
    schema = fresh_schema()
    work = Message(Role.USER, "work")
    async with open_postgres_storage(
        postgres_dsn, schema=schema, readers=1, lease_seconds=60, advertise_url="http://a"
    ) as a:
        await lease_of(a).claim("free")
        await a.message_store.append("free", work)  # then a stops cleanly: free
    async with open_postgres_storage(
        postgres_dsn, schema=schema, readers=1, lease_seconds=60, advertise_url="http://b"
    ) as b:
        await lease_of(b).claim("held")
        await b.message_store.append("held", work)  # b stays alive, not resuming it
        async with node(postgres_dsn, schema, "http://c") as (c, agent_c):
            with trio.fail_after(20):
                while not await _answered(c, "free"):  # noqa: ASYNC110 (c's own task)
                    await trio.sleep(0.02)
            await trio.sleep(0.5)  # several retries: b is alive, c leaves it alone
            assert not await _answered(c, "held")
            assert agent_c.stats.turns_resumed == 1
            expire(postgres_dsn, schema, lease_of(b).node_id)  # b died
            with trio.fail_after(20):
                while not await _answered(c, "held"):  # noqa: ASYNC110
                    await trio.sleep(0.02)
            assert agent_c.stats.turns_resumed == 2


async def test_each_node_keeps_its_share_of_the_model_limits(postgres_dsn: str) -> None:
    """The leases count the live nodes at every renewal; an agent with
    ``model_limits`` on each node keeps the limit divided by them, and all of
    it again once the other node has left."""
    from agentik import ModelLimits

    schema = fresh_schema()
    limits = ModelLimits(requests_per_minute=600)

    async def until_nodes(bundle: StorageBundle, count: int) -> None:
        with trio.fail_after(10):
            while lease_of(bundle).live_nodes != count:  # noqa: ASYNC110 (real leases)
                await trio.sleep(0.05)

    async with open_postgres_storage(
        postgres_dsn, schema=schema, readers=1, lease_seconds=1.0, advertise_url="http://a"
    ) as a:
        await until_nodes(a, 1)
        async with (
            open_chat_agent(model=ScriptedModel(echo), storage=a, model_limits=limits) as agent,
            node(postgres_dsn, schema, "http://b"),
        ):
            await until_nodes(a, 2)
            scheduler = agent.model_scheduler
            assert scheduler is not None
            await agent.send("x", "hi")  # the scheduler looks at the nodes as it admits
            assert scheduler.nodes == 2
            assert scheduler._requests is not None
            assert scheduler._requests.limit == 300
        async with open_chat_agent(
            model=ScriptedModel(echo), storage=a, model_limits=limits
        ) as agent:
            await until_nodes(a, 1)
            await agent.send("x", "again")
            scheduler = agent.model_scheduler
            assert scheduler is not None
            assert scheduler.nodes == 1
            assert scheduler._requests is not None
            assert scheduler._requests.limit == 600

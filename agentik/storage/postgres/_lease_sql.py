"""The statements of the shard leases (``_leases.NodeLease`` runs them on
its own connection, from a worker thread): one round, a claim of one shard,
the look-up of the other nodes' shards, joining and leaving, and the bounds
of the lease's session (docs/scale-out.md, "Ownership").

Why shards, not conversations: a lease row per conversation costs one
fsync'd claim on each conversation's first turn, and a burst of new
conversations queued those claims in front of the node's own renewals until
the node lost its lease. A database is split into a fixed number of shards
(``agentik_shard``, ``[storage] shards``); a conversation lives in shard
``crc32(id) % shards`` (``storage._shards``), and a node owns it for as long
as it holds that shard. Nothing is claimed on a conversation's first turn.

Why lease rows, not advisory locks: a lock vanishes the moment its
connection drops, so a node cut off for a second would lose everything while
it still runs its turns. Each node has a row in ``agentik_node`` whose
``expires_at`` it pushes forward; it holds the shards whose ``agentik_shard``
row names it for as long as that row lives.

One round, one statement, on a connection of its own (``agentik-lease``, with
its own short ``lock_timeout`` and ``statement_timeout``): renew the node's
row, count the live nodes, release the shards handed off, and take free
shards (held by nobody, or by an expired node) up to this node's share,
``ceil(shards / live nodes)``. Taking skips rows another session has locked
(``SKIP LOCKED``), so nothing another session holds (a frozen node's
writer) can delay a renewal past the lock timeout."""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import psycopg

# A shard is free: nobody holds it, or its holder's row has expired. A shard
# claimed since this statement began is held by a live node, even one whose
# row this statement's snapshot is too old to see.
_FREE = """(s.node_id IS NULL OR (s.claimed_at < statement_timestamp() AND NOT EXISTS (
        SELECT 1 FROM agentik_node AS n
        WHERE n.node_id = s.node_id AND n.expires_at > clock_timestamp())))"""

_ELSEWHERE = """
SELECT coalesce(json_agg(json_build_array(s.shard, n.url)), '[]')
FROM agentik_shard AS s JOIN agentik_node AS n USING (node_id)
WHERE n.node_id <> %(me)s AND n.expires_at > clock_timestamp()
"""

_ROUND = f"""
WITH renewed AS (
    UPDATE agentik_node SET expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
    WHERE node_id = %(me)s AND expires_at > clock_timestamp()
    RETURNING node_id
), live AS (
    SELECT greatest(1, count(*)) AS n FROM agentik_node WHERE expires_at > clock_timestamp()
), released AS (
    UPDATE agentik_shard AS s SET node_id = NULL
    FROM (SELECT shard FROM agentik_shard
          WHERE shard = ANY(%(release)s::integer[]) AND node_id = %(me)s
          FOR UPDATE SKIP LOCKED) AS r
    WHERE s.shard = r.shard
    RETURNING s.shard
), mine AS (
    SELECT shard, generation FROM agentik_shard WHERE node_id = %(me)s
), free AS (
    SELECT s.shard FROM agentik_shard AS s
    WHERE EXISTS (SELECT 1 FROM renewed) AND {_FREE}
    ORDER BY s.shard
    LIMIT (SELECT greatest(0, ceil(%(shards)s::numeric / live.n) - (SELECT count(*) FROM mine))
           FROM live)
    FOR UPDATE OF s SKIP LOCKED
), taken AS (
    UPDATE agentik_shard AS s
    SET node_id = %(me)s, generation = s.generation + 1, claimed_at = clock_timestamp()
    FROM free WHERE s.shard = free.shard
    RETURNING s.shard, s.generation
)
SELECT EXISTS (SELECT 1 FROM renewed), (SELECT n FROM live),
    (SELECT coalesce(json_agg(json_build_array(shard, generation)), '[]') FROM mine),
    (SELECT coalesce(json_agg(shard), '[]') FROM released),
    (SELECT coalesce(json_agg(json_build_array(shard, generation)), '[]') FROM taken),
    ({_ELSEWHERE})
"""

# One shard on demand (a request for a conversation in a shard nobody holds).
_CLAIM = f"""
WITH me AS (
    SELECT 1 FROM agentik_node WHERE node_id = %(me)s AND expires_at > clock_timestamp()
), free AS (
    SELECT s.shard FROM agentik_shard AS s
    WHERE s.shard = %(shard)s AND %(may_take)s AND EXISTS (SELECT 1 FROM me) AND {_FREE}
    FOR UPDATE OF s SKIP LOCKED
), taken AS (
    UPDATE agentik_shard AS s
    SET node_id = %(me)s, generation = s.generation + 1, claimed_at = clock_timestamp()
    FROM free WHERE s.shard = free.shard
    RETURNING s.generation
)
SELECT EXISTS (SELECT 1 FROM me), (SELECT generation FROM taken), (
    SELECT n.url FROM agentik_shard AS s JOIN agentik_node AS n USING (node_id)
    WHERE s.shard = %(shard)s AND n.node_id <> %(me)s AND n.expires_at > clock_timestamp())
"""

_REGISTER = """
INSERT INTO agentik_node (node_id, url, expires_at)
VALUES (%(me)s, %(url)s, clock_timestamp() + make_interval(secs => %(lease)s))
"""

# Rows of nodes dead for a while (their shards are free either way).
_FORGET_DEAD = (
    "DELETE FROM agentik_node WHERE expires_at < clock_timestamp() - interval '10 minutes'"
)


@attrs.frozen(kw_only=True)
class Fence:
    """What the writer checks a batch against: this node's id and the
    generation at which it took each shard it holds. Replaced whole on every
    change, so the writer's thread reads it with one attribute read."""

    node_id: str
    shards: int
    generations: Mapping[int, int]


@attrs.frozen(kw_only=True)
class RoundResult:
    renewed: bool
    live_nodes: int
    held: dict[int, int]
    """Every shard this node holds after the round, with its generation."""
    released: frozenset[int]
    taken: frozenset[int]
    elsewhere: dict[int, str]
    """Shards other live nodes hold, with their advertised URLs."""


def _round(
    connection: psycopg.Connection,
    me: str,
    lease: float,
    shards: int,
    release: list[int],
) -> RoundResult:
    row = connection.execute(
        _ROUND, {"me": me, "lease": lease, "shards": shards, "release": release}
    ).fetchone()
    assert row is not None
    renewed, live, mine, released, taken, elsewhere = row
    held = {int(s): int(g) for s, g in mine}
    gone = {int(s) for s in released}
    for shard in gone:
        held.pop(shard, None)
    held.update((int(s), int(g)) for s, g in taken)
    return RoundResult(
        renewed=bool(renewed),
        live_nodes=max(1, int(live)),
        held=held if renewed else {},
        released=frozenset(gone),
        taken=frozenset(int(s) for s, _ in taken),
        elsewhere={int(s): str(url) for s, url in elsewhere},
    )


def _claim(
    connection: psycopg.Connection, me: str, shard: int, may_take: bool
) -> tuple[bool, int | None, str | None]:
    row = connection.execute(_CLAIM, {"me": me, "shard": shard, "may_take": may_take}).fetchone()
    assert row is not None
    alive, generation, url = row
    return bool(alive), None if generation is None else int(generation), url


def _elsewhere(connection: psycopg.Connection, me: str) -> dict[int, str]:
    row = connection.execute(_ELSEWHERE, {"me": me}).fetchone()
    assert row is not None
    return {int(s): str(url) for s, url in row[0]}


_RENEW = """
UPDATE agentik_node SET expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE node_id = %(me)s AND expires_at > clock_timestamp()
"""


def _renew(connection: psycopg.Connection, me: str, lease: float) -> bool:
    """Push the node's row forward (a round's first step alone); False when
    it had expired (or is gone): then only a round may tell what follows."""
    return connection.execute(_RENEW, {"me": me, "lease": lease}).rowcount == 1


def _register(connection: psycopg.Connection, me: str, url: str, lease: float) -> None:
    with connection.transaction():
        connection.execute(_FORGET_DEAD)
        connection.execute(_REGISTER, {"me": me, "url": url, "lease": lease})


def _advertise(connection: psycopg.Connection, me: str, url: str) -> None:
    connection.execute("UPDATE agentik_node SET url = %s WHERE node_id = %s", (url, me))


def _leave(connection: psycopg.Connection, me: str) -> None:
    with connection.transaction():
        connection.execute("UPDATE agentik_shard SET node_id = NULL WHERE node_id = %s", (me,))
        connection.execute("DELETE FROM agentik_node WHERE node_id = %s", (me,))


_LEASE_BOUNDS = """
SELECT set_config(s.name, least(nullif(s.setting::bigint, 0), w.ms)::text || 'ms', false)
FROM pg_settings AS s
JOIN (VALUES ('lock_timeout', %s::bigint), ('statement_timeout', %s::bigint),
             ('idle_in_transaction_session_timeout', %s::bigint)) AS w (name, ms) USING (name)
"""


def lease_session(connection: psycopg.Connection, lease: float) -> psycopg.Connection:
    """Bound the lease connection's own waits well inside the lease: a lock
    wait (``lock_timeout``, a tenth of the lease, at most 1 s), a statement
    (``statement_timeout``, a quarter, at most 5 s), a transaction left open
    (``idle_in_transaction_session_timeout``); a stricter value someone chose
    (the DSN, the role) stays. Its TCP keepalives are every connection's
    (``_connect``)."""
    lock_ms = max(100, min(1000, round(lease * 100)))
    statement_ms = max(500, min(5000, round(lease * 250)))
    connection.execute(_LEASE_BOUNDS, (lock_ms, statement_ms, 2 * statement_ms))
    return connection

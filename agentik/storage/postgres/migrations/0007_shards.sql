-- agentik PostgreSQL schema version 6: shard leases, for several nodes
-- sharing one database (docs/scale-out.md). Nodes lease shards, not
-- conversations: a conversation belongs to shard crc32(utf-8 id) % shards,
-- and its turns run on the node holding that shard.

-- Settings fixed for a database once set: 'shards', the number of shards,
-- written by the first node to open the database; a node configured with
-- another number is refused (a conversation would change shard).
CREATE TABLE agentik_setting (
    name text PRIMARY KEY,
    value text NOT NULL
);

-- One row per shard (made by the first open, once the number is known).
-- node_id: its holder, valid while that node's agentik_node row is
-- unexpired (NULL: free). generation: the fencing token, raised by every
-- claim, so a writer batch of a node that lost the shard, even one that got
-- it back since, is refused. The writer locks the rows of the shards it
-- writes to (FOR SHARE) for its transaction; a claim skips locked rows
-- (SKIP LOCKED) instead of waiting for them.
CREATE TABLE agentik_shard (
    shard integer PRIMARY KEY,
    node_id text,
    generation bigint NOT NULL DEFAULT 0,
    claimed_at timestamptz
);
CREATE INDEX agentik_shard_by_node ON agentik_shard (node_id);

-- Per-conversation claims are gone: a conversation is owned through its
-- shard. Its rows only said which node ran it until that node's lease
-- ended; the nodes' next leases claim shards afresh.
DROP TABLE conversation_owner;

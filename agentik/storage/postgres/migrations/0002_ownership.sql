-- agentik PostgreSQL schema version 2: conversation ownership, for several
-- nodes sharing one database (docs/scale-out.md).

-- One row per running node (a new id each time a node starts or loses its
-- lease): where to reach it, and until when it is alive. The node renews
-- expires_at; comparisons use the database's clock, never a node's.
CREATE TABLE agentik_node (
    node_id text PRIMARY KEY,
    url text NOT NULL DEFAULT '',
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);

-- Which node runs each conversation's turns: valid while that node's row is
-- unexpired. Taking a conversation over rewrites node_id; the writer locks
-- the rows of the conversations it writes (FOR SHARE) for its transaction,
-- so a takeover waits for a batch under way and no batch commits after one.
CREATE TABLE conversation_owner (
    conversation_id bytea PRIMARY KEY,
    node_id text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX conversation_owner_by_node ON conversation_owner (node_id);

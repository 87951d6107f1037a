-- agentik PostgreSQL schema version 3: summaries of history a context policy
-- asked for (SQLite's 0003_summary.sql). Each covers the conversation's
-- messages up to through_seq; they chain, the latest is the one used.
-- History itself is never deleted for one.
CREATE TABLE summary (
    conversation_id bytea NOT NULL,
    through_seq bigint NOT NULL CHECK (through_seq >= 1),
    text bytea NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (conversation_id, through_seq)
);

-- agentik PostgreSQL schema version 5: turns whose answer is a typed output,
-- keyed by their user message (SQLite's 0006_turn_output.sql says why).
CREATE TABLE turn_output (
    conversation_id bytea NOT NULL,
    seq bigint NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);

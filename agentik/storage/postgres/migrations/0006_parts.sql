-- agentik PostgreSQL schema version 6: content parts (SQLite's 0007_parts.sql
-- says how they are kept). The parts column is agentik's own JSON (escaped,
-- so no U+0000): text. A blob still used by a conversation cannot go: the
-- foreign key makes a delete that races an insert of the same blob on another
-- node fail (the deleting side keeps the blob) rather than lose it.
ALTER TABLE message ADD COLUMN parts text;

CREATE TABLE blob (
    hash text PRIMARY KEY,
    data bytea NOT NULL
);

CREATE TABLE blob_use (
    conversation_id bytea NOT NULL,
    hash text NOT NULL REFERENCES blob (hash),
    PRIMARY KEY (conversation_id, hash)
);
CREATE INDEX blob_use_by_hash ON blob_use (hash);

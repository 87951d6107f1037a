-- agentik schema version 7: content parts (images, files) beside a message's
-- text. ``message.parts`` is a JSON array of the parts in order, NULL when
-- there are none (every message before this version): a part with inline
-- data names it by ``"blob"`` (its SHA-256, hex) instead of carrying it.
-- The data lives once in ``blob``, however many messages send it;
-- ``blob_use`` says which conversations use which blob, so deleting a
-- conversation deletes the blobs no other conversation uses.
ALTER TABLE message ADD COLUMN parts TEXT;

CREATE TABLE blob (
    hash TEXT PRIMARY KEY,    -- SHA-256 of data, hex
    data BLOB NOT NULL
) STRICT;

CREATE TABLE blob_use (
    conversation_id TEXT NOT NULL,
    hash TEXT NOT NULL REFERENCES blob (hash),
    PRIMARY KEY (conversation_id, hash)
) STRICT, WITHOUT ROWID;
CREATE INDEX blob_use_by_hash ON blob_use (hash);

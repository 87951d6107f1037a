-- agentik schema version 1. Timestamps are integer microseconds since the
-- Unix epoch, UTC. Tables are STRICT so a value of the wrong type is refused.

-- The history of every conversation. A rowid table plus a unique index on
-- (conversation_id, seq): rows append at the end of the table b-tree, and
-- only the small index entry lands in the middle. (A WITHOUT ROWID table
-- keyed on (conversation_id, seq) inserted 1 KiB rows 5-7x slower.)
CREATE TABLE message (
    id INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL CHECK (seq >= 1),
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content TEXT NOT NULL,
    tool_calls TEXT,          -- JSON array of {"id", "name", "arguments"}; NULL when none
    tool_call_id TEXT,
    prompt_tokens INTEGER,    -- both NULL when the message carried no usage
    completion_tokens INTEGER,
    created_us INTEGER NOT NULL,
    idempotency_key TEXT,
    CHECK ((prompt_tokens IS NULL) = (completion_tokens IS NULL))
) STRICT;
CREATE UNIQUE INDEX message_by_seq ON message (conversation_id, seq);
CREATE UNIQUE INDEX message_by_idempotency_key ON message (conversation_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Working-memory notes; compacted or archived notes stay, flagged.
CREATE TABLE memory_entry (
    id INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    text TEXT NOT NULL,
    created_us INTEGER NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1))
) STRICT;
CREATE INDEX memory_entry_active ON memory_entry (conversation_id, id) WHERE archived = 0;

-- Reflections are deleted by age; AUTOINCREMENT keeps ids from being reused.
CREATE TABLE reflection (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    text TEXT NOT NULL,
    created_us INTEGER NOT NULL
) STRICT;
CREATE INDEX reflection_by_time ON reflection (created_us, id);
CREATE INDEX reflection_by_conversation ON reflection (conversation_id, created_us, id);

CREATE TABLE skill (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    body TEXT NOT NULL,
    updated_us INTEGER NOT NULL
) STRICT;

-- agentik PostgreSQL schema version 1: the four stores and the turn ledger
-- (what SQLite reached in its versions 1 and 2). Tables live in the bundle's
-- schema (``search_path``), ``agentik`` by default.
--
-- Strings are UTF-8 ``bytea``, not ``text``: PostgreSQL's text cannot hold
-- U+0000, which agentik's strings may contain (the store contract stores it),
-- and bytea compares byte by byte, which for UTF-8 is code point order:
-- Python's ``str`` order, what ``list_conversations`` and the skill catalog
-- promise. Tool calls are agentik's own JSON (escaped, so no U+0000): text.

CREATE TABLE message (
    conversation_id bytea NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 1),
    role text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content bytea NOT NULL,
    tool_calls text,          -- JSON array of {"id", "name", "arguments"}; NULL when none
    tool_call_id bytea,
    prompt_tokens bigint,     -- both NULL when the message carried no usage
    completion_tokens bigint,
    created_at timestamptz NOT NULL,
    idempotency_key bytea,
    PRIMARY KEY (conversation_id, seq),
    CHECK ((prompt_tokens IS NULL) = (completion_tokens IS NULL))
);
CREATE UNIQUE INDEX message_by_idempotency_key ON message (conversation_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE memory_entry (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id bytea NOT NULL,
    text bytea NOT NULL,
    created_at timestamptz NOT NULL,
    archived boolean NOT NULL DEFAULT false
);
CREATE INDEX memory_entry_active ON memory_entry (conversation_id, id) WHERE NOT archived;

-- An identity never hands out an id twice, also after deletes.
CREATE TABLE reflection (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id bytea NOT NULL,
    text bytea NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX reflection_by_time ON reflection (created_at, id);
CREATE INDEX reflection_by_conversation ON reflection (conversation_id, created_at, id);

CREATE TABLE skill (
    name bytea PRIMARY KEY,
    description bytea NOT NULL,
    body bytea NOT NULL,
    updated_at timestamptz NOT NULL
);

-- Tool calls that need a person's decision (see SQLite's 0002_turn_ledger.sql).
CREATE TABLE approval (
    conversation_id bytea NOT NULL,
    seq bigint NOT NULL,           -- the assistant message that made the call
    call_id bytea NOT NULL,
    ordinal integer NOT NULL,      -- its place among the message's waiting calls
    approved boolean,              -- NULL while it waits
    reason bytea NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    decided_at timestamptz,
    PRIMARY KEY (conversation_id, seq, call_id)
);

-- Turns that ended without an answer, keyed by their user message.
CREATE TABLE turn_failure (
    conversation_id bytea NOT NULL,
    seq bigint NOT NULL,
    code bytea NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);

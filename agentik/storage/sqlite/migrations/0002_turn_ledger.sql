-- agentik schema version 2: what storage knows of a turn beyond its messages.

-- Tool calls that need a person's decision. A row is written with the
-- assistant message that makes the call (same transaction), and decided
-- later; a denied call's tool result is written with its decision. Call ids
-- come from the model and may repeat across turns, hence the message's seq.
CREATE TABLE approval (
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,          -- the assistant message that made the call
    call_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,      -- its place among the message's waiting calls
    approved INTEGER CHECK (approved IN (0, 1)),  -- NULL while it waits
    reason TEXT NOT NULL DEFAULT '',
    created_us INTEGER NOT NULL,
    decided_us INTEGER,
    PRIMARY KEY (conversation_id, seq, call_id)
) STRICT, WITHOUT ROWID;

-- Turns that ended without an answer (failed, cancelled), keyed by their user
-- message: a turn left unfinished *without* a row here was interrupted (the
-- process stopped) and is resumed. Written only when a turn fails.
CREATE TABLE turn_failure (
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,          -- the turn's user message
    code TEXT NOT NULL,
    created_us INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) STRICT, WITHOUT ROWID;

-- Turns from before this version were never resumed: mark each
-- conversation's last one so an upgrade does not start resuming them.
INSERT INTO turn_failure (conversation_id, seq, code, created_us)
    SELECT conversation_id, MAX(seq), 'before_upgrade', 0
    FROM message WHERE role = 'user' GROUP BY conversation_id;

-- agentik schema version 3: summaries of history a context policy asked for.
-- Each covers the conversation's messages up to through_seq; they chain, the
-- latest is the one used. History itself is never deleted for one.
CREATE TABLE summary (
    conversation_id TEXT NOT NULL,
    through_seq INTEGER NOT NULL CHECK (through_seq >= 1),
    text TEXT NOT NULL,
    created_us INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, through_seq)
) STRICT, WITHOUT ROWID;

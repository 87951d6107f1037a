-- agentik schema version 6: turns whose answer is a typed output
-- (send(..., output=T)), keyed by their user message. The answer itself is
-- the turn's last assistant message (its text is the output's JSON); this
-- row says that text is an output, so a later read of the turn (A2A GetTask,
-- ListTasks) shows it as data too.
CREATE TABLE turn_output (
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,          -- the turn's user message
    created_us INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) STRICT, WITHOUT ROWID;

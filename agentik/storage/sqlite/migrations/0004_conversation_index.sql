-- agentik schema version 4: deleting a conversation whole reads every table by
-- conversation. The partial index on active notes cannot find archived ones,
-- so without this one a delete would scan every note of every conversation.
CREATE INDEX memory_entry_by_conversation ON memory_entry (conversation_id, id);

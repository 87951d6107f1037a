-- agentik schema version 5: what agentik keeps for itself (SecretStore), apart
-- from every conversation. Until version 4 the MCP OAuth vault was a
-- working-memory note of the conversation 'agentik.mcp-oauth:<server>', which
-- any client could name: read it (GET …/memory, …/export), wipe it (DELETE),
-- corrupt it (memory_add) or put it in a system prompt (a turn there).
CREATE TABLE secret (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_us INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Move each server's vault record out, so an upgrade keeps every login: the
-- newest active note of each such conversation that is a Fernet token (they
-- all begin 'gAAAAA' until the year 2106: version byte 0x80, then a 64-bit
-- timestamp) becomes the secret 'mcp-oauth:<server>'. A note a client slipped
-- in there (memory_add) is not a record; the vault read only the newest note,
-- so this also mends a vault that such a note had broken.
INSERT INTO secret (name, value, updated_us)
    SELECT 'mcp-oauth:' || substr(conversation_id, 19), text, created_us
    FROM memory_entry AS note
    WHERE substr(conversation_id, 1, 18) = 'agentik.mcp-oauth:'
        AND archived = 0
        AND text GLOB 'gAAAAA*'
        AND id = (
            SELECT max(id) FROM memory_entry
            WHERE conversation_id = note.conversation_id AND archived = 0
                AND text GLOB 'gAAAAA*'
        );

-- Then every vault record, active or replaced (archived, with older tokens), leaves
-- working memory; other notes there are the conversation's and stay.
DELETE FROM memory_entry
    WHERE substr(conversation_id, 1, 18) = 'agentik.mcp-oauth:' AND text GLOB 'gAAAAA*';

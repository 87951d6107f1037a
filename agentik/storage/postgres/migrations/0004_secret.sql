-- agentik PostgreSQL schema version 4: what agentik keeps for itself
-- (SecretStore), apart from every conversation (SQLite's 0005_secret.sql says
-- why). Strings are UTF-8 bytea, as everywhere in this schema.
CREATE TABLE secret (
    name bytea PRIMARY KEY,
    value bytea NOT NULL,
    updated_at timestamptz NOT NULL
);

-- Move each server's MCP OAuth vault record out of working memory (the newest
-- active note of 'agentik.mcp-oauth:<server>' that is a Fernet token), then
-- drop every vault record from there; a client's own notes stay.
INSERT INTO secret (name, value, updated_at)
    SELECT DISTINCT ON (conversation_id)
        convert_to('mcp-oauth:', 'UTF8') || substring(conversation_id FROM 19),
        text,
        created_at
    FROM memory_entry
    WHERE substring(conversation_id FROM 1 FOR 18) = convert_to('agentik.mcp-oauth:', 'UTF8')
        AND NOT archived
        AND substring(text FROM 1 FOR 6) = convert_to('gAAAAA', 'UTF8')
    ORDER BY conversation_id, id DESC;

DELETE FROM memory_entry
    WHERE substring(conversation_id FROM 1 FOR 18) = convert_to('agentik.mcp-oauth:', 'UTF8')
        AND substring(text FROM 1 FOR 6) = convert_to('gAAAAA', 'UTF8');

"""SQLite's SQL functions in one namespace: what the shared stores call
(``agentik.storage._sql_queries.Queries``)."""

from agentik.storage.sqlite._queries import all_skills as all_skills
from agentik.storage.sqlite._queries import append_memory as append_memory
from agentik.storage.sqlite._queries import archive_memory as archive_memory
from agentik.storage.sqlite._queries import compact_memory as compact_memory
from agentik.storage.sqlite._queries import count_idempotency_keys as count_idempotency_keys
from agentik.storage.sqlite._queries import count_reflections as count_reflections
from agentik.storage.sqlite._queries import delete_reflections_before as delete_reflections_before
from agentik.storage.sqlite._queries import find_idempotency_key as find_idempotency_key
from agentik.storage.sqlite._queries import get_skill as get_skill
from agentik.storage.sqlite._queries import insert_reflection as insert_reflection
from agentik.storage.sqlite._queries import list_archived_memory as list_archived_memory
from agentik.storage.sqlite._queries import list_conversations as list_conversations
from agentik.storage.sqlite._queries import list_idempotency_keys as list_idempotency_keys
from agentik.storage.sqlite._queries import list_keyed_turns as list_keyed_turns
from agentik.storage.sqlite._queries import list_memory as list_memory
from agentik.storage.sqlite._queries import message_page as message_page
from agentik.storage.sqlite._queries import recent_reflections as recent_reflections
from agentik.storage.sqlite._queries import reflections_of as reflections_of
from agentik.storage.sqlite._queries import remove_skill as remove_skill
from agentik.storage.sqlite._queries import skill_catalog as skill_catalog
from agentik.storage.sqlite._queries import skill_exists as skill_exists
from agentik.storage.sqlite._queries import token_stats as token_stats
from agentik.storage.sqlite._queries import upsert_skill as upsert_skill
from agentik.storage.sqlite._secret_queries import delete_secret as delete_secret
from agentik.storage.sqlite._secret_queries import get_secret as get_secret
from agentik.storage.sqlite._secret_queries import put_secret as put_secret
from agentik.storage.sqlite._turn_queries import conversation_snapshots as conversation_snapshots
from agentik.storage.sqlite._turn_queries import decide as decide
from agentik.storage.sqlite._turn_queries import insert_awaiting as insert_awaiting
from agentik.storage.sqlite._turn_queries import insert_summary as insert_summary
from agentik.storage.sqlite._turn_queries import insert_turn_failure as insert_turn_failure
from agentik.storage.sqlite._turn_queries import (
    interrupted_conversations as interrupted_conversations,
)
from agentik.storage.sqlite._turn_queries import latest_summary as latest_summary
from agentik.storage.sqlite._turn_queries import list_summaries as list_summaries
from agentik.storage.sqlite._turn_queries import turn_record as turn_record

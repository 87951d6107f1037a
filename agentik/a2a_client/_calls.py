"""Where a call keeps the remote task it started, so a resumed turn follows it.

A ``<name>_send`` call stores the remote task id under (agent, conversation,
call id) as soon as the remote agent names it, before it waits for the
task; the tool is idempotent, so a turn a crash interrupted runs the call
again, and the call then finds the task and follows it (GetTask,
SubscribeToTask) instead of sending its message twice. The record is
removed once the call has its result (or error); a cancelled call (the
process stopping) keeps it for the resumed turn.

The records live in the bundle's ``SecretStore`` (its own table in SQLite
and PostgreSQL, a dict in memory): a small durable table keyed by name and
apart from conversations, which no conversation route can read. The name
is a hash (``a2a-call:<hex>``), so no conversation id is kept in clear. A
bundle without a secret store, or no bundle, keeps them in this process only.
"""

from __future__ import annotations

import hashlib
import json
import logging

from agentik.storage import SecretStore, StorageBundle

logger = logging.getLogger("agentik.a2a")

PREFIX = "a2a-call:"


class _MemorySecrets:
    def __init__(self) -> None:
        self._values: dict[str, str] = {}

    async def get_secret(self, name: str) -> str | None:
        return self._values.get(name)

    async def put_secret(self, name: str, value: str) -> None:
        self._values[name] = value

    async def delete_secret(self, name: str) -> bool:
        return self._values.pop(name, None) is not None


class CallLedger:
    """The remote task of each running ``<name>_send`` call."""

    def __init__(self, storage: StorageBundle | SecretStore | None) -> None:
        store: SecretStore | None
        if isinstance(storage, StorageBundle):
            store = storage.secret_store
            if store is None:
                logger.warning(
                    "the storage bundle keeps no secrets: a2a calls are followed"
                    " after a restart only within this process"
                )
        else:
            store = storage
        self._store: SecretStore = store if store is not None else _MemorySecrets()

    async def task_of(self, agent: str, conversation_id: str, call_id: str) -> str | None:
        value = await self._store.get_secret(_name(agent, conversation_id, call_id))
        if value is None:
            return None
        task = json.loads(value).get("task")
        return task if isinstance(task, str) and task else None

    async def keep(self, agent: str, conversation_id: str, call_id: str, task_id: str) -> None:
        """Durable once it returns (the store's write is acknowledged after its commit)."""
        value = json.dumps({"agent": agent, "task": task_id})
        await self._store.put_secret(_name(agent, conversation_id, call_id), value)

    async def forget(self, agent: str, conversation_id: str, call_id: str) -> None:
        await self._store.delete_secret(_name(agent, conversation_id, call_id))


def _name(agent: str, conversation_id: str, call_id: str) -> str:
    digest = hashlib.sha256(f"{agent}\0{conversation_id}\0{call_id}".encode()).hexdigest()
    return f"{PREFIX}{digest}"

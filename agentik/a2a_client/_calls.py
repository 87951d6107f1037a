"""Where a call keeps the remote task it started, so a resumed turn follows it.

A ``<name>_send`` call stores, under (agent, conversation, call id), the
messageId it is about to send (before sending: a fresh random one per call),
then the remote task id as soon as the remote agent names it, before it
waits for the task. The tool is idempotent, so a turn a crash interrupted
runs the call again, and the call then finds the task and follows it
(GetTask, SubscribeToTask) instead of sending its message twice; a crash
between sending and learning the task id sends the same message again, with
the same messageId, which a server that keys tasks by messageId (agentik
does) takes as the same task. The record is removed once the call has its
result (or error); a cancelled call (the process stopping) keeps it for the
resumed turn.

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

import attrs

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


@attrs.frozen
class CallRecord:
    message_id: str
    """The messageId the call sends (or sent)."""
    task_id: str | None
    """The remote task, once the agent named it."""


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

    async def record_of(self, agent: str, conversation_id: str, call_id: str) -> CallRecord | None:
        value = await self._store.get_secret(_name(agent, conversation_id, call_id))
        if value is None:
            return None
        record = json.loads(value)
        message, task = record.get("message"), record.get("task")
        if not isinstance(message, str) or not message:
            return None
        return CallRecord(message, task if isinstance(task, str) and task else None)

    async def keep(
        self,
        agent: str,
        conversation_id: str,
        call_id: str,
        *,
        message_id: str,
        task_id: str | None = None,
    ) -> None:
        """Durable once it returns (the store's write is acknowledged after its commit)."""
        value = json.dumps({"agent": agent, "message": message_id, "task": task_id})
        await self._store.put_secret(_name(agent, conversation_id, call_id), value)

    async def forget(self, agent: str, conversation_id: str, call_id: str) -> None:
        await self._store.delete_secret(_name(agent, conversation_id, call_id))


def _name(agent: str, conversation_id: str, call_id: str) -> str:
    digest = hashlib.sha256(f"{agent}\0{conversation_id}\0{call_id}".encode()).hexdigest()
    return f"{PREFIX}{digest}"

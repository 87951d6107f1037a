"""Storage: the store protocols, the bundles, and the backends.

A ``StorageBundle`` holds the four seed stores (DESIGN.md); a ``Storage`` is
the bundle with every capability agentik uses (``FullMessageStore``,
``FullWorkingMemoryStore``), which every backend here yields and
``full_storage`` makes of a seed-only bundle (docs/storage.md).
"""

from agentik.storage._archive import ArchivedApproval as ArchivedApproval
from agentik.storage._archive import ArchivedFailure as ArchivedFailure
from agentik.storage._archive import ArchivedMessage as ArchivedMessage
from agentik.storage._archive import ArchivedNote as ArchivedNote
from agentik.storage._archive import ArchivedReflection as ArchivedReflection
from agentik.storage._archive import ArchivedSummary as ArchivedSummary
from agentik.storage._archive import ArchiveRecord as ArchiveRecord
from agentik.storage._degraded import full_storage as full_storage
from agentik.storage._in_memory import in_memory_storage as in_memory_storage
from agentik.storage._pending import Pending as Pending
from agentik.storage._pending import PendingStatistics as PendingStatistics
from agentik.storage._protocols import ConversationOwnership as ConversationOwnership
from agentik.storage._protocols import FullMessageStore as FullMessageStore
from agentik.storage._protocols import FullWorkingMemoryStore as FullWorkingMemoryStore
from agentik.storage._protocols import MessageStore as MessageStore
from agentik.storage._protocols import ReflectionStore as ReflectionStore
from agentik.storage._protocols import SecretStore as SecretStore
from agentik.storage._protocols import SkillStore as SkillStore
from agentik.storage._protocols import Storage as Storage
from agentik.storage._protocols import StorageBundle as StorageBundle
from agentik.storage._protocols import WorkingMemoryStore as WorkingMemoryStore
from agentik.storage._values import Approval as Approval
from agentik.storage._values import ConversationSnapshot as ConversationSnapshot
from agentik.storage._values import KeyedTurn as KeyedTurn
from agentik.storage._values import Summary as Summary
from agentik.storage._values import TurnRecord as TurnRecord
from agentik.storage._writer import WriterStats as WriterStats
from agentik.storage.postgres._open import open_postgres_storage as open_postgres_storage
from agentik.storage.sqlite._connect import Synchronous as Synchronous
from agentik.storage.sqlite._open import open_sqlite_storage as open_sqlite_storage
from agentik.storage.sqlite._open import writer_stats as writer_stats

__all__ = [
    "Approval",
    "ArchiveRecord",
    "ArchivedApproval",
    "ArchivedFailure",
    "ArchivedMessage",
    "ArchivedNote",
    "ArchivedReflection",
    "ArchivedSummary",
    "ConversationOwnership",
    "ConversationSnapshot",
    "FullMessageStore",
    "FullWorkingMemoryStore",
    "KeyedTurn",
    "MessageStore",
    "Pending",
    "PendingStatistics",
    "ReflectionStore",
    "SecretStore",
    "SkillStore",
    "Storage",
    "StorageBundle",
    "Summary",
    "Synchronous",
    "TurnRecord",
    "WorkingMemoryStore",
    "WriterStats",
    "full_storage",
    "in_memory_storage",
    "open_postgres_storage",
    "open_sqlite_storage",
    "writer_stats",
]

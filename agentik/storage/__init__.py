"""Storage: the four store protocols, the bundle, and the backends."""

from agentik.storage._archive import ArchivedApproval as ArchivedApproval
from agentik.storage._archive import ArchivedFailure as ArchivedFailure
from agentik.storage._archive import ArchivedMessage as ArchivedMessage
from agentik.storage._archive import ArchivedNote as ArchivedNote
from agentik.storage._archive import ArchivedReflection as ArchivedReflection
from agentik.storage._archive import ArchivedSummary as ArchivedSummary
from agentik.storage._archive import ArchiveRecord as ArchiveRecord
from agentik.storage._in_memory import in_memory_storage as in_memory_storage
from agentik.storage._pending import Pending as Pending
from agentik.storage._pending import PendingStatistics as PendingStatistics
from agentik.storage._protocols import (
    Approval as Approval,
)
from agentik.storage._protocols import (
    ArchivedMemory as ArchivedMemory,
)
from agentik.storage._protocols import (
    ConversationArchiver as ConversationArchiver,
)
from agentik.storage._protocols import (
    ConversationDeleter as ConversationDeleter,
)
from agentik.storage._protocols import (
    ConversationLoader as ConversationLoader,
)
from agentik.storage._protocols import (
    ConversationOwnership as ConversationOwnership,
)
from agentik.storage._protocols import (
    ConversationSnapshot as ConversationSnapshot,
)
from agentik.storage._protocols import (
    IdempotencyKeyIndex as IdempotencyKeyIndex,
)
from agentik.storage._protocols import (
    InterruptedTurnIndex as InterruptedTurnIndex,
)
from agentik.storage._protocols import (
    KeyedTurn as KeyedTurn,
)
from agentik.storage._protocols import (
    MessageStore as MessageStore,
)
from agentik.storage._protocols import (
    NodeCount as NodeCount,
)
from agentik.storage._protocols import (
    NowaitSubmitter as NowaitSubmitter,
)
from agentik.storage._protocols import (
    ReflectionStore as ReflectionStore,
)
from agentik.storage._protocols import (
    SecretKeeper as SecretKeeper,
)
from agentik.storage._protocols import (
    SecretStore as SecretStore,
)
from agentik.storage._protocols import (
    SkillStore as SkillStore,
)
from agentik.storage._protocols import (
    StorageBundle as StorageBundle,
)
from agentik.storage._protocols import (
    Summary as Summary,
)
from agentik.storage._protocols import (
    SummaryHistory as SummaryHistory,
)
from agentik.storage._protocols import (
    SummaryStore as SummaryStore,
)
from agentik.storage._protocols import (
    TurnLedger as TurnLedger,
)
from agentik.storage._protocols import (
    TurnRecord as TurnRecord,
)
from agentik.storage._protocols import (
    WorkingMemoryStore as WorkingMemoryStore,
)
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
    "ArchivedMemory",
    "ArchivedMessage",
    "ArchivedNote",
    "ArchivedReflection",
    "ArchivedSummary",
    "ConversationArchiver",
    "ConversationDeleter",
    "ConversationLoader",
    "ConversationOwnership",
    "ConversationSnapshot",
    "IdempotencyKeyIndex",
    "InterruptedTurnIndex",
    "KeyedTurn",
    "MessageStore",
    "NodeCount",
    "NowaitSubmitter",
    "Pending",
    "PendingStatistics",
    "ReflectionStore",
    "SecretKeeper",
    "SecretStore",
    "SkillStore",
    "StorageBundle",
    "Summary",
    "SummaryHistory",
    "SummaryStore",
    "Synchronous",
    "TurnLedger",
    "TurnRecord",
    "WorkingMemoryStore",
    "WriterStats",
    "in_memory_storage",
    "open_postgres_storage",
    "open_sqlite_storage",
    "writer_stats",
]

"""Storage: the store protocols, the bundles, and the backends.

A ``StorageBundle`` holds the four seed stores (DESIGN.md); a ``Storage`` is
the bundle with every capability agentik uses (``FullMessageStore``,
``FullWorkingMemoryStore``), which every backend here yields and
``full_storage`` makes of a seed-only bundle (docs/storage.md).
"""

from agentik._errors import CommitInDoubt as CommitInDoubt
from agentik._errors import DuplicateKeyError as DuplicateKeyError
from agentik._errors import NotOwnedError as NotOwnedError
from agentik._errors import SchemaVersionError as SchemaVersionError
from agentik._errors import StoreClosedError as StoreClosedError
from agentik._errors import StoreError as StoreError
from agentik._public import publish as _publish
from agentik._sync import Pending as Pending
from agentik._sync import PendingStatistics as PendingStatistics
from agentik.storage._archive import ArchivedApproval as ArchivedApproval
from agentik.storage._archive import ArchivedFailure as ArchivedFailure
from agentik.storage._archive import ArchivedMessage as ArchivedMessage
from agentik.storage._archive import ArchivedNote as ArchivedNote
from agentik.storage._archive import ArchivedOutput as ArchivedOutput
from agentik.storage._archive import ArchivedReflection as ArchivedReflection
from agentik.storage._archive import ArchivedSummary as ArchivedSummary
from agentik.storage._archive import ArchiveRecord as ArchiveRecord
from agentik.storage._common import Clock as Clock
from agentik.storage._common import utc_now as utc_now
from agentik.storage._degraded import full_storage as full_storage
from agentik.storage._in_memory import in_memory_storage as in_memory_storage
from agentik.storage._in_use import DatabaseLock as DatabaseLock
from agentik.storage._in_use import exclusive_use as exclusive_use
from agentik.storage._in_use import hold_sqlite_database as hold_sqlite_database
from agentik.storage._jsonl import MEDIA_TYPE as MEDIA_TYPE
from agentik.storage._jsonl import ArchiveFormatError as ArchiveFormatError
from agentik.storage._jsonl import header_line as header_line
from agentik.storage._jsonl import read_archive as read_archive
from agentik.storage._jsonl import record_line as record_line
from agentik.storage._jsonl import split_lines as split_lines
from agentik.storage._lease_state import LeaseLapsedError as LeaseLapsedError
from agentik.storage._lease_state import LeaseState as LeaseState
from agentik.storage._location import describe_location as describe_location
from agentik.storage._location import is_postgres_url as is_postgres_url
from agentik.storage._location import open_storage as open_storage
from agentik.storage._ownership import ConversationOwnership as ConversationOwnership
from agentik.storage._protocols import FullMessageStore as FullMessageStore
from agentik.storage._protocols import FullWorkingMemoryStore as FullWorkingMemoryStore
from agentik.storage._protocols import MessageStore as MessageStore
from agentik.storage._protocols import ReflectionStore as ReflectionStore
from agentik.storage._protocols import SecretStore as SecretStore
from agentik.storage._protocols import SkillStore as SkillStore
from agentik.storage._protocols import Storage as Storage
from agentik.storage._protocols import StorageBundle as StorageBundle
from agentik.storage._protocols import WorkingMemoryStore as WorkingMemoryStore
from agentik.storage._shards import DEFAULT_SHARDS as DEFAULT_SHARDS
from agentik.storage._shards import MAX_SHARDS as MAX_SHARDS
from agentik.storage._shards import shard_of as shard_of
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
    "DEFAULT_SHARDS",
    "MAX_SHARDS",
    "MEDIA_TYPE",
    "Approval",
    "ArchiveFormatError",
    "ArchiveRecord",
    "ArchivedApproval",
    "ArchivedFailure",
    "ArchivedMessage",
    "ArchivedNote",
    "ArchivedOutput",
    "ArchivedReflection",
    "ArchivedSummary",
    "Clock",
    "CommitInDoubt",
    "ConversationOwnership",
    "ConversationSnapshot",
    "DatabaseLock",
    "DuplicateKeyError",
    "FullMessageStore",
    "FullWorkingMemoryStore",
    "KeyedTurn",
    "LeaseLapsedError",
    "LeaseState",
    "MessageStore",
    "NotOwnedError",
    "Pending",
    "PendingStatistics",
    "ReflectionStore",
    "SchemaVersionError",
    "SecretStore",
    "SkillStore",
    "Storage",
    "StorageBundle",
    "StoreClosedError",
    "StoreError",
    "Summary",
    "Synchronous",
    "TurnRecord",
    "WorkingMemoryStore",
    "WriterStats",
    "describe_location",
    "exclusive_use",
    "full_storage",
    "header_line",
    "hold_sqlite_database",
    "in_memory_storage",
    "is_postgres_url",
    "open_postgres_storage",
    "open_sqlite_storage",
    "open_storage",
    "read_archive",
    "record_line",
    "shard_of",
    "split_lines",
    "utc_now",
    "writer_stats",
]

_publish(globals(), __all__, __name__)

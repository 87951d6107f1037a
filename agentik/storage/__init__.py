"""Storage: the four store protocols, the bundle, and the backends."""

from agentik.storage._in_memory import in_memory_storage as in_memory_storage
from agentik.storage._pending import Pending as Pending
from agentik.storage._protocols import (
    MessageStore as MessageStore,
)
from agentik.storage._protocols import (
    ReflectionStore as ReflectionStore,
)
from agentik.storage._protocols import (
    SkillStore as SkillStore,
)
from agentik.storage._protocols import (
    StorageBundle as StorageBundle,
)
from agentik.storage._protocols import (
    WorkingMemoryStore as WorkingMemoryStore,
)

__all__ = [
    "MessageStore",
    "Pending",
    "ReflectionStore",
    "SkillStore",
    "StorageBundle",
    "WorkingMemoryStore",
    "in_memory_storage",
]

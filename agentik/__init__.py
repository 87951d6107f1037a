"""agentik: an LLM agent runtime on trio.

This module only re-exports the public API; everything lives in private
modules of the subpackages. Names here are a contract: add, never rename.
"""

from agentik._errors import AgentikError as AgentikError
from agentik._errors import DuplicateKeyError as DuplicateKeyError
from agentik._errors import ModelBackendError as ModelBackendError
from agentik._errors import OverloadedError as OverloadedError
from agentik._errors import ProtocolViolation as ProtocolViolation
from agentik._errors import SchemaVersionError as SchemaVersionError
from agentik._errors import StoreClosedError as StoreClosedError
from agentik._errors import StoreError as StoreError
from agentik._errors import ToolError as ToolError
from agentik._errors import TurnError as TurnError
from agentik._memory import MemoryEntry as MemoryEntry
from agentik._memory import Reflection as Reflection
from agentik._memory import Skill as Skill
from agentik._memory import SkillSummary as SkillSummary
from agentik._messages import Message as Message
from agentik._messages import Role as Role
from agentik._messages import TokenStats as TokenStats
from agentik._messages import TokenUsage as TokenUsage
from agentik._messages import ToolCall as ToolCall
from agentik.models import ChatModel as ChatModel
from agentik.models import ModelRequest as ModelRequest
from agentik.models import ModelResponse as ModelResponse
from agentik.models import StreamingChatModel as StreamingChatModel
from agentik.models import TextDelta as TextDelta
from agentik.models import ToolCallDelta as ToolCallDelta
from agentik.storage import MessageStore as MessageStore
from agentik.storage import Pending as Pending
from agentik.storage import ReflectionStore as ReflectionStore
from agentik.storage import SkillStore as SkillStore
from agentik.storage import StorageBundle as StorageBundle
from agentik.storage import WorkingMemoryStore as WorkingMemoryStore
from agentik.toolsets import NamedTool as NamedTool

__version__ = "0.1.0"

__all__ = [
    "AgentikError",
    "ChatModel",
    "DuplicateKeyError",
    "MemoryEntry",
    "Message",
    "MessageStore",
    "ModelBackendError",
    "ModelRequest",
    "ModelResponse",
    "NamedTool",
    "OverloadedError",
    "Pending",
    "ProtocolViolation",
    "Reflection",
    "ReflectionStore",
    "Role",
    "SchemaVersionError",
    "Skill",
    "SkillStore",
    "SkillSummary",
    "StorageBundle",
    "StoreClosedError",
    "StoreError",
    "StreamingChatModel",
    "TextDelta",
    "TokenStats",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "ToolError",
    "TurnError",
    "WorkingMemoryStore",
    "__version__",
]

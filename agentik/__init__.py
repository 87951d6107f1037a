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
from agentik.agent import AgentStats as AgentStats
from agentik.agent import ChatAgent as ChatAgent
from agentik.agent import SystemPromptContributor as SystemPromptContributor
from agentik.agent import ToolCallFinished as ToolCallFinished
from agentik.agent import ToolCallStarted as ToolCallStarted
from agentik.agent import ToolsetSource as ToolsetSource
from agentik.agent import ToolsetStatus as ToolsetStatus
from agentik.agent import TurnEvent as TurnEvent
from agentik.agent import TurnFailed as TurnFailed
from agentik.agent import TurnFinished as TurnFinished
from agentik.agent import TurnResult as TurnResult
from agentik.agent import open_chat_agent as open_chat_agent
from agentik.models import ChatModel as ChatModel
from agentik.models import ModelRequest as ModelRequest
from agentik.models import ModelResponse as ModelResponse
from agentik.models import ModelStreamEvent as ModelStreamEvent
from agentik.models import OpenAICompatibleModel as OpenAICompatibleModel
from agentik.models import RetryPolicy as RetryPolicy
from agentik.models import ScriptedModel as ScriptedModel
from agentik.models import StreamingChatModel as StreamingChatModel
from agentik.models import TextDelta as TextDelta
from agentik.models import ToolCallDelta as ToolCallDelta
from agentik.storage import MessageStore as MessageStore
from agentik.storage import Pending as Pending
from agentik.storage import ReflectionStore as ReflectionStore
from agentik.storage import SkillStore as SkillStore
from agentik.storage import StorageBundle as StorageBundle
from agentik.storage import WorkingMemoryStore as WorkingMemoryStore
from agentik.storage import in_memory_storage as in_memory_storage
from agentik.storage import open_sqlite_storage as open_sqlite_storage
from agentik.toolsets import DISABLE_TOOLSET as DISABLE_TOOLSET
from agentik.toolsets import ENABLE_TOOLSET as ENABLE_TOOLSET
from agentik.toolsets import Error as Error
from agentik.toolsets import NamedTool as NamedTool
from agentik.toolsets import Run as Run
from agentik.toolsets import ToolHandler as ToolHandler
from agentik.toolsets import ToolsetActivation as ToolsetActivation
from agentik.toolsets import ToolsetContribution as ToolsetContribution
from agentik.toolsets import ToolsetIndex as ToolsetIndex
from agentik.toolsets import dispatch as dispatch
from agentik.toolsets import parse_arguments as parse_arguments
from agentik.toolsets import render_toolset_section as render_toolset_section
from agentik.toolsets import tool as tool
from agentik.toolsets import toolset_control_tools as toolset_control_tools

__version__ = "0.1.0"

__all__ = [
    "DISABLE_TOOLSET",
    "ENABLE_TOOLSET",
    "AgentStats",
    "AgentikError",
    "ChatAgent",
    "ChatModel",
    "DuplicateKeyError",
    "Error",
    "MemoryEntry",
    "Message",
    "MessageStore",
    "ModelBackendError",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "NamedTool",
    "OpenAICompatibleModel",
    "OverloadedError",
    "Pending",
    "ProtocolViolation",
    "Reflection",
    "ReflectionStore",
    "RetryPolicy",
    "Role",
    "Run",
    "SchemaVersionError",
    "ScriptedModel",
    "Skill",
    "SkillStore",
    "SkillSummary",
    "StorageBundle",
    "StoreClosedError",
    "StoreError",
    "StreamingChatModel",
    "SystemPromptContributor",
    "TextDelta",
    "TokenStats",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolError",
    "ToolHandler",
    "ToolsetActivation",
    "ToolsetContribution",
    "ToolsetIndex",
    "ToolsetSource",
    "ToolsetStatus",
    "TurnError",
    "TurnEvent",
    "TurnFailed",
    "TurnFinished",
    "TurnResult",
    "WorkingMemoryStore",
    "__version__",
    "dispatch",
    "in_memory_storage",
    "open_chat_agent",
    "open_sqlite_storage",
    "parse_arguments",
    "render_toolset_section",
    "tool",
    "toolset_control_tools",
]

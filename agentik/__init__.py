"""agentik: an LLM agent runtime on trio.

This module only re-exports the public API; everything lives in private
modules of the subpackages. Names here are a contract: add, never rename.
"""

import importlib
from typing import TYPE_CHECKING

from agentik._clients import Client as Client
from agentik._config import ConfigError as ConfigError
from agentik._config import Limits as Limits
from agentik._config import ModelSettings as ModelSettings
from agentik._config import ServerConfig as ServerConfig
from agentik._config import load_config as load_config
from agentik._errors import AgentikError as AgentikError
from agentik._errors import ApprovalError as ApprovalError
from agentik._errors import DuplicateKeyError as DuplicateKeyError
from agentik._errors import ModelBackendError as ModelBackendError
from agentik._errors import NotOwnedError as NotOwnedError
from agentik._errors import OverloadedError as OverloadedError
from agentik._errors import ProtocolViolation as ProtocolViolation
from agentik._errors import SchemaVersionError as SchemaVersionError
from agentik._errors import StoreClosedError as StoreClosedError
from agentik._errors import StoreError as StoreError
from agentik._errors import TooLargeError as TooLargeError
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
from agentik._public import publish as _publish
from agentik._sync import Pending as Pending
from agentik._version import __version__ as __version__
from agentik.agent import AgentStats as AgentStats
from agentik.agent import ApprovalRequest as ApprovalRequest
from agentik.agent import ChatAgent as ChatAgent
from agentik.agent import ContentLimits as ContentLimits
from agentik.agent import ContextPolicy as ContextPolicy
from agentik.agent import ElicitationAsked as ElicitationAsked
from agentik.agent import ElicitationError as ElicitationError
from agentik.agent import ElicitationRequest as ElicitationRequest
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
from agentik.models import ModelLimits as ModelLimits
from agentik.models import ModelRequest as ModelRequest
from agentik.models import ModelResponse as ModelResponse
from agentik.models import ModelStreamEvent as ModelStreamEvent
from agentik.models import OpenAICompatibleModel as OpenAICompatibleModel
from agentik.models import RetryPolicy as RetryPolicy
from agentik.models import ScriptedModel as ScriptedModel
from agentik.models import StreamingChatModel as StreamingChatModel
from agentik.models import TextDelta as TextDelta
from agentik.models import ToolCallDelta as ToolCallDelta
from agentik.storage import Approval as Approval
from agentik.storage import ArchivedApproval as ArchivedApproval
from agentik.storage import ArchivedFailure as ArchivedFailure
from agentik.storage import ArchivedMessage as ArchivedMessage
from agentik.storage import ArchivedNote as ArchivedNote
from agentik.storage import ArchivedReflection as ArchivedReflection
from agentik.storage import ArchivedSummary as ArchivedSummary
from agentik.storage import ArchiveRecord as ArchiveRecord
from agentik.storage import ConversationSnapshot as ConversationSnapshot
from agentik.storage import KeyedTurn as KeyedTurn
from agentik.storage import MessageStore as MessageStore
from agentik.storage import ReflectionStore as ReflectionStore
from agentik.storage import SecretStore as SecretStore
from agentik.storage import SkillStore as SkillStore
from agentik.storage import StorageBundle as StorageBundle
from agentik.storage import Summary as Summary
from agentik.storage import TurnRecord as TurnRecord
from agentik.storage import WorkingMemoryStore as WorkingMemoryStore
from agentik.storage import WriterStats as WriterStats
from agentik.storage import in_memory_storage as in_memory_storage
from agentik.storage import open_postgres_storage as open_postgres_storage
from agentik.storage import open_sqlite_storage as open_sqlite_storage
from agentik.storage import writer_stats as writer_stats
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

if TYPE_CHECKING:
    from agentik.mcp import HttpServer as HttpServer
    from agentik.mcp import McpConfigError as McpConfigError
    from agentik.mcp import McpHealth as McpHealth
    from agentik.mcp import McpServerConfig as McpServerConfig
    from agentik.mcp import McpState as McpState
    from agentik.mcp import McpToolset as McpToolset
    from agentik.mcp import StdioServer as StdioServer
    from agentik.mcp import open_mcp_toolsets as open_mcp_toolsets
    from agentik.mcp import parse_mcp_servers as parse_mcp_servers
    from agentik.server import serve_agentik as serve_agentik

# MCP pulls in the mcp SDK (over a second of imports) and the server Starlette
# and httptools: load them on first use, so an embedded agent imports neither.
_LAZY = {
    "HttpServer": "agentik.mcp",
    "McpConfigError": "agentik.mcp",
    "McpHealth": "agentik.mcp",
    "McpServerConfig": "agentik.mcp",
    "McpState": "agentik.mcp",
    "McpToolset": "agentik.mcp",
    "StdioServer": "agentik.mcp",
    "open_mcp_toolsets": "agentik.mcp",
    "parse_mcp_servers": "agentik.mcp",
    "serve_agentik": "agentik.server",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentik' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    _publish({name: value}, [name], __name__)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = [
    "DISABLE_TOOLSET",
    "ENABLE_TOOLSET",
    "AgentStats",
    "AgentikError",
    "Approval",
    "ApprovalError",
    "ApprovalRequest",
    "ArchiveRecord",
    "ArchivedApproval",
    "ArchivedFailure",
    "ArchivedMessage",
    "ArchivedNote",
    "ArchivedReflection",
    "ArchivedSummary",
    "ChatAgent",
    "ChatModel",
    "Client",
    "ConfigError",
    "ContentLimits",
    "ContextPolicy",
    "ConversationSnapshot",
    "DuplicateKeyError",
    "ElicitationAsked",
    "ElicitationError",
    "ElicitationRequest",
    "Error",
    "HttpServer",
    "KeyedTurn",
    "Limits",
    "McpConfigError",
    "McpHealth",
    "McpServerConfig",
    "McpState",
    "McpToolset",
    "MemoryEntry",
    "Message",
    "MessageStore",
    "ModelBackendError",
    "ModelLimits",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "ModelStreamEvent",
    "NamedTool",
    "NotOwnedError",
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
    "SecretStore",
    "ServerConfig",
    "Skill",
    "SkillStore",
    "SkillSummary",
    "StdioServer",
    "StorageBundle",
    "StoreClosedError",
    "StoreError",
    "StreamingChatModel",
    "Summary",
    "SystemPromptContributor",
    "TextDelta",
    "TokenStats",
    "TokenUsage",
    "TooLargeError",
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
    "TurnRecord",
    "TurnResult",
    "WorkingMemoryStore",
    "WriterStats",
    "__version__",
    "dispatch",
    "in_memory_storage",
    "load_config",
    "open_chat_agent",
    "open_mcp_toolsets",
    "open_postgres_storage",
    "open_sqlite_storage",
    "parse_arguments",
    "parse_mcp_servers",
    "render_toolset_section",
    "serve_agentik",
    "tool",
    "toolset_control_tools",
    "writer_stats",
]

_publish(globals(), __all__, __name__)

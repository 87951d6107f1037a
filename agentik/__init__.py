"""agentik: an LLM agent runtime on trio.

This module only re-exports the public API; everything lives in private
modules of the subpackages. Names here are a contract: add, never rename.

What is here, and why (about forty names, as trio and httpx keep theirs):

- every name DESIGN.md pins as ``from agentik import ...``: the values,
  the four store protocols and their bundle, the tools and the pure toolset
  core, the agent and the models, and the names its later contracts fix
  (``ApprovalRequest``, ``ContextPolicy``, ``open_postgres_storage``,
  ``ModelLimits``, ``TurnError``, ``OverloadedError``, ``A2AAgentConfig`` and
  ``open_a2a_toolsets``: remote A2A agents as toolsets, over httpx2, with no SDK);
- what embedding the agent needs besides: the error base classes a caller
  catches (``AgentikError`` and its branches ``StoreError``, ``ToolError``,
  ``ModelBackendError``, ``ApprovalError``: the exception tree is drawn in
  ``agentik._errors``) and ``__version__``.

Everything else public lives in the package it belongs to, in that package's
``__all__``: stream events, elicitation and the agent's knobs in
``agentik.agent``; streaming and retry details in ``agentik.models``; archive
records, turn records, writer statistics and the storage errors in
``agentik.storage``; the control-tool names, ``ToolsetIndex`` and
``parse_arguments`` in ``agentik.toolsets``; the server's configuration and
``serve_agentik`` in ``agentik.server``; MCP in ``agentik.mcp``; test helpers
in ``agentik.testing``. Importing ``agentik`` loads neither the server nor the
MCP SDK.

Names that used to be here still resolve for one release, with a
``DeprecationWarning`` naming their new home (``_MOVED``). ``Pending``, the
internal waiting primitive (``agentik._sync``), is no longer public here.
"""

import importlib
import warnings

from agentik._errors import AgentikError as AgentikError
from agentik._errors import ApprovalError as ApprovalError
from agentik._errors import ModelBackendError as ModelBackendError
from agentik._errors import OverloadedError as OverloadedError
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
from agentik._parts import FilePart as FilePart
from agentik._parts import ImagePart as ImagePart
from agentik._parts import TextPart as TextPart
from agentik._public import publish as _publish
from agentik._version import __version__ as __version__
from agentik.a2a_client import A2AAgentConfig as A2AAgentConfig
from agentik.a2a_client import open_a2a_toolsets as open_a2a_toolsets
from agentik.agent import ApprovalRequest as ApprovalRequest
from agentik.agent import ChatAgent as ChatAgent
from agentik.agent import ContextPolicy as ContextPolicy
from agentik.agent import TurnResult as TurnResult
from agentik.agent import agent_tool as agent_tool
from agentik.agent import open_chat_agent as open_chat_agent
from agentik.models import ChatModel as ChatModel
from agentik.models import ModelLimits as ModelLimits
from agentik.models import ModelRequest as ModelRequest
from agentik.models import ModelResponse as ModelResponse
from agentik.models import OpenAICompatibleModel as OpenAICompatibleModel
from agentik.models import ScriptedModel as ScriptedModel
from agentik.storage import MessageStore as MessageStore
from agentik.storage import ReflectionStore as ReflectionStore
from agentik.storage import SkillStore as SkillStore
from agentik.storage import StorageBundle as StorageBundle
from agentik.storage import WorkingMemoryStore as WorkingMemoryStore
from agentik.storage import in_memory_storage as in_memory_storage
from agentik.storage import open_postgres_storage as open_postgres_storage
from agentik.storage import open_sqlite_storage as open_sqlite_storage
from agentik.toolsets import Error as Error
from agentik.toolsets import NamedTool as NamedTool
from agentik.toolsets import Run as Run
from agentik.toolsets import ToolsetActivation as ToolsetActivation
from agentik.toolsets import ToolsetContribution as ToolsetContribution
from agentik.toolsets import dispatch as dispatch
from agentik.toolsets import render_toolset_section as render_toolset_section
from agentik.toolsets import tool as tool

__all__ = [
    "A2AAgentConfig",
    "AgentikError",
    "ApprovalError",
    "ApprovalRequest",
    "ChatAgent",
    "ChatModel",
    "ContextPolicy",
    "Error",
    "FilePart",
    "ImagePart",
    "MemoryEntry",
    "Message",
    "MessageStore",
    "ModelBackendError",
    "ModelLimits",
    "ModelRequest",
    "ModelResponse",
    "NamedTool",
    "OpenAICompatibleModel",
    "OverloadedError",
    "Reflection",
    "ReflectionStore",
    "Role",
    "Run",
    "ScriptedModel",
    "Skill",
    "SkillStore",
    "SkillSummary",
    "StorageBundle",
    "StoreError",
    "TextPart",
    "TokenStats",
    "TokenUsage",
    "ToolCall",
    "ToolError",
    "ToolsetActivation",
    "ToolsetContribution",
    "TurnError",
    "TurnResult",
    "WorkingMemoryStore",
    "__version__",
    "agent_tool",
    "dispatch",
    "in_memory_storage",
    "open_a2a_toolsets",
    "open_chat_agent",
    "open_postgres_storage",
    "open_sqlite_storage",
    "render_toolset_section",
    "tool",
]

_publish(globals(), __all__, __name__)


def _moved(home: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, home)


# Names agentik 0.1.0 exported here, now in their package: each still resolves,
# with a DeprecationWarning, for one release. The server and MCP modules are
# imported only when one of their names is asked for.
_MOVED: dict[str, str] = {
    **_moved(
        "agentik.agent",
        "AgentStats",
        "ContentLimits",
        "ElicitationAsked",
        "ElicitationError",
        "ElicitationRequest",
        "SystemPromptContributor",
        "TooLargeError",
        "ToolCallFinished",
        "ToolCallStarted",
        "ToolsetSource",
        "ToolsetStatus",
        "TurnEvent",
        "TurnFailed",
        "TurnFinished",
    ),
    **_moved(
        "agentik.models",
        "ModelStreamEvent",
        "RetryPolicy",
        "StreamingChatModel",
        "TextDelta",
        "ToolCallDelta",
    ),
    **_moved(
        "agentik.storage",
        "Approval",
        "ArchiveRecord",
        "ArchivedApproval",
        "ArchivedFailure",
        "ArchivedMessage",
        "ArchivedNote",
        "ArchivedReflection",
        "ArchivedSummary",
        "ConversationSnapshot",
        "DuplicateKeyError",
        "KeyedTurn",
        "NotOwnedError",
        "Pending",
        "SchemaVersionError",
        "SecretStore",
        "StoreClosedError",
        "Summary",
        "TurnRecord",
        "WriterStats",
        "writer_stats",
    ),
    **_moved(
        "agentik.toolsets",
        "DISABLE_TOOLSET",
        "ENABLE_TOOLSET",
        "ToolHandler",
        "ToolsetIndex",
        "parse_arguments",
        "toolset_control_tools",
    ),
    **_moved(
        "agentik.server",
        "Client",
        "ConfigError",
        "Limits",
        "ModelSettings",
        "ProtocolViolation",
        "ServerConfig",
        "load_config",
        "serve_agentik",
    ),
    **_moved(
        "agentik.mcp",
        "HttpServer",
        "McpConfigError",
        "McpHealth",
        "McpServerConfig",
        "McpState",
        "McpToolset",
        "StdioServer",
        "open_mcp_toolsets",
        "parse_mcp_servers",
    ),
}


def __getattr__(name: str) -> object:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'agentik' has no attribute {name!r}")
    warnings.warn(
        f"agentik.{name} is deprecated; import it from {home}", DeprecationWarning, stacklevel=2
    )
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    """The public names and the module's dunders: no submodules, no helpers."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})

"""The agent: conversation tasks, the turn loop, and the supervisor.

Besides ``open_chat_agent``, ``ChatAgent`` and ``agent_tool`` (re-exported by
``agentik``): ``agent_conversation_id`` (an agent tool's child conversation),
the events ``ChatAgent.stream`` yields (``TurnEvent``: ``TextDelta``,
``ToolCallDelta``, ``ToolCallStarted``, ``ToolCallFinished``,
``ElicitationAsked``, ``TurnFinished``, ``TurnFailed``), elicitation, the
agent's knobs (``ContentLimits``, ``SystemPromptContributor``, ``ToolsetSource``)
and its statistics.
"""

from agentik._errors import TooLargeError as TooLargeError
from agentik._public import publish as _publish
from agentik.agent._agent_tool import agent_conversation_id as agent_conversation_id
from agentik.agent._agent_tool import agent_tool as agent_tool
from agentik.agent._builtin_tools import BUILTIN_TOOLS as BUILTIN_TOOLS
from agentik.agent._builtin_tools import ConversationTool as ConversationTool
from agentik.agent._chat_agent import ChatAgent as ChatAgent
from agentik.agent._chat_agent import ToolsetStatus as ToolsetStatus
from agentik.agent._content import ImageDescriber as ImageDescriber
from agentik.agent._context import ContextPolicy as ContextPolicy
from agentik.agent._elicitation import ElicitationAction as ElicitationAction
from agentik.agent._elicitation import ElicitationError as ElicitationError
from agentik.agent._elicitation import ElicitationRequest as ElicitationRequest
from agentik.agent._elicitation import OpenQuestions as OpenQuestions
from agentik.agent._elicitation import current_tool_call as current_tool_call
from agentik.agent._elicitation import form_answer as form_answer
from agentik.agent._events import ApprovalRequest as ApprovalRequest
from agentik.agent._events import ElicitationAsked as ElicitationAsked
from agentik.agent._events import ToolCallFinished as ToolCallFinished
from agentik.agent._events import ToolCallStarted as ToolCallStarted
from agentik.agent._events import TurnEvent as TurnEvent
from agentik.agent._events import TurnFailed as TurnFailed
from agentik.agent._events import TurnFinished as TurnFinished
from agentik.agent._events import TurnResult as TurnResult
from agentik.agent._limits import ContentLimits as ContentLimits
from agentik.agent._open import DEFAULT_SYSTEM_PROMPT as DEFAULT_SYSTEM_PROMPT
from agentik.agent._open import open_chat_agent as open_chat_agent
from agentik.agent._prompt import BasePrompt as BasePrompt
from agentik.agent._prompt import PromptContext as PromptContext
from agentik.agent._prompt import ReflectionsSection as ReflectionsSection
from agentik.agent._prompt import SkillsCatalog as SkillsCatalog
from agentik.agent._prompt import SystemPromptContributor as SystemPromptContributor
from agentik.agent._prompt import ToolsetSection as ToolsetSection
from agentik.agent._prompt import WorkingMemorySection as WorkingMemorySection
from agentik.agent._recovery import is_superseded as is_superseded
from agentik.agent._runtime import ToolsetSource as ToolsetSource
from agentik.agent._stats import AgentStats as AgentStats
from agentik.agent._stats import Histogram as Histogram
from agentik.agent._turn_events import SUPERSEDED_REASON as SUPERSEDED_REASON
from agentik.models import TextDelta as TextDelta
from agentik.models import ToolCallDelta as ToolCallDelta

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_SYSTEM_PROMPT",
    "SUPERSEDED_REASON",
    "AgentStats",
    "ApprovalRequest",
    "BasePrompt",
    "ChatAgent",
    "ContentLimits",
    "ContextPolicy",
    "ConversationTool",
    "ElicitationAction",
    "ElicitationAsked",
    "ElicitationError",
    "ElicitationRequest",
    "Histogram",
    "ImageDescriber",
    "OpenQuestions",
    "PromptContext",
    "ReflectionsSection",
    "SkillsCatalog",
    "SystemPromptContributor",
    "TextDelta",
    "TooLargeError",
    "ToolCallDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolsetSection",
    "ToolsetSource",
    "ToolsetStatus",
    "TurnEvent",
    "TurnFailed",
    "TurnFinished",
    "TurnResult",
    "WorkingMemorySection",
    "agent_conversation_id",
    "agent_tool",
    "current_tool_call",
    "form_answer",
    "is_superseded",
    "open_chat_agent",
]

_publish(globals(), __all__, __name__)

"""Model backends: the protocol, a scripted model, an OpenAI-compatible client."""

from agentik._public import publish as _publish
from agentik.models._fence import current_call_fence as current_call_fence
from agentik.models._fence import pass_fence as pass_fence
from agentik.models._gate import FifoGate as FifoGate
from agentik.models._gate import Gate as Gate
from agentik.models._limits import ModelLimits as ModelLimits
from agentik.models._openai_compat import DEFAULT_RETRY as DEFAULT_RETRY
from agentik.models._openai_compat import OpenAICompatibleModel as OpenAICompatibleModel
from agentik.models._pools import DEFAULT_MAX_CONNECTIONS as DEFAULT_MAX_CONNECTIONS
from agentik.models._protocol import ChatModel as ChatModel
from agentik.models._protocol import ModelRequest as ModelRequest
from agentik.models._protocol import ModelResponse as ModelResponse
from agentik.models._protocol import ModelStreamEvent as ModelStreamEvent
from agentik.models._protocol import PartKind as PartKind
from agentik.models._protocol import StreamingChatModel as StreamingChatModel
from agentik.models._protocol import TextDelta as TextDelta
from agentik.models._protocol import ToolCallDelta as ToolCallDelta
from agentik.models._protocol import accepts_parts_of as accepts_parts_of
from agentik.models._protocol import structured_output_of as structured_output_of
from agentik.models._rate_limits import RateLimitAnswer as RateLimitAnswer
from agentik.models._rate_limits import read_rate_limit as read_rate_limit
from agentik.models._responders import bench_responder as bench_responder
from agentik.models._responders import demo_responder as demo_responder
from agentik.models._retry import RetryPolicy as RetryPolicy
from agentik.models._scheduled import AdmissionAware as AdmissionAware
from agentik.models._scheduled import ScheduledModel as ScheduledModel
from agentik.models._scheduled import schedule as schedule
from agentik.models._scheduler import ModelScheduler as ModelScheduler
from agentik.models._scheduler import current_fairness_key as current_fairness_key
from agentik.models._scripted import Responder as Responder
from agentik.models._scripted import ScriptedModel as ScriptedModel
from agentik.models._scripted import replay as replay
from agentik.models._tickets import ScheduledCall as ScheduledCall
from agentik.models._tickets import SchedulerStats as SchedulerStats

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_RETRY",
    "AdmissionAware",
    "ChatModel",
    "FifoGate",
    "Gate",
    "ModelLimits",
    "ModelRequest",
    "ModelResponse",
    "ModelScheduler",
    "ModelStreamEvent",
    "OpenAICompatibleModel",
    "PartKind",
    "RateLimitAnswer",
    "Responder",
    "RetryPolicy",
    "ScheduledCall",
    "ScheduledModel",
    "SchedulerStats",
    "ScriptedModel",
    "StreamingChatModel",
    "TextDelta",
    "ToolCallDelta",
    "accepts_parts_of",
    "bench_responder",
    "current_call_fence",
    "current_fairness_key",
    "demo_responder",
    "pass_fence",
    "read_rate_limit",
    "replay",
    "schedule",
    "structured_output_of",
]

_publish(globals(), __all__, __name__)

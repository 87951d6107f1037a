"""Model backends: the protocol, a scripted model, an OpenAI-compatible client."""

from agentik.models._gate import FifoGate as FifoGate
from agentik.models._gate import Gate as Gate
from agentik.models._openai_compat import DEFAULT_MAX_CONNECTIONS as DEFAULT_MAX_CONNECTIONS
from agentik.models._openai_compat import DEFAULT_RETRY as DEFAULT_RETRY
from agentik.models._openai_compat import OpenAICompatibleModel as OpenAICompatibleModel
from agentik.models._protocol import ChatModel as ChatModel
from agentik.models._protocol import ModelRequest as ModelRequest
from agentik.models._protocol import ModelResponse as ModelResponse
from agentik.models._protocol import ModelStreamEvent as ModelStreamEvent
from agentik.models._protocol import StreamingChatModel as StreamingChatModel
from agentik.models._protocol import TextDelta as TextDelta
from agentik.models._protocol import ToolCallDelta as ToolCallDelta
from agentik.models._responders import bench_responder as bench_responder
from agentik.models._responders import demo_responder as demo_responder
from agentik.models._retry import RetryPolicy as RetryPolicy
from agentik.models._scripted import Responder as Responder
from agentik.models._scripted import ScriptedModel as ScriptedModel
from agentik.models._scripted import replay as replay

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_RETRY",
    "ChatModel",
    "FifoGate",
    "Gate",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "OpenAICompatibleModel",
    "Responder",
    "RetryPolicy",
    "ScriptedModel",
    "StreamingChatModel",
    "TextDelta",
    "ToolCallDelta",
    "bench_responder",
    "demo_responder",
    "replay",
]

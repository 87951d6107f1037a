"""Model backends: the protocol, a scripted model, an OpenAI-compatible client."""

from agentik.models._protocol import ChatModel as ChatModel
from agentik.models._protocol import ModelRequest as ModelRequest
from agentik.models._protocol import ModelResponse as ModelResponse
from agentik.models._protocol import ModelStreamEvent as ModelStreamEvent
from agentik.models._protocol import StreamingChatModel as StreamingChatModel
from agentik.models._protocol import TextDelta as TextDelta
from agentik.models._protocol import ToolCallDelta as ToolCallDelta

__all__ = [
    "ChatModel",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "StreamingChatModel",
    "TextDelta",
    "ToolCallDelta",
]

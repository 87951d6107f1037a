"""Counting tokens offline: what the context policy and the model-limits
scheduler estimate a request's prompt costs before it is sent. Pure."""

from __future__ import annotations

from collections.abc import Callable

from agentik._messages import Message

MESSAGE_OVERHEAD = 4
"""Tokens of framing per message (role, separators): what OpenAI's chat format
adds, rounded up."""


def estimate_tokens(text: str) -> int:
    """An offline estimate of the tokens in ``text``: one per three bytes of
    UTF-8, rounded up.

    Real tokenizers (cl100k, o200k, Llama 3's) take about four bytes a token for
    English and about one token a character (three bytes) for Chinese or
    Japanese: this overestimates English by a third and is close for CJK. An
    overestimate only leaves room unused; an underestimate would send requests
    the model refuses. No vocabulary is downloaded. ASCII text costs no
    encoding (its length is its size in bytes)."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return (size + 2) // 3


def message_tokens(message: Message, count: Callable[[str], int]) -> int:
    """What ``message`` costs in a request."""
    tokens = MESSAGE_OVERHEAD + count(message.content)
    for call in message.tool_calls:
        tokens += MESSAGE_OVERHEAD + count(call.name) + count(call.arguments)
    return tokens

"""Content capture never puts a model credential on a span: a backend that
echoes the API key in its answer, in a tool call's arguments and in an error
body (a real HTTP server on 127.0.0.1, the OpenAI-compatible backend), with
``capture_content=True``; every attribute, event and status of every span is
searched for the key."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentik import TurnError, tool
from agentik.agent import open_chat_agent
from agentik.models import OpenAICompatibleModel, RetryPolicy
from agentik.storage import in_memory_storage
from tests.models.chat_server import ChatServer, Json, completion

KEY = "sk-test-secret-0123456789"


@tool
async def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


@pytest.fixture
async def chat_server(nursery: trio.Nursery) -> AsyncIterator[ChatServer]:
    server = ChatServer()
    await server.start(nursery)
    yield server
    assert server.problems == []


async def test_captured_content_never_holds_the_api_key(chat_server: ChatServer) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chat_server.script(
        Json(completion(tool_calls=[("call_1", "lookup", json.dumps({"query": KEY}))])),
        Json(completion(f"you sent Bearer {KEY}")),
        Json({"error": {"message": f"invalid key {KEY}"}}, status=401),
    )
    async with (
        OpenAICompatibleModel(
            chat_server.base_url, "m", KEY, retry=RetryPolicy(max_retries=0)
        ) as model,
        open_chat_agent(
            model=model,
            storage=in_memory_storage(),
            tools=[lookup],
            tracer_provider=provider,
            capture_content=True,
        ) as agent,
    ):
        result = await agent.send("c", "what did I send?")
        with pytest.raises(TurnError):
            await agent.send("c", "again")
    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} >= {"chat m", "execute_tool lookup", "invoke_agent agentik"}
    captured = [s for s in spans if "gen_ai.input.messages" in (s.attributes or {})]
    assert captured, "content capture was on: the test would prove nothing"
    for span in spans:
        seen = [
            json.dumps(dict(span.attributes or {})),
            str(span.status.description),
            *(json.dumps(dict(e.attributes or {})) for e in span.events),
        ]
        assert not any(KEY in text for text in seen), f"{span.name} holds the key: {seen}"
    assert result.text == "you sent Bearer ***"

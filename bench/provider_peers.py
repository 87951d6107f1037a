"""``bench.provider``'s workload run by a peer framework, in a child process on
asyncio (the peers' own event loop), with only the standard library and the
peer installed: pydantic-ai (``OpenAIChatModel``) or the OpenAI Agents SDK
(``OpenAIChatCompletionsModel``), each on the openai SDK's client with its
defaults (2 retries honouring Retry-After). Neither has a limiter of its own
to configure. Prints one JSON object: the turns finished (conversation,
start, end, tokens), the failures, the wall time and the CPU.

    python -m bench.provider_peers pydantic-ai URL RUN N TURNS OWNERS SECONDS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

SEP = "\x1f"


def conversations_of(n: int, owners: int) -> list[str]:
    if not owners:
        return [f"c{i}" for i in range(n)]
    base = max(1, n // (10 + owners - 1))
    return [
        f"owner{o}{SEP}c{i}" for o in range(owners) for i in range(base * (10 if o == 0 else 1))
    ]


def pydantic_ai_turn() -> Callable[[str, list[Any], str], Awaitable[tuple[list[Any], int]]]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    agent: Any = None

    async def turn(url: str, history: list[Any], text: str) -> tuple[list[Any], int]:
        nonlocal agent
        if agent is None:
            model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=url, api_key="x"))
            agent = Agent(model)
        result = await agent.run(text, message_history=history)
        return result.all_messages(), result.usage().total_tokens

    return turn


def openai_agents_turn() -> Callable[[str, list[Any], str], Awaitable[tuple[list[Any], int]]]:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    agent: Any = None

    async def turn(url: str, history: list[Any], text: str) -> tuple[list[Any], int]:
        nonlocal agent
        if agent is None:
            client = AsyncOpenAI(base_url=url, api_key="x")
            model = OpenAIChatCompletionsModel(model="fake", openai_client=client)
            agent = Agent(name="bench", instructions="You are a helpful assistant.", model=model)
        result = await Runner.run(agent, [*history, {"role": "user", "content": text}])
        return result.to_input_list(), result.context_wrapper.usage.total_tokens

    return turn


async def main(
    kind: str, url: str, run: str, n: int, turns: int, owners: int, seconds: float
) -> None:
    turn = pydantic_ai_turn() if kind == "pydantic-ai" else openai_agents_turn()
    finished: list[tuple[str, float, float, int]] = []
    failed = 0
    began = time.perf_counter()

    async def converse(conversation: str) -> None:
        nonlocal failed
        history: list[Any] = []
        for number in range(turns if not owners else 1_000_000):
            start = time.perf_counter()
            try:
                history, tokens = await turn(
                    url, history, f"turn {number} of {conversation} ({run})"
                )
            except Exception:
                failed += 1
                continue
            finished.append((conversation, start - began, time.perf_counter() - began, tokens))

    cpu = time.process_time()
    tasks = [asyncio.create_task(converse(c)) for c in conversations_of(n, owners)]
    if owners:
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(
        json.dumps(
            {
                "finished": finished,
                "failed": failed,
                "wall": time.perf_counter() - began,
                "cpu": time.process_time() - cpu,
            }
        )
    )


if __name__ == "__main__":
    kind, url, run, n, turns, owners, seconds = sys.argv[1:8]
    asyncio.run(main(kind, url, run, int(n), int(turns), int(owners), float(seconds)))

"""A process that is killed in the middle of a summary (test_summary_crash).

It runs turns on a SQLite file under a small context budget with a model
that answers its first ``answered`` summary requests and never returns from
the next; it prints ``acked SEQ KEY`` for every turn the agent answered
(acknowledged), ``summarized`` for each answered summary request, and
``summarizing`` once the one that never returns is under way, then waits for
the SIGKILL.
"""

from __future__ import annotations

import sys

import trio

from agentik import (
    ContextPolicy,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    open_chat_agent,
    open_sqlite_storage,
)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


answered = 0


async def respond(request: ModelRequest) -> ModelResponse:
    global answered
    if request.purpose == "summary":
        if answered == 0:
            say("summarizing")
            await trio.sleep_forever()
        answered -= 1
        say("summarized")
        return ModelResponse(text=f"the summary, {answered} more to come")
    return ModelResponse(text=f"answer to: {request.messages[-1].content[:20]}")


async def main(path: str) -> None:
    async with (
        open_sqlite_storage(path) as storage,
        open_chat_agent(
            model=ScriptedModel(respond),
            storage=storage,
            context=ContextPolicy(max_tokens=300),
        ) as agent,
    ):
        for i in range(1000):
            result = await agent.send("c", f"question {i} " * 5, idempotency_key=f"k{i}")
            say(f"acked {result.messages[-1].seq} k{i}")


if __name__ == "__main__":
    answered = int(sys.argv[2])
    trio.run(main, sys.argv[1])

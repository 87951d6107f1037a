"""``POST /agui``: one AG-UI run per request, streamed as SSE.

threadId is the conversation id (in the caller's owner scope); the run's
input is the text of the last message, which must be the user's, and history
comes from the store: no earlier message the client sends, of any role,
reaches the model or the store. A refusal
before the run starts (bad input, overload) is a plain HTTP status, which
the client reports as ``HTTP <status>: <body>``; after RUN_STARTED every
failure is a RUN_ERROR.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from agentik.server._agui import AguiRun, parse_run_input
from agentik.server._context import ServerContext
from agentik.server._owners import caller_of
from agentik.server._request import read_json
from agentik.server._sse import sse_frame
from agentik.server._turns import EventStream, open_stream


def agui_routes(ctx: ServerContext) -> list[BaseRoute]:
    agent = ctx.agent
    limit = ctx.config.limits.max_body_bytes

    async def run(request: Request) -> EventStream:
        run_input = parse_run_input(await read_json(request, limit))
        events, stack = await open_stream(
            agent, "agui", caller_of(request), run_input.thread_id, run_input.text, None
        )
        translator = AguiRun(run_input.thread_id, run_input.run_id, model_name=ctx.model_label)

        async def frames() -> AsyncIterator[bytes]:
            for out in translator.start(run_input.parent_run_id):
                yield sse_frame(out)
            ended = False
            async for event in events:
                for out in translator.translate(event):
                    ended = ended or out["type"] in ("RUN_FINISHED", "RUN_ERROR")
                    yield sse_frame(out)
            if not ended:
                for out in translator.error("the turn ended without a result", "turn_failed"):
                    yield sse_frame(out)

        return EventStream(frames(), stack.aclose)

    return [Route("/agui", run, methods=["POST"])]

"""Native API routes of a conversation as a whole, owner-scoped like the rest
of ``/agentik``: its token totals (``GET …/usage``).

Kept apart from ``_native_routes`` (the turn and read routes), which other
work changes often; the app adds these routes beside them.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentik.server._app import json_response
from agentik.server._context import ServerContext
from agentik.server._native import check_id
from agentik.server._native_routes import require_conversation
from agentik.server._owners import caller_of


def _conversation(request: Request) -> tuple[str, str]:
    """The client's conversation id (checked) and the owner-scoped stored one."""
    value = request.path_params["conversation_id"]
    assert isinstance(value, str)
    conversation_id = check_id(value)
    return conversation_id, caller_of(request).internal(conversation_id)


def lifecycle_routes(ctx: ServerContext) -> list[BaseRoute]:
    store = ctx.agent.storage.message_store

    async def usage(request: Request) -> Response:
        conversation_id, stored_id = _conversation(request)
        await require_conversation(ctx, stored_id, conversation_id)
        stats = await store.token_stats(stored_id)
        return json_response(
            {
                "conversation_id": conversation_id,
                "input_tokens": stats.prompt_tokens,
                "output_tokens": stats.completion_tokens,
                "total_tokens": stats.total_tokens,
                "messages_with_usage": stats.messages,
            }
        )

    base = "/agentik/conversations/{conversation_id}"
    return [Route(f"{base}/usage", usage, methods=["GET"])]

"""Native API routes of a conversation as a whole, owner-scoped like the rest
of ``/agentik``: its token totals (``GET …/usage``), deleting it
(``DELETE …``), exporting it as JSON Lines (``GET …/export``) and cancelling
its turns (``POST …/cancel``).

Kept apart from ``_routes`` (the turn and read routes), which other
work changes often; the app adds these routes beside them. Another owner's
conversation is simply not found, as everywhere. With several nodes on one
database, deleting a conversation another live node owns, or cancelling its
turns, is forwarded to that node (or a 307 there, ``[cluster] forward =
false``), as a turn is (reads are served by any node).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from agentik._errors import AgentikError, NotOwnedError, OverloadedError
from agentik.server._context import ServerContext
from agentik.server._owners import caller_of
from agentik.server._turns import claim_here
from agentik.server.http import (
    HttpError,
    NotHere,
    Redirect,
    json_response,
)
from agentik.server.native._routes import conversation_ids, require_conversation
from agentik.storage import MEDIA_TYPE, header_line, record_line


def _not_found(conversation_id: str) -> HttpError:
    return HttpError(404, f"conversation {conversation_id!r} not found", code="not_found")


class LifecycleApi:
    """The handlers of a conversation as a whole, one method each; ``routes``
    maps them to their paths."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.agent = self.ctx.agent
        self.store = self.ctx.agent.storage.message_store

    async def usage(self, request: Request) -> Response:
        conversation_id, stored_id = conversation_ids(request)
        await require_conversation(self.ctx, stored_id, conversation_id)
        stats = await self.store.token_stats(stored_id)
        return json_response(
            {
                "conversation_id": conversation_id,
                "input_tokens": stats.prompt_tokens,
                "output_tokens": stats.completion_tokens,
                "total_tokens": stats.total_tokens,
                "messages_with_usage": stats.messages,
            }
        )

    async def delete(self, request: Request) -> Response:
        conversation_id, stored_id = conversation_ids(request)
        if self.agent.storage.degraded:  # a seed store cannot (``full_storage``)
            raise HttpError(501, "this storage cannot delete conversations", code="not_supported")
        try:
            deleted = await self.agent.delete_conversation(stored_id)
        except OverloadedError as exc:
            raise HttpError(
                429,
                f"conversation {conversation_id!r} is busy; retry later",
                code="overloaded",
                headers={"Retry-After": "1"},
            ) from exc
        except NotOwnedError as exc:
            # Another live node owns it (several nodes on one database): it
            # deletes it there, as it runs its turns there.
            if not exc.owner_url:
                raise NotHere("the conversation could not be deleted; retry") from exc
            raise Redirect(
                f"conversation {conversation_id!r} is owned by another node", base_url=exc.owner_url
            ) from exc
        except AgentikError as exc:
            raise HttpError(
                503,
                "the conversation could not be deleted; retry",
                code="unavailable",
                headers={"Retry-After": "1"},
            ) from exc
        if not deleted:
            raise _not_found(conversation_id)
        return Response(status_code=204)

    async def cancel(self, request: Request) -> Response:
        """Cancel the running turn and the queued ones: ``{"cancelled": n}``.
        Nothing to cancel in a conversation that exists is 200 with 0; one
        that does not (another owner's included) is 404, as everywhere."""
        conversation_id, stored_id = conversation_ids(request)
        ownership = self.agent.storage.ownership
        if ownership is not None and not ownership.owns(stored_id):
            # Several nodes: its turns run on its owner, which cancels them
            # (the request is forwarded there); an unknown one claims nothing.
            await require_conversation(self.ctx, stored_id, conversation_id)
            await claim_here(self.agent, caller_of(request), conversation_id)
        cancelled = await self.agent.cancel(stored_id)
        if not cancelled:
            await require_conversation(self.ctx, stored_id, conversation_id)
        return json_response({"conversation_id": conversation_id, "cancelled": cancelled})

    async def export(self, request: Request) -> Response:
        conversation_id, stored_id = conversation_ids(request)
        if self.agent.storage.degraded:  # a seed store cannot (``full_storage``)
            raise HttpError(501, "this storage cannot export conversations", code="not_supported")
        await require_conversation(self.ctx, stored_id, conversation_id)
        owner = caller_of(request).owner  # the archive carries it: an import restores it

        async def lines() -> AsyncIterator[str]:
            yield header_line(conversation_id, owner)
            async for record in self.store.export_conversation(stored_id):
                yield record_line(record, conversation_id)

        return StreamingResponse(lines(), media_type=MEDIA_TYPE)

    def routes(self) -> list[BaseRoute]:
        base = "/agentik/conversations/{conversation_id}"
        return [
            Route(base, self.delete, methods=["DELETE"]),
            Route(f"{base}/usage", self.usage, methods=["GET"]),
            Route(f"{base}/export", self.export, methods=["GET"]),
            Route(f"{base}/cancel", self.cancel, methods=["POST"]),
        ]

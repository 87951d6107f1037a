"""The native API under ``/agentik``: turns (JSON or SSE), decisions about calls
waiting for approval, history, memory (its notes, archiving them, the notes it
archived, the latest summary of the history and every earlier one), toolsets,
reflections and skills.

Handlers validate, call the agent or its stores, and translate with
``_native``; they keep nothing between requests. Every conversation id a
client sends is mapped to the caller's owner scope (``_owners``) before any
store or the agent sees it; another owner's conversation is simply not found.
Skills are per owner too: a name is stored in the caller's scope
(``Caller.internal``, as a conversation id; ``agentik._scope``), where the
model's ``skill_*`` tools in that owner's conversations find it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentik._errors import TooLargeError
from agentik._json import JsonObject, JsonValue
from agentik._memory import Skill
from agentik._messages import Message
from agentik._scope import split_scope
from agentik._serde import converter
from agentik.agent import ElicitationError
from agentik.server._context import ServerContext
from agentik.server._decisions import decide_call, open_decision_stream, pending_calls
from agentik.server._owners import (
    CALLER_KEY,
    Caller,
    caller_of,
    owned_conversations,
    recent_reflections,
)
from agentik.server._turns import (
    open_stream,
    send_turn,
    to_http_error,
)
from agentik.server.http import (
    EventStream,
    HttpError,
    Receive,
    Scope,
    Send,
    as_object,
    check_id,
    field_str,
    json_response,
    parse_json,
    query_int,
    read_json,
    receive_body,
    send_json,
    sse_frame,
)
from agentik.server.native._wire import (
    approval_json,
    elicitation_json,
    message_json,
    native_event,
    parse_archive,
    parse_decision,
    parse_elicitation_answer,
    parse_turn_request,
    turn_result_json,
)

MAX_PAGE = 1000


def _path_id(request: Request, key: str = "conversation_id", what: str = "conversation id") -> str:
    value = request.path_params[key]
    assert isinstance(value, str)
    return check_id(value, what)


async def _messages(
    ctx: ServerContext, conversation_id: str, after: int, limit: int
) -> list[Message]:
    out: list[Message] = []
    source = ctx.agent.storage.message_store.get_messages(
        conversation_id, after_seq=after, page_size=min(limit, 500)
    )
    async with aclosing(source) as messages:  # type: ignore[type-var]
        async for message in messages:
            out.append(message)
            if len(out) >= limit:
                break
    return out


def conversation_ids(request: Request) -> tuple[str, str]:
    """The client's conversation id (checked) and the owner-scoped stored one."""
    conversation_id = _path_id(request)
    return conversation_id, caller_of(request).internal(conversation_id)


async def require_conversation(ctx: ServerContext, stored_id: str, conversation_id: str) -> None:
    """404 (naming the client's id) unless the stored conversation has a message."""
    if not await _messages(ctx, stored_id, 0, 1):
        raise HttpError(404, f"conversation {conversation_id!r} not found", code="not_found")


class TurnEndpoint:
    """``POST …/conversations/{conversation_id}/turns``, the hot route, as plain ASGI.

    Routed by Starlette like every other endpoint, but it reads the body from
    ``receive`` and writes its response with two ``send`` calls, without a
    ``Request`` or ``Response`` object and their wrappers: a turn costs less
    here than the HTTP framing around it, so the framing is kept thin.
    ``HttpError`` raised here becomes the same JSON error as elsewhere (the
    app's exception handlers catch it).
    """

    def __init__(self, ctx: ServerContext) -> None:
        self.agent = ctx.agent
        self.limit = ctx.config.limits.max_body_bytes
        self.part_limit = ctx.config.limits.max_part_bytes
        self.heartbeat = ctx.config.sse_heartbeat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope.get(CALLER_KEY)
        if not isinstance(caller, Caller):  # fails closed, as caller_of does
            raise RuntimeError("request reached a handler without passing the guard")
        value = scope["path_params"]["conversation_id"]
        assert isinstance(value, str)
        conversation_id = check_id(value)
        accept = declared = None
        for name, header in scope["headers"]:  # the first of each, as Request.headers.get
            if name == b"accept" and accept is None:
                accept = header
            elif name == b"content-length" and declared is None:
                declared = header
        body = await receive_body(receive, (declared or b"").decode("latin-1"), self.limit)
        turn = parse_turn_request(parse_json(body), self.part_limit)
        if accept is None or b"text/event-stream" not in accept:
            result = await send_turn(
                self.agent,
                "native",
                caller,
                conversation_id,
                turn.text,
                turn.idempotency_key,
                output=turn.output_schema,
                parts=turn.parts,
            )
            await send_json(send, turn_result_json(result))
            return
        events, stack = await open_stream(
            self.agent,
            "native",
            caller,
            conversation_id,
            turn.text,
            turn.idempotency_key,
            output=turn.output_schema,
            parts=turn.parts,
        )

        async def frames() -> AsyncIterator[bytes]:
            async for event in events:
                name, data = native_event(event)
                yield sse_frame(data, event=name)

        await EventStream(frames(), stack.aclose, heartbeat=self.heartbeat)(scope, receive, send)


def _not_implemented(what: str) -> HttpError:
    return HttpError(501, f"this storage backend does not list {what}", code="not_implemented")


class NativeApi:
    """The native routes' handlers, one method each, over the agent and its
    stores (``ctx``); ``routes`` maps them to their paths."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.agent = ctx.agent
        self.limit = ctx.config.limits.max_body_bytes

    async def list_conversations(self, request: Request) -> Response:
        after = request.query_params.get("after") or None
        page = query_int(request, "limit", default=100, minimum=1, maximum=MAX_PAGE)
        store = self.agent.storage.message_store
        ids = await owned_conversations(store, caller_of(request), after, page)
        body: JsonObject = {
            "conversations": list[JsonValue](ids),
            "next_after": ids[-1] if len(ids) == page else None,
        }
        return json_response(body)

    async def get_messages(self, request: Request) -> Response:
        conversation_id, stored_id = conversation_ids(request)
        after = query_int(request, "after_seq", default=0, minimum=0, maximum=2**62)
        page = query_int(request, "limit", default=100, minimum=1, maximum=MAX_PAGE)
        messages = await _messages(self.ctx, stored_id, after, page)
        if not messages:
            await require_conversation(self.ctx, stored_id, conversation_id)
        body: JsonObject = {
            "conversation_id": conversation_id,
            "messages": [message_json(m) for m in messages],
            "next_after_seq": messages[-1].seq if len(messages) == page else None,
        }
        return json_response(body)

    async def get_memory(self, request: Request) -> Response:
        conversation_id, stored_id = conversation_ids(request)
        await require_conversation(self.ctx, stored_id, conversation_id)
        entries = [
            attrs.evolve(entry, conversation_id=conversation_id)
            for entry in await self.agent.storage.working_memory_store.list(stored_id)
        ]
        return json_response(
            {"conversation_id": conversation_id, "entries": converter.unstructure(entries)}
        )

    async def archive_memory(self, request: Request) -> Response:
        """Archive notes, as the model's ``memory_archive`` does: they leave
        the prompt and stay stored. Every id must be an active note of this
        conversation, or nothing is archived (404)."""
        conversation_id, stored_id = conversation_ids(request)
        wanted = parse_archive(await read_json(request, self.limit)).entry_ids
        await require_conversation(self.ctx, stored_id, conversation_id)
        active = {
            entry.id for entry in await self.agent.storage.working_memory_store.list(stored_id)
        }
        unknown = [i for i in wanted if i not in active]
        if unknown:
            raise HttpError(
                404,
                f"no active notes with ids {unknown[:20]} in conversation {conversation_id!r}",
                code="not_found",
            )
        archived = await self.agent.archive_memory(stored_id, wanted)
        return json_response({"conversation_id": conversation_id, "archived": archived})

    async def get_summary(self, request: Request) -> Response:
        """The latest summary of the history (a context policy's), or null."""
        conversation_id, stored_id = conversation_ids(request)
        await require_conversation(self.ctx, stored_id, conversation_id)
        store = self.agent.storage.message_store
        summary = await store.latest_summary(stored_id)
        data: JsonValue = None if summary is None else converter.unstructure(summary)
        return json_response({"conversation_id": conversation_id, "summary": data})

    async def _paged(self, request: Request, after_key: str) -> tuple[str, str, int, int]:
        """The conversation (sent, stored), checked to exist, and the page asked
        for: ``after_key`` (a seq or note id) and ``limit``."""
        conversation_id, stored_id = conversation_ids(request)
        after = query_int(request, after_key, default=0, minimum=0, maximum=2**62)
        page = query_int(request, "limit", default=100, minimum=1, maximum=MAX_PAGE)
        await require_conversation(self.ctx, stored_id, conversation_id)
        return conversation_id, stored_id, after, page

    async def list_summaries(self, request: Request) -> Response:
        """Every summary of the history, oldest first, a page at a time: the
        chain compaction left (it never deletes one, nor the messages under it)."""
        conversation_id, stored_id, after, page = await self._paged(request, "after_seq")
        store = self.agent.storage.message_store
        if self.agent.storage.degraded:  # a seed store keeps none (``full_storage``)
            raise _not_implemented("summaries")
        summaries = await store.list_summaries(stored_id, after_seq=after, limit=page)
        body: JsonObject = {
            "conversation_id": conversation_id,
            "summaries": converter.unstructure(summaries),
            "next_after_seq": summaries[-1].through_seq if len(summaries) == page else None,
        }
        return json_response(body)

    async def get_archived_memory(self, request: Request) -> Response:
        """Notes that left the prompt (archived by the model, a client or a
        compaction), oldest first, a page at a time: archiving never deletes."""
        conversation_id, stored_id, after, page = await self._paged(request, "after_id")
        store = self.agent.storage.working_memory_store
        if self.agent.storage.degraded:  # a seed store cannot list them (``full_storage``)
            raise _not_implemented("archived notes")
        entries = [
            attrs.evolve(entry, conversation_id=conversation_id)
            for entry in await store.list_archived(stored_id, after_id=after, limit=page)
        ]
        body: JsonObject = {
            "conversation_id": conversation_id,
            "entries": converter.unstructure(entries),
            "next_after_id": entries[-1].id if len(entries) == page else None,
        }
        return json_response(body)

    async def get_toolsets(self, request: Request) -> Response:
        conversation_id, stored_id = conversation_ids(request)
        await require_conversation(self.ctx, stored_id, conversation_id)
        statuses = self.agent.toolset_status(stored_id)
        return json_response(
            {"conversation_id": conversation_id, "toolsets": converter.unstructure(statuses)}
        )

    async def list_approvals(self, request: Request) -> Response:
        conversation_id = _path_id(request)
        caller = caller_of(request)
        await require_conversation(self.ctx, caller.internal(conversation_id), conversation_id)
        waiting = await pending_calls(self.agent, caller, conversation_id)
        return json_response(
            {"conversation_id": conversation_id, "approvals": [approval_json(a) for a in waiting]}
        )

    async def decide(self, request: Request) -> Response | EventStream:
        conversation_id = _path_id(request)
        call_id = _path_id(request, "call_id", "call id")
        decision = parse_decision(await read_json(request, self.limit))
        caller = caller_of(request)

        async def exists() -> None:
            await require_conversation(self.ctx, caller.internal(conversation_id), conversation_id)

        if "text/event-stream" in request.headers.get("accept", ""):
            # Streamed as a turn is: the calls that run, the turn going on.
            events, stack = await open_decision_stream(
                self.agent,
                "native",
                caller,
                conversation_id,
                call_id,
                approve=decision.approve,
                reason=decision.reason,
                check=exists,
            )

            async def frames() -> AsyncIterator[bytes]:
                async for event in events:
                    name, data = native_event(event)
                    yield sse_frame(data, event=name)

            return EventStream(frames(), stack.aclose, heartbeat=self.ctx.config.sse_heartbeat)
        result = await decide_call(
            self.agent,
            "native",
            caller,
            conversation_id,
            call_id,
            approve=decision.approve,
            reason=decision.reason,
            check=exists,
        )
        return json_response(turn_result_json(result))

    async def list_elicitations(self, request: Request) -> Response:
        conversation_id = _path_id(request)
        caller = caller_of(request)
        stored = caller.internal(conversation_id)
        await require_conversation(self.ctx, stored, conversation_id)
        waiting = await self.agent.pending_elicitations(stored)
        return json_response(
            {
                "conversation_id": conversation_id,
                "elicitations": [elicitation_json(q) for q in waiting],
            }
        )

    async def answer_elicitation(self, request: Request) -> Response:
        conversation_id = _path_id(request)
        elicitation_id = _path_id(request, "elicitation_id", "elicitation id")
        answer = parse_elicitation_answer(await read_json(request, self.limit))
        caller = caller_of(request)
        stored = caller.internal(conversation_id)
        await require_conversation(self.ctx, stored, conversation_id)
        try:
            await self.agent.answer_elicitation(
                stored, elicitation_id, action=answer.action, content=answer.content
            )
        except ElicitationError as exc:
            raise to_http_error(exc, caller, conversation_id) from exc
        return json_response({"conversation_id": conversation_id, "id": elicitation_id})

    async def get_reflections(self, request: Request) -> Response:
        page = query_int(request, "limit", default=20, minimum=1, maximum=MAX_PAGE)
        recent, total = await recent_reflections(
            self.agent.storage.reflection_store,
            caller_of(request),
            page,
            scoped=bool(self.ctx.config.clients),
        )
        return json_response({"reflections": converter.unstructure(recent), "total": total})

    async def list_skills(self, request: Request) -> Response:
        scope = caller_of(request).internal("")
        catalog = [
            attrs.evolve(summary, name=name)
            for summary in await self.agent.storage.skill_store.catalog()
            for owner, name in [split_scope(summary.name)]
            if owner == scope
        ]
        return json_response({"skills": converter.unstructure(catalog)})

    async def skill(self, request: Request) -> Response:
        name = _path_id(request, "name", "skill name")
        stored = caller_of(request).internal(name)
        store = self.agent.storage.skill_store
        if request.method == "PUT":
            body = as_object(await read_json(request, self.limit))
            unknown = sorted(set(body) - {"description", "body"})
            if unknown:
                raise HttpError(422, f"unknown field '{unknown[0]}'", code="invalid_field")
            try:
                saved = await store.upsert(
                    Skill(
                        name=stored,
                        description=field_str(body, "description"),
                        body=field_str(body, "body"),
                    )
                )
            except TooLargeError as exc:
                raise HttpError(413, str(exc), code="too_large") from exc
            except ValueError as exc:
                raise HttpError(422, str(exc), code="invalid_field") from exc
            return json_response(converter.unstructure(attrs.evolve(saved, name=name)))
        if request.method == "DELETE":
            if not await store.remove(stored):
                raise HttpError(404, f"skill {name!r} not found", code="not_found")
            return Response(status_code=204)
        found = await store.get(stored)
        if found is None:
            raise HttpError(404, f"skill {name!r} not found", code="not_found")
        return json_response(converter.unstructure(attrs.evolve(found, name=name)))

    def routes(self) -> list[BaseRoute]:
        conversation = "/agentik/conversations/{conversation_id}"
        table: list[tuple[str, Any, list[str]]] = [
            (f"{conversation}/turns", TurnEndpoint(self.ctx), ["POST"]),
            ("/agentik/conversations", self.list_conversations, ["GET"]),
            (f"{conversation}/messages", self.get_messages, ["GET"]),
            (f"{conversation}/memory", self.get_memory, ["GET"]),
            (f"{conversation}/memory/archive", self.archive_memory, ["POST"]),
            (f"{conversation}/memory/archived", self.get_archived_memory, ["GET"]),
            (f"{conversation}/summary", self.get_summary, ["GET"]),
            (f"{conversation}/summaries", self.list_summaries, ["GET"]),
            (f"{conversation}/toolsets", self.get_toolsets, ["GET"]),
            (f"{conversation}/approvals", self.list_approvals, ["GET"]),
            # ``:path``: a call id is the model's choice and may hold a ``/``
            (f"{conversation}/approvals/{{call_id:path}}", self.decide, ["POST"]),
            (f"{conversation}/elicitations", self.list_elicitations, ["GET"]),
            (
                f"{conversation}/elicitations/{{elicitation_id}}",
                self.answer_elicitation,
                ["POST"],
            ),
            ("/agentik/reflections", self.get_reflections, ["GET"]),
            ("/agentik/skills", self.list_skills, ["GET"]),
            ("/agentik/skills/{name}", self.skill, ["GET", "PUT", "DELETE"]),
        ]
        return [Route(path, endpoint, methods=methods) for path, endpoint, methods in table]

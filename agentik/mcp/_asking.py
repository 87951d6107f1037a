"""The questions one MCP server's running calls put to people, and their answers.

A server may ask while a call runs (an elicitation, the SDK's callback
``elicit``), and an authorization server may want a wider grant for a call
(a step-up, ``ask_person``). Either becomes an ``ElicitationRequest`` in the
conversation whose call it is; while it waits, that call's timeouts stand
still, bounded by ``elicitation_timeout``. Only a call's own task (or the
session's reader task) waits; the answer comes from another (``answer``),
and the first answer stands.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import NoReturn, final
from urllib.parse import SplitResult, parse_qs, urlsplit

import attrs
import mcp.types as mt
import trio
from mcp.shared.auth import AuthorizationCodeResult

from agentik.agent import ElicitationAction, ElicitationRequest, OpenQuestions, current_tool_call
from agentik.mcp._auth import LoginError, LoginRequired, StepUpRefused, receive_redirect
from agentik.mcp._credentials import McpCredentials
from agentik.mcp._naming import one_line

logger = logging.getLogger("agentik.mcp")


@attrs.define(eq=False)
class InFlight:
    """A tool call waiting on the server: whose it is and the timeouts to stop while a
    person is asked."""

    conversation_id: str | None
    scopes: list[trio.CancelScope]
    announce: Callable[[ElicitationRequest], Awaitable[None]] | None = None
    refusal: str | None = None
    """Why a step-up authorization for this call did not happen (its error result)."""


current_call: contextvars.ContextVar[InFlight | None] = contextvars.ContextVar(
    "agentik_mcp_call", default=None
)
"""The tool call whose request this task sends: the HTTP transport sends each request
in its sender's context, so a step-up authorization knows whose call it serves."""


@final
class Asking:
    """One server's calls on the wire (``in_flight``) and the questions they ask."""

    def __init__(
        self, name: Callable[[], str], credentials: McpCredentials, timeout: float
    ) -> None:
        self._name = name
        """The toolset's name (chosen lazily): the questions' ``source``."""
        self._credentials = credentials
        self._timeout = timeout
        """``elicitation_timeout``: how long a question waits for its answer."""
        self.in_flight: list[InFlight] = []
        """The calls waiting on the server now (``McpToolset`` adds and removes them)."""
        self.open = OpenQuestions()
        """The questions waiting now (``pending_elicitations``, ``answer_elicitation``)."""

    async def elicit(
        self, context: object, params: mt.ElicitRequestParams
    ) -> mt.ElicitResult | mt.ErrorData:
        """The SDK's elicitation callback: ask the person of the conversation whose call
        this is, and wait (bounded) for the answer; the call's timeouts stand still."""
        running = current_tool_call.get()  # set when the SDK asks in the call's own task
        if running is not None:
            conversation: str | None = running.conversation_id
            mine = [c for c in self.in_flight if running.scope in c.scopes]
            scopes = mine[0].scopes if mine else [running.scope]
            announcers = [running.announce]
        else:
            # Asked from the session's reader task: only an unambiguous caller will do.
            owners = {c.conversation_id for c in self.in_flight}
            conversation = owners.pop() if len(owners) == 1 else None
            scopes = [s for c in self.in_flight for s in c.scopes]
            # One conversation runs one turn at a time: its calls share one stream.
            announcers = [c.announce for c in self.in_flight][:1]
        if conversation is None or not isinstance(params, mt.ElicitRequestFormParams):
            why = "url mode" if conversation else "no single conversation's call is running"
            logger.info("mcp server %r: an elicitation was declined (%s)", self._name(), why)
            return mt.ElicitResult(action="decline")
        request = ElicitationRequest(
            conversation_id=conversation,
            id=uuid.uuid4().hex,
            source=self._name(),
            message=self._credentials.text(params.message),
            schema=self._credentials.schema(dict(params.requested_schema)),
        )
        logger.info(
            "mcp server %r asks conversation %r: %s",
            self._name(),
            conversation,
            one_line(request.message),
        )
        with trio.move_on_after(self._timeout), self.open.waiting(request, scopes) as asked:
            for announce in announcers:
                if announce is not None:  # the turn streams: tell its client
                    await announce(request)
            await asked.answered.wait()
        if asked.action is None:
            logger.info("mcp server %r: no answer in time, declined", self._name())
            return mt.ElicitResult(action="decline")
        return mt.ElicitResult(action=asked.action, content=asked.content)  # type: ignore[arg-type]

    async def ask_person(self, url: str) -> AuthorizationCodeResult:
        """A step-up authorization in a tool call: ask the conversation's person to open
        ``url`` (a URL-mode elicitation) and receive the browser's redirect on 127.0.0.1.

        While connecting or listing there is no call: ``LoginRequired`` fails the
        connection and says to run ``agentik mcp login``. A call with no person
        behind it (not a conversation's), or one whose person declines, cancels
        or does not answer within ``elicitation_timeout``, gets an error result
        saying so (``StepUpRefused``); the connection stays.
        """
        call = current_call.get()
        login = f"run `agentik mcp login {self._name()}`"
        if call is None:
            raise LoginRequired(f"mcp server {self._name()!r} needs an authorization: {login}")
        running = current_tool_call.get()
        redirect = urlsplit(parse_qs(urlsplit(url).query).get("redirect_uri", [""])[0])
        if running is None:
            self._refuse(call, f"mcp server {self._name()!r} needs an authorization: {login}")
        listener = await self._redirect_listener(call, redirect, login)
        request = ElicitationRequest(
            conversation_id=running.conversation_id,
            id=uuid.uuid4().hex,
            source=self._name(),
            message=(
                f"mcp server {self._name()!r} needs a wider authorization for this call; "
                f"open this URL and approve, and the call goes on: {url}"
            ),
            schema={},
            url=url,
        )
        # The URL carries the flow's state: the log says what, not where.
        logger.info(
            "mcp server %r asks conversation %r for a wider authorization (step-up)",
            self._name(),
            running.conversation_id,
        )
        async with listener:
            received, action = await self._redirected(
                listener, request, call.scopes, running.announce
            )
        if received and isinstance(received[0], AuthorizationCodeResult):
            return received[0]
        if received:
            why = f"did not complete: {received[0]}"
        elif action is not None and action != "accept":
            why = f"the person {action}d"
        else:
            why = f"did not come within {self._timeout:g}s"
        self._refuse(call, f"mcp server {self._name()!r} needs a wider authorization, which {why}")

    async def _redirect_listener(
        self, call: InFlight, redirect: SplitResult, login: str
    ) -> trio.SocketListener:
        """The port on 127.0.0.1 the browser is sent back to, open; refused if the
        redirect URI is not agentik's callback or the port cannot be opened."""
        if redirect.scheme != "http" or redirect.hostname not in ("127.0.0.1", "localhost"):
            self._refuse(
                call,
                f"mcp server {self._name()!r} needs a new authorization, and its redirect URI "
                f"is not agentik's 127.0.0.1 callback: {login}",
            )
        try:
            listeners = await trio.open_tcp_listeners(redirect.port or 80, host="127.0.0.1")
        except OSError as error:
            self._refuse(
                call,
                f"mcp server {self._name()!r} needs a new authorization, but its redirect "
                f"port 127.0.0.1:{redirect.port} cannot be opened ({error.strerror})",
            )
        return listeners[0]

    async def _redirected(
        self,
        listener: trio.SocketListener,
        request: ElicitationRequest,
        scopes: list[trio.CancelScope],
        announce: Callable[[ElicitationRequest], Awaitable[None]] | None,
    ) -> tuple[list[AuthorizationCodeResult | LoginError], ElicitationAction | None]:
        """Ask ``request`` and wait (bounded) for the browser's redirect: what it
        brought (nothing if the person said no or no answer came in time), and
        the person's answer (None: none came)."""
        received: list[AuthorizationCodeResult | LoginError] = []
        with trio.move_on_after(self._timeout), self.open.waiting(request, scopes) as asked:
            async with trio.open_nursery() as nursery:

                async def receive() -> None:
                    try:
                        received.append(await receive_redirect(listener))
                    except LoginError as error:
                        received.append(error)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(receive)
                if announce is not None:  # the turn streams: tell its client
                    await announce(request)
                await asked.answered.wait()
                if asked.action != "accept":
                    nursery.cancel_scope.cancel()
                # accepted ("I opened it"): the redirect ends the wait
        return received, asked.action

    def _refuse(self, call: InFlight, why: str) -> NoReturn:
        """End a step-up without a token: the call's error result will say ``why``."""
        call.refusal = why
        logger.info("%s", why)
        raise StepUpRefused(why)

"""``agentik chat``: an interactive terminal chat, streaming each answer.

In-process (an agent on the configured database and model) or against a
running server (``--url``, through the native SSE endpoint; the server is
asked once before the first prompt, so a dead address or a refused token is
one line at start, not a surprise at the first message). Lines are read in a
worker thread, one hop per line, so the event loop never blocks; the wait is
abandoned on Ctrl-C, so Ctrl-C at the prompt quits at once (exit 130). Ctrl-C
while an answer streams drops that answer and returns to the prompt (the turn
goes on and is stored, as when an HTTP client leaves a stream).

On a terminal, lines are read with the standard library's ``readline``
(GNU readline or libedit): arrow keys edit the line and recall earlier lines
of the session, and no escape code reaches the stored message.

A turn that comes back waiting for approval (a tool that requires it) asks
at the prompt, call by call, ``approve name(arguments)? [y/N]``, and sends
the decision (``agent.stream_decision``, or ``POST …/approvals/{call_id}``
streamed); the approved call's ``[tool]``/``[result]`` lines and the answer
print as a turn's do. Ctrl-D at that question leaves the calls waiting (they
stay waiting across restarts) and ends the chat; the next chat on that
conversation shows them and asks again before it takes a message, since a new
message would deny them.
prompt_toolkit would do the same with a new dependency, and it runs on
asyncio, not on trio; ``readline`` needs neither. Where the platform has no
``readline`` (Windows), lines are read without editing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2
import trio

from agentik.agent import (
    ApprovalRequest,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnResult,
)
from agentik.cli._failures import REPORTED, CommandError, first_reportable, report
from agentik.models import TextDelta

if TYPE_CHECKING:
    from agentik.server import ServerConfig

PROMPT = "you> "


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


async def print_stream(events: AsyncIterator[TurnEvent]) -> TurnResult | None:
    """Print a turn's events as they arrive; its result if it finished (or
    paused for approval), None if it failed."""
    in_text = False
    async for event in events:
        if isinstance(event, TextDelta):
            if not in_text:
                _write("agent> ")
                in_text = True
            _write(event.text)
            continue
        if in_text:
            _write("\n")
            in_text = False
        if isinstance(event, ToolCallStarted):
            _write(f"  [tool] {event.call.name}({event.call.arguments})\n")
        elif isinstance(event, ToolCallFinished):
            _write(f"  [{'error' if event.is_error else 'result'}] {event.content}\n")
        elif isinstance(event, TurnFinished):
            return event.result
        elif isinstance(event, TurnFailed):
            _write(f"  [turn failed: {event.code}] {event.message}\n")
            return None
    return None


DROPPED = "  [answer dropped: Ctrl-C; the turn goes on and is stored]\n"


async def print_interruptible(events: AsyncIterator[TurnEvent]) -> TurnResult | None:
    """``print_stream`` until Ctrl-C: then stop printing (the turn itself goes
    on, as when an HTTP client leaves a stream) and return None, so the chat
    returns to the prompt; Ctrl-C at the prompt quits. SIGINT is taken from
    trio's KeyboardInterrupt only while an answer streams."""
    result: TurnResult | None = None
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def drop_on_ctrl_c() -> None:
                async for _ in signals:
                    _write(f"\n{DROPPED}")
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(drop_on_ctrl_c)
            result = await print_stream(events)
            nursery.cancel_scope.cancel()
    return result


Decide = Callable[[ApprovalRequest, bool], Awaitable[TurnResult | None]]
"""Send one decision and print what follows (the approved call's ``[tool]`` and
``[result]`` lines, the answer); the turn's result, None if it failed."""


async def settle_approvals(result: TurnResult | None, decide: Decide) -> bool:
    """While the turn waits for approval, ask about each waiting call and send
    the decision (``decide`` prints what follows). False when the person ended
    the input (Ctrl-D) at a question: the calls keep waiting."""
    while result is not None and result.status == "awaiting_approval":
        decided: TurnResult | None = None
        for approval in result.approvals:
            call = approval.call
            answer = await _read_line(f"  approve {call.name}({call.arguments})? [y/N] ")
            if answer is None:
                return False
            decided = await decide(approval, answer.strip().lower() in ("y", "yes"))
            if decided is None:
                return True
        result = decided
    return True


async def converse(
    turn: Callable[[str], Awaitable[TurnResult | None]],
    decide: Decide,
    waiting: Callable[[], Awaitable[tuple[ApprovalRequest, ...]]],
) -> None:
    """The chat loop of both modes. Calls that wait for approval (left by an
    earlier chat, or by a turn whose answer was dropped with Ctrl-C) are shown
    and asked about before a new message is sent, since that message would
    deny them: at start, and after a turn that did not simply finish. (Asked
    only then: the list waits behind a turn still running, as the message would.)"""
    if not await _ask_earlier(waiting, decide):
        return
    unsettled = False
    while (line := await _read_line()) is not None:
        if not line.strip():
            continue
        if unsettled and not await _ask_earlier(waiting, decide):
            return
        result = await turn(line)
        unsettled = result is None or result.status != "finished"
        if not await settle_approvals(result, decide):
            return


async def _ask_earlier(
    waiting: Callable[[], Awaitable[tuple[ApprovalRequest, ...]]], decide: Decide
) -> bool:
    earlier = await waiting()
    if not earlier:
        return True
    _write(f"  {len(earlier)} tool call(s) wait for approval; a new message would deny them\n")
    paused = TurnResult("", (), status="awaiting_approval", approvals=earlier)
    return await settle_approvals(paused, decide)


def _input_line(prompt: str) -> str | None:
    """One line from the terminal, through readline (the module is imported
    by ``_line_editing``); None at end of input (Ctrl-D)."""
    try:
        return input(prompt)
    except EOFError:
        _write("\n")
        return None


def _plain_line(prompt: str) -> str | None:
    _write(prompt)
    line = sys.stdin.readline()
    return line.rstrip("\n") if line else None


async def _read_line(prompt: str = PROMPT) -> str | None:
    read = _input_line if sys.stdin.isatty() else _plain_line
    # abandon_on_cancel: Ctrl-C (KeyboardInterrupt) must not wait for a line
    return await trio.to_thread.run_sync(read, prompt, abandon_on_cancel=True)


@contextlib.contextmanager
def _line_editing() -> Iterator[None]:
    """Line editing and in-session history on a terminal; the terminal's
    settings restored on the way out (the abandoned reader may leave them
    changed when Ctrl-C quits mid-line)."""
    if not sys.stdin.isatty():
        yield
        return
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (importing it is what makes input() edit lines)
    try:
        import termios
    except ImportError:  # not a POSIX terminal
        yield
        return
    saved = termios.tcgetattr(sys.stdin.fileno())
    try:
        yield
    finally:
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)


async def _chat_in_process(args: argparse.Namespace) -> int:
    from agentik.server import load_config
    from agentik.storage import hold_sqlite_database, is_postgres_url

    overrides = {("storage", "database"): args.database} if args.database else {}
    config = load_config(Path(args.config) if args.config else None, overrides=overrides)
    with contextlib.ExitStack() as held:
        if not is_postgres_url(config.database):
            # An in-process chat caches its conversation as a server does: one
            # holder of the file at a time, and `agentik delete`/`import` refuse.
            held.enter_context(hold_sqlite_database(config.database, "chat"))
        return await _chat_on(args, config)


async def _chat_on(args: argparse.Namespace, config: ServerConfig) -> int:
    from agentik.agent import DEFAULT_SYSTEM_PROMPT, open_chat_agent
    from agentik.server import (
        content_limits,
        context_policy,
        demo_toolsets,
        load_tools,
        load_toolsets,
        open_configured_model,
    )
    from agentik.storage import open_storage

    async with (
        open_storage(config.database) as storage,
        open_configured_model(config) as (model, label),
        open_chat_agent(
            model=model,
            storage=storage,
            tools=load_tools(config.tools),
            toolsets=[*load_toolsets(config.toolsets), *demo_toolsets(config)],
            system_prompt=config.system_prompt or DEFAULT_SYSTEM_PROMPT,
            context=context_policy(config),
            content_limits=content_limits(config),
        ) as agent,
    ):
        print(
            f"chatting in-process with {label}; conversation {args.conversation!r};"
            " Ctrl-D or Ctrl-C to quit"
        )

        async def turn(line: str) -> TurnResult | None:
            async with agent.stream(args.conversation, line) as events:
                return await print_interruptible(events)

        async def decide(approval: ApprovalRequest, approve: bool) -> TurnResult | None:
            # A decision the agent does not take arrives as TurnFailed (printed).
            async with agent.stream_decision(
                args.conversation, approval.call.id, approve=approve
            ) as events:
                return await print_interruptible(events)

        async def waiting() -> tuple[ApprovalRequest, ...]:
            return await agent.pending_approvals(args.conversation)

        await converse(turn, decide, waiting)
    return 0


def _remote_result(conversation_id: str, data: dict[str, object]) -> TurnResult:
    """The parts of a native turn JSON the chat prints and asks about."""
    from agentik._messages import ToolCall

    approvals = data.get("approvals") or []
    assert isinstance(approvals, list)
    return TurnResult(
        str(data["text"]),
        (),
        status="awaiting_approval" if data.get("status") == "awaiting_approval" else "finished",
        approvals=tuple(
            ApprovalRequest(conversation_id, ToolCall(a["call_id"], a["name"], a["arguments"]))
            for a in approvals
        ),
    )


async def _remote_events(
    response: httpx2.Response, conversation_id: str
) -> AsyncIterator[TurnEvent]:
    from agentik._messages import ToolCall

    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = json.loads(line[5:])
        kind = data["type"]
        if kind == "text_delta":
            yield TextDelta(data["text"])
        elif kind in ("tool_call_started", "tool_call_finished"):
            call = ToolCall(**data["call"])
            if kind == "tool_call_started":
                yield ToolCallStarted(call)
            else:
                yield ToolCallFinished(call, data["content"], data["is_error"])
        elif kind == "turn_finished":
            yield TurnFinished(_remote_result(conversation_id, data["result"]))
        elif kind == "turn_failed":
            yield TurnFailed(data["message"], data["code"])


async def _chat_remote(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("AGENTIK_AUTH_TOKEN")
    headers = {"Accept": "text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    base = f"/agentik/conversations/{args.conversation}"
    async with httpx2.AsyncClient(base_url=args.url, headers=headers, timeout=None) as client:
        from agentik._probe import check_server

        await check_server(client, args.url)
        print(
            f"chatting with {args.url}; conversation {args.conversation!r};"
            " Ctrl-D or Ctrl-C to quit"
        )

        async def streamed(path: str, body: dict[str, object]) -> TurnResult | None:
            """POST ``body`` for an SSE answer (a turn, or a decision) and print it."""
            async with client.stream("POST", f"{base}{path}", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    print(f"  [HTTP {response.status_code}] {response.text}")
                    return None
                return await print_interruptible(_remote_events(response, args.conversation))

        async def turn(line: str) -> TurnResult | None:
            return await streamed("/turns", {"text": line})

        async def decide(approval: ApprovalRequest, approve: bool) -> TurnResult | None:
            return await streamed(f"/approvals/{approval.call.id}", {"approve": approve})

        async def waiting() -> tuple[ApprovalRequest, ...]:
            response = await client.get(f"{base}/approvals", headers={"Accept": "application/json"})
            if response.status_code != 200:  # 404: a conversation not started yet
                return ()
            listed = {"text": "", "status": "awaiting_approval", **response.json()}
            return _remote_result(args.conversation, listed).approvals

        await converse(turn, decide, waiting)
    return 0


def run_chat(args: argparse.Namespace) -> int:
    """Exit codes: 0 at end of input (Ctrl-D), 130 on Ctrl-C, 1 when the chat
    cannot start or the server goes away (one line on stderr)."""
    failure: BaseException | None = None
    interrupted = False
    with _line_editing():
        try:
            return trio.run(_chat_remote if args.url else _chat_in_process, args)
        except* KeyboardInterrupt:
            interrupted = True
        except* httpx2.HTTPError as group:
            error = first_reportable(group, (httpx2.HTTPError,))
            failure = CommandError(f"lost {args.url}: {error}")
        except* REPORTED as group:
            failure = first_reportable(group, REPORTED)
    if interrupted:
        _write("\n")
        return 130
    return report("chat", str(failure))

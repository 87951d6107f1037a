"""``agentik chat``: an interactive terminal chat, streaming each answer.

In-process (an agent on the configured database and model) or against a
running server (``--url``, through the native SSE endpoint; the server is
asked once before the first prompt, so a dead address or a refused token is
one line at start, not a surprise at the first message). Lines are read in a
worker thread, one hop per line, so the event loop never blocks; the wait is
abandoned on Ctrl-C, so Ctrl-C at the prompt quits at once (exit 130).

On a terminal, lines are read with the standard library's ``readline``
(GNU readline or libedit): arrow keys edit the line and recall earlier lines
of the session, and no escape code reaches the stored message.

A turn that comes back waiting for approval (a tool that requires it) asks
at the prompt, call by call, ``approve name(arguments)? [y/N]``, and sends
the decision (``agent.decide``, or ``POST …/approvals/{call_id}``); the turn
then goes on and its answer prints. Ctrl-D at that question leaves the calls
waiting (they stay waiting across restarts) and ends the chat.
prompt_toolkit would do the same with a new dependency, and it runs on
asyncio, not on trio; ``readline`` needs neither. Where the platform has no
``readline`` (Windows), lines are read without editing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx2
import trio

from agentik._errors import AgentikError
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


Decide = Callable[[ApprovalRequest, bool], Awaitable[TurnResult | None]]


async def settle_approvals(result: TurnResult | None, decide: Decide) -> bool:
    """While the turn waits for approval, ask about each waiting call and send
    the decision; print the answer once the turn goes on. False when the
    person ended the input (Ctrl-D) at a question: the calls keep waiting."""
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
        if result is not None and result.status == "finished":
            _write(f"agent> {result.text}\n")
    return True


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
    from agentik._config import load_config
    from agentik.agent import DEFAULT_SYSTEM_PROMPT, open_chat_agent
    from agentik.server._serve import _model, load_tools, load_toolsets
    from agentik.storage._location import open_storage

    overrides = {("storage", "database"): args.database} if args.database else {}
    config = load_config(Path(args.config) if args.config else None, overrides=overrides)
    async with (
        open_storage(config.database) as storage,
        _model(config) as (model, label),
        open_chat_agent(
            model=model,
            storage=storage,
            tools=load_tools(config.tools),
            toolsets=load_toolsets(config.toolsets),
            system_prompt=config.system_prompt or DEFAULT_SYSTEM_PROMPT,
        ) as agent,
    ):
        print(
            f"chatting in-process with {label}; conversation {args.conversation!r};"
            " Ctrl-D or Ctrl-C to quit"
        )

        async def decide(approval: ApprovalRequest, approve: bool) -> TurnResult | None:
            try:
                return await agent.decide(args.conversation, approval.call.id, approve=approve)
            except AgentikError as error:
                _write(f"  [decision failed] {error}\n")
                return None

        while (line := await _read_line()) is not None:
            if line.strip():
                async with agent.stream(args.conversation, line) as events:
                    result = await print_stream(events)
                if not await settle_approvals(result, decide):
                    break
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

        async def decide(approval: ApprovalRequest, approve: bool) -> TurnResult | None:
            response = await client.post(
                f"{base}/approvals/{approval.call.id}",
                json={"approve": approve},
                headers={"Accept": "application/json"},
            )
            if response.status_code != 200:
                print(f"  [HTTP {response.status_code}] {response.text}")
                return None
            return _remote_result(args.conversation, response.json())

        while (line := await _read_line()) is not None:
            if not line.strip():
                continue
            async with client.stream("POST", f"{base}/turns", json={"text": line}) as response:
                if response.status_code != 200:
                    await response.aread()
                    print(f"  [HTTP {response.status_code}] {response.text}")
                    continue
                result = await print_stream(_remote_events(response, args.conversation))
            if not await settle_approvals(result, decide):
                break
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

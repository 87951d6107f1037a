"""Ctrl-C while an answer streams drops that answer and returns to the prompt;
Ctrl-C at the prompt quits. On a real terminal (a pty), against a server in
this process whose model holds its answer half-way until the test lets it go,
so the interrupt lands mid-stream without any timing guess."""

from __future__ import annotations

import os
import pty
import signal
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import attrs
import httpx2
import trio

from agentik import ModelRequest, ModelResponse, Role
from agentik.models import ModelStreamEvent, TextDelta
from agentik.server import ServerConfig, serve_agentik
from tests.cli.test_chat_terminal import Screen, cli_env

FIRST, REST = "the first words", " and the rest"


@attrs.define
class HeldModel:
    """Streams ``FIRST`` for the message ``long``, then waits for ``release``
    before the rest; echoes anything else at once."""

    release: trio.Event = attrs.Factory(trio.Event)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=self._text(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        text = self._text(request)
        if text == FIRST + REST:
            yield TextDelta(FIRST)
            await self.release.wait()
            yield TextDelta(REST)
        else:
            yield TextDelta(text)
        yield ModelResponse(text=text)

    @staticmethod
    def _text(request: ModelRequest) -> str:
        said = [m.content for m in request.messages if m.role is Role.USER][-1]
        return FIRST + REST if said == "long" else f"You said: {said}"


async def test_ctrl_c_mid_answer_drops_it_and_ctrl_c_at_the_prompt_quits(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model = HeldModel()
    config = ServerConfig(port=0, database=str(tmp_path / "held.db"))
    stop = trio.Event()
    url = await nursery.start(
        partial(serve_agentik, config, shutdown_trigger=stop.wait, model=model)
    )
    master, slave = pty.openpty()
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agentik.cli", "chat", "--url", url, "--conversation", "held"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=tmp_path,
        env=cli_env(),
        start_new_session=True,
    )
    os.close(slave)
    screen = Screen(master)
    try:
        await screen.wait_for(r"you> ")
        await screen.type(b"long\r")
        await screen.wait_for(rf"agent> {FIRST}")
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        await screen.wait_for(r"\[answer dropped: Ctrl-C; the turn goes on and is stored\]\n")
        await screen.wait_for(r"you> ", 2)
        assert process.returncode is None, "the chat goes on"
        model.release.set()  # the dropped turn finishes on the server
        await screen.type(b"hi\r")
        await screen.wait_for(r"agent> You said: hi\n")
        await screen.wait_for(r"you> ", 3)
        process.send_signal(signal.SIGINT)  # at the prompt: quit
        with trio.fail_after(60):
            code = await process.wait()
        await screen.drain()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await screen.stream.aclose()
    assert code == 130, screen.text
    assert "Traceback" not in screen.text
    assert REST not in screen.text, "the dropped answer's rest is never shown"
    async with httpx2.AsyncClient(base_url=url) as client:
        stored = (await client.get("/agentik/conversations/held/messages")).json()["messages"]
    stop.set()
    assert [m["content"] for m in stored] == ["long", FIRST + REST, "hi", "You said: hi"]

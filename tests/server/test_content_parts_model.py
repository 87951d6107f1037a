"""A text-only model behind the server: ``[model] accepts_parts`` says what
the backend takes; a turn with an image or a file for a model that takes
none is 415 (``unsupported_content``) on every transport, nothing stored,
and the A2A agent card offers text only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import trio

from agentik import ModelRequest, ModelResponse
from agentik.models import ScriptedModel
from agentik.server import ConfigError, ServerConfig, load_config, serve_agentik
from agentik.server._serve import model_timeouts

B64_PNG = "iVBORw0KGgo="


def _echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text="ok")


@pytest.fixture
async def text_only(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[httpx2.AsyncClient]:
    config = ServerConfig(port=0, database=str(tmp_path / "a.db"))
    stop = trio.Event()
    url = await nursery.start(
        lambda task_status: serve_agentik(
            config,
            shutdown_trigger=stop.wait,
            model=ScriptedModel(_echo, accepts_parts=()),
            task_status=task_status,
        )
    )
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        yield client
    stop.set()


async def test_every_transport_refuses_parts_with_415(text_only: httpx2.AsyncClient) -> None:
    image = {"type": "image", "data": B64_PNG, "media_type": "image/png"}
    native = await text_only.post("/agentik/conversations/c/turns", json={"content": [image]})
    assert native.status_code == 415, native.text
    assert native.json()["error"]["code"] == "unsupported_content"
    a2a = await text_only.post(
        "/a2a",
        headers={"A2A-Version": "1.0"},
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "m",
                    "role": "ROLE_USER",
                    "parts": [{"text": "see"}, {"raw": B64_PNG, "mediaType": "image/png"}],
                }
            },
        },
    )
    assert a2a.status_code == 415, a2a.text
    agui = await text_only.post(
        "/agui",
        headers={"Accept": "text/event-stream"},
        json={
            "threadId": "t",
            "runId": "r",
            "messages": [
                {
                    "id": "u",
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "url", "value": "https://x/a.png"}}
                    ],
                }
            ],
        },
    )
    assert agui.status_code == 415, agui.text
    assert (await text_only.get("/agentik/conversations")).json()["conversations"] == []
    text = await text_only.post("/agentik/conversations/c/turns", json={"text": "hi"})
    assert text.status_code == 200, text.text
    card = (await text_only.get("/.well-known/agent-card.json")).json()
    assert card["defaultInputModes"] == ["text/plain"]


def test_accepts_parts_is_read_from_the_config(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text('[model]\nbase_url = "http://x/v1"\nmodel = "m"\naccepts_parts = []\n')
    settings = load_config(path, env={}).model
    assert settings is not None
    assert settings.accepts_parts == ()
    assert model_timeouts(settings)["accepts_parts"] == ()
    env = {"AGENTIK_MODEL_ACCEPTS_PARTS": "image"}
    from_env = load_config(path, env=env).model
    assert from_env is not None
    assert from_env.accepts_parts == ("image",)
    path.write_text('[model]\nbase_url = "http://x/v1"\nmodel = "m"\n')
    default = load_config(path, env={}).model
    assert default is not None
    assert "accepts_parts" not in model_timeouts(default)
    path.write_text('[model]\nbase_url = "http://x/v1"\nmodel = "m"\naccepts_parts = ["video"]\n')
    with pytest.raises(ConfigError, match=r"^\[model\] accepts_parts must be a list of 'image'"):
        load_config(path, env={})

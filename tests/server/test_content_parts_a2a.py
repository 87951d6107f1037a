"""Images and files over A2A, with the a2a-sdk client against a real server:
``raw`` (bytes) and ``url`` parts of a new message become the user message's
parts (an ``image/…`` mediaType an image, anything else a file), stored with
it; a raw part past ``[limits] max_part_bytes`` is refused with 413 and
nothing is stored; the agent card lists the input modes."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
from a2a.client import A2AClientError
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState

from agentik import FilePart, ImagePart
from agentik.models import ScriptedModel
from agentik.server import Limits
from agentik.server._content import input_modes
from agentik.server.a2a._views import agent_card
from tests.server.a2a_support import serving

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def _message(parts: list[Part], message_id: str = "m1") -> SendMessageRequest:
    message = Message(message_id=message_id, role=Role.ROLE_USER, parts=parts, context_id="ctx")
    return SendMessageRequest(message=message)


async def _stored(served: object, context_id: str) -> list[object]:
    store = served.storage.message_store  # type: ignore[attr-defined]
    return [m async for m in store.get_messages(context_id)]


@pytest.mark.parametrize("streaming", [False, True])
async def test_raw_and_url_parts_are_kept_with_the_message(tmp_path: Path, streaming: bool) -> None:
    async with serving(tmp_path / "a.db", streaming=streaming) as served:
        parts = [
            Part(text="what is this?"),
            Part(raw=PNG, media_type="image/png", filename="cat.png"),
            Part(url="https://example.com/a.pdf", media_type="application/pdf", filename="a.pdf"),
            Part(raw=b"", filename="empty.bin"),
        ]
        states = []
        async for response in served.sdk.send_message(_message(parts)):
            kind = response.WhichOneof("payload")
            if kind == "task":
                states.append(response.task.status.state)
            elif kind == "status_update":
                states.append(response.status_update.status.state)
        assert states[-1] == TaskState.TASK_STATE_COMPLETED
        user = (await _stored(served, "ctx"))[0]
        assert user.content == "what is this?"  # type: ignore[attr-defined]
        assert user.parts == (  # type: ignore[attr-defined]
            ImagePart(data=PNG, media_type="image/png"),
            FilePart(
                url="https://example.com/a.pdf", media_type="application/pdf", filename="a.pdf"
            ),
            FilePart(data=b"", media_type="application/octet-stream", filename="empty.bin"),
        )


async def test_a_raw_part_past_the_limit_is_413_and_nothing_is_stored(tmp_path: Path) -> None:
    async with serving(tmp_path / "a.db", limits=Limits(max_part_bytes=len(PNG) - 1)) as served:
        with pytest.raises((A2AClientError, httpx2.HTTPStatusError), match=r"413"):
            async for _ in served.sdk.send_message(
                _message([Part(text="x"), Part(raw=PNG, media_type="image/png")])
            ):
                pass
        assert await _stored(served, "ctx") == []
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "m2",
                    "role": "ROLE_USER",
                    "contextId": "ctx",
                    "parts": [{"raw": "AAAA" * len(PNG), "mediaType": "image/png"}],
                }
            },
        }
        response = await served.raw.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "part_too_large"
        assert await _stored(served, "ctx") == []


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"raw": "!!"}, "field 'message.parts[0].raw' must be base64 text"),
        ({"raw": 5}, "field 'message.parts[0].raw' must be base64 text"),
        ({"url": ""}, "field 'message.parts[0].url' must be a non-empty string"),
        ({"url": "u", "mediaType": "pdf"}, "media_type must be a type/subtype string"),
        ({"url": "u", "filename": 3}, "field 'message.parts[0].filename' must be a string"),
    ],
)
async def test_bad_parts_are_invalid_params(
    tmp_path: Path, part: dict[str, object], message: str
) -> None:
    async with serving(tmp_path / "a.db") as served:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [part]}},
        }
        response = await served.raw.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
        error = response.json()["error"]
        assert error["code"] == -32602
        assert message in error["message"]
        assert await served.storage.message_store.list_conversations() == []


async def test_url_safe_unpadded_base64_is_taken(tmp_path: Path) -> None:
    """ProtoJSON bytes may be URL-safe and unpadded."""
    async with serving(tmp_path / "a.db") as served:
        data = b"\xfb\xff\xfe"  # '+//+' standard, '-__-' URL-safe
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "m",
                    "role": "ROLE_USER",
                    "contextId": "u",
                    "parts": [{"raw": "-__-", "mediaType": "image/png"}],
                }
            },
        }
        response = await served.raw.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
        assert "result" in response.json(), response.text
        assert (await _stored(served, "u"))[0].parts == (  # type: ignore[attr-defined]
            ImagePart(data=data, media_type="image/png"),
        )


def test_the_card_lists_what_the_model_takes() -> None:
    assert input_modes(frozenset()) == ["text/plain"]
    assert input_modes(ScriptedModel(lambda r: None).accepts_parts) == [  # type: ignore[arg-type,return-value]
        "text/plain",
        "image/*",
        "application/*",
    ]
    card = agent_card(
        url="u",
        name="n",
        description="d",
        version="v",
        skills=[],
        bearer_auth=False,
        input_modes=["text/plain", "image/*"],
    )
    assert card["defaultInputModes"] == ["text/plain", "image/*"]


async def test_get_task_shows_the_images_and_files_in_its_history(tmp_path: Path) -> None:
    """GetTask rebuilds the task from the store: the user message's raw and
    url parts come back as they were sent, also an image-only message."""
    async with serving(tmp_path / "a.db") as served:
        parts = [
            Part(raw=PNG, media_type="image/png"),
            Part(url="https://example.com/a.pdf", media_type="application/pdf", filename="a.pdf"),
        ]
        task_id = None
        async for response in served.sdk.send_message(_message(parts, "img-only")):
            if response.WhichOneof("payload") == "task":
                task_id = response.task.id
        assert task_id is not None
        task = await served.sdk.get_task(GetTaskRequest(id=task_id, history_length=10))
        user = task.history[0]
        assert user.role == Role.ROLE_USER
        assert [p.WhichOneof("content") for p in user.parts] == ["raw", "url"]
        assert user.parts[0].raw == PNG
        assert user.parts[0].media_type == "image/png"
        assert (user.parts[1].url, user.parts[1].filename) == ("https://example.com/a.pdf", "a.pdf")

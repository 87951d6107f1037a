"""Content parts on the Chat Completions wire: a message with parts is sent
as OpenAI's content parts (text, ``image_url``, ``file``), inline data as a
``data:`` URL, to a real HTTP server."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik import FilePart, ImagePart, Message, Role, TextPart
from agentik._errors import ModelBackendError
from agentik._parts import Part
from agentik.models import ModelRequest, OpenAICompatibleModel, accepts_parts_of
from agentik.models._wire import content_parts
from tests import strategies as s
from tests.models.chat_server import ChatServer, Json, completion


@pytest.fixture
async def model(chat_server: ChatServer) -> AsyncIterator[OpenAICompatibleModel]:
    async with OpenAICompatibleModel(chat_server.base_url, "m", "sk-x") as model:
        yield model


async def test_parts_go_as_openai_content_parts(
    model: OpenAICompatibleModel, chat_server: ChatServer
) -> None:
    chat_server.script(Json(completion("ok")))
    parts: tuple[Part, ...] = (
        ImagePart(url="https://example.com/cat.png"),
        ImagePart(data=b"\x89PNG", media_type="image/png"),
        TextPart(text="then"),
        FilePart(data=b"%PDF-1", media_type="application/pdf", filename="a.pdf"),
        FilePart(url="https://example.com/b.pdf"),
    )
    request = ModelRequest(
        messages=[Message(Role.SYSTEM, "s"), Message(Role.USER, "look", parts=parts)]
    )
    await model.complete(request)
    [received] = chat_server.received
    assert received.body["messages"] == [
        {"role": "system", "content": "s"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
                {"type": "text", "text": "then"},
                {
                    "type": "file",
                    "file": {
                        "file_data": "data:application/pdf;base64,JVBERi0x",
                        "filename": "a.pdf",
                    },
                },
                {"type": "file", "file": {"file_id": "https://example.com/b.pdf"}},
            ],
        },
    ]


async def test_a_message_without_parts_is_sent_as_before(
    model: OpenAICompatibleModel, chat_server: ChatServer
) -> None:
    chat_server.script(Json(completion("ok")))
    await model.complete(ModelRequest(messages=[Message(Role.USER, "q")]))
    assert chat_server.received[0].body["messages"] == [{"role": "user", "content": "q"}]


@given(st.lists(s.image_parts | s.file_parts, min_size=1, max_size=4), s.texts)
def test_inline_data_travels_whole(parts: list[Part], text: str) -> None:
    """Each part's data comes back from its data URL, byte for byte, in order."""
    sent = content_parts(Message(Role.USER, text, parts=parts))
    if text:
        assert sent[0] == {"type": "text", "text": text}
        sent = sent[1:]
    assert len(sent) == len(parts)
    for item, part in zip(sent, parts, strict=True):
        assert not isinstance(part, TextPart)
        assert isinstance(item, dict)
        inner = item["image_url"] if isinstance(part, ImagePart) else item["file"]
        assert isinstance(inner, dict)
        url = inner.get("url", inner.get("file_data", inner.get("file_id")))
        assert isinstance(url, str)
        if part.data is None:
            assert url == part.url
        else:
            head, _, data = url.partition(",")
            assert head == f"data:{part.media_type};base64"
            assert base64.b64decode(data, validate=True) == part.data


def test_what_a_backend_takes_is_checked() -> None:
    assert accepts_parts_of(object()) == frozenset(), "a model that does not say is text-only"
    with pytest.raises(
        ModelBackendError, match=r"^accepts_parts takes 'image' and 'file', got 'video'$"
    ):
        OpenAICompatibleModel("http://x", "m", accepts_parts=["video"])  # type: ignore[list-item]


async def test_a_text_only_backend_never_gets_a_part_it_cannot_take(
    chat_server: ChatServer,
) -> None:
    """A request that still carries an image (a reflection over a history with
    one) goes to a text-only backend with a line of text in its place."""
    chat_server.script(Json(completion("ok")))
    async with OpenAICompatibleModel(chat_server.base_url, "m", "sk-x", accepts_parts=()) as model:
        parts = (ImagePart(url="https://example.com/a.png"), TextPart(text="t"), FilePart(url="u"))
        await model.complete(ModelRequest(messages=[Message(Role.USER, "", parts=parts)]))
    assert chat_server.received[0].body["messages"][0]["content"] == [
        {"type": "text", "text": "[image not shown: this model takes no images]"},
        {"type": "text", "text": "t"},
        {"type": "text", "text": "[file not shown: this model takes no files]"},
    ]

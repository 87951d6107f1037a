"""``send(content=[...])``: images and files in a turn.

The user message keeps the text parts' text as its ``content`` and the other
parts, in order, as its ``parts``; they are stored, reloaded, and reach the
model in its request. A model that takes no images (or files) refuses such a
turn before anything is stored (``unsupported_content``), unless a describer
maps images to text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import (
    FilePart,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    TextPart,
    TurnError,
)
from agentik._parts import Part
from agentik.agent import TurnFinished, open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage, open_sqlite_storage
from tests import strategies as s
from tests.agent.helpers import stored

IMAGE = ImagePart(data=b"\x89PNG\x00\xff", media_type="image/png")
PDF = FilePart(url="https://example.com/a.pdf", media_type="application/pdf", filename="a.pdf")


class Recorder:
    """A scripted model that keeps every request it saw."""

    def __init__(self, accepts: tuple[str, ...] = ("image", "file")) -> None:
        self.requests: list[ModelRequest] = []
        self.model = ScriptedModel(self.respond, accepts_parts=accepts)

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        last = request.messages[-1]
        return ModelResponse(text=f"saw {len(last.parts)} parts")


async def test_parts_are_stored_and_reach_the_model(tmp_path: Path) -> None:
    content = [TextPart(text="look"), IMAGE, TextPart(text="and read"), PDF]
    recorder = Recorder()
    async with (
        open_sqlite_storage(tmp_path / "a.db") as storage,
        open_chat_agent(model=recorder.model, storage=storage) as agent,
    ):
        result = await agent.send("c", content=content)
        assert result.text == "saw 2 parts"
        user = recorder.requests[0].messages[-1]
        assert (user.role, user.content, user.parts) == (Role.USER, "look\nand read", (IMAGE, PDF))
    async with open_sqlite_storage(tmp_path / "a.db") as storage:
        history = await stored(storage, "c")
        assert history[0].parts == (IMAGE, PDF)
        assert history[0].content == "look\nand read"
        assert history[1].parts == ()
        recorder2 = Recorder()
        async with open_chat_agent(model=recorder2.model, storage=storage) as agent:
            await agent.send("c", "and now?")  # the reloaded history carries the parts
        assert recorder2.requests[0].messages[1].parts == (IMAGE, PDF)


async def test_stream_takes_content_too() -> None:
    recorder = Recorder()
    async with open_chat_agent(model=recorder.model, storage=in_memory_storage()) as agent:
        async with agent.stream("c", content=[IMAGE]) as events:
            last = [event async for event in events][-1]
        assert isinstance(last, TurnFinished)
        assert last.result.text == "saw 1 parts"
        assert recorder.requests[0].messages[-1] == Message(Role.USER, "", parts=(IMAGE,))


async def test_a_keyed_turn_with_parts_is_kept_once() -> None:
    storage = in_memory_storage()
    recorder = Recorder()
    async with open_chat_agent(model=recorder.model, storage=storage) as agent:
        first = await agent.send("c", content=[IMAGE], idempotency_key="k")
        again = await agent.send("c", content=[IMAGE], idempotency_key="k")
    assert again.text == first.text
    assert len(recorder.requests) == 1
    assert [m.parts for m in await stored(storage, "c")] == [(IMAGE,), ()]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, TypeError, "^send needs text or content, got neither$"),
        ({"text": "a", "content": [IMAGE]}, TypeError, "^give text or content, not both$"),
        ({"content": []}, ValueError, "^content must hold at least one part$"),
        ({"content": "text"}, TypeError, "^content must be a list of parts, got str$"),
        (
            {"content": [IMAGE, "x"]},
            TypeError,
            "^content parts must be TextPart, ImagePart or FilePart, got str$",
        ),
        (
            {"content": [TextPart(text="")]},
            ValueError,
            "^content must hold some text, an image or a file$",
        ),
        (
            {"content": [TextPart(text="a\ud800"), IMAGE]},
            ValueError,
            "^text must be valid Unicode",
        ),
        (
            {"content": [FilePart(url="https://x/\udc00", filename="f")]},
            ValueError,
            "^content part 0's url must be valid Unicode",
        ),
        (
            {"content": [TextPart(text="see"), FilePart(url="u", filename="a\ud800")]},
            ValueError,
            "^content part 0's filename must be valid Unicode",
        ),
    ],
)
async def test_bad_content_is_refused_and_nothing_stored(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    storage = in_memory_storage()
    async with open_chat_agent(model=Recorder().model, storage=storage) as agent:
        with pytest.raises(error, match=message):
            await agent.send("c", **kwargs)  # type: ignore[arg-type]
    assert await storage.message_store.list_conversations() == []


@pytest.mark.parametrize(
    ("accepts", "part", "message"),
    [
        ((), IMAGE, "the model takes no images"),
        (("file",), IMAGE, "the model takes no images"),
        ((), PDF, "the model takes no files"),
        (("image",), PDF, "the model takes no files"),
    ],
)
async def test_a_text_only_model_refuses_parts_before_anything_is_stored(
    accepts: tuple[str, ...], part: Part, message: str
) -> None:
    storage = in_memory_storage()
    recorder = Recorder(accepts)
    async with open_chat_agent(model=recorder.model, storage=storage) as agent:
        with pytest.raises(TurnError, match=f"^{message}") as info:
            await agent.send("c", content=[TextPart(text="see"), part])
        with pytest.raises(TurnError, match=f"^{message}"):
            async with agent.stream("c", content=[part]):
                pass
        assert info.value.code == "unsupported_content"
        assert (await agent.send("c", "text still works")).text == "saw 0 parts"
    assert len(await stored(storage, "c")) == 2


async def test_a_describer_maps_images_to_text_for_a_text_only_model() -> None:
    storage = in_memory_storage()
    recorder = Recorder(accepts=())
    asked: list[ImagePart] = []

    async def describe(image: ImagePart) -> str:
        asked.append(image)
        return f"a picture of {len(image.data or b'')} bytes"

    async with open_chat_agent(
        model=recorder.model, storage=storage, describe_image=describe
    ) as agent:
        await agent.send("c", content=[TextPart(text="what is it?"), IMAGE])
        await agent.send("c", "and again?")
        with pytest.raises(TurnError, match=r"^the model takes no files"):
            await agent.send("c", content=[PDF])  # files are not described
    described = TextPart(text="[image: a picture of 6 bytes]")
    assert recorder.requests[0].messages[-1].parts == (described,)
    assert recorder.requests[1].messages[1].parts == (described,)
    assert asked == [IMAGE], "the same image was described more than once"
    assert (await stored(storage, "c"))[0].parts == (IMAGE,), "the stored message lost its image"


async def test_a_model_taking_images_is_not_given_descriptions() -> None:
    recorder = Recorder()

    async def describe(image: ImagePart) -> str:
        raise AssertionError("not asked")

    async with open_chat_agent(
        model=recorder.model, storage=in_memory_storage(), describe_image=describe
    ) as agent:
        await agent.send("c", content=[IMAGE])
    assert recorder.requests[0].messages[-1].parts == (IMAGE,)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(s.parts, min_size=1, max_size=5))
async def test_any_content_round_trips_through_a_turn(parts: list[Part]) -> None:
    """Odd bytes, empty data, any unicode: the model sees and the store keeps
    the non-text parts in order, the text parts joined as the content."""
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    others = tuple(p for p in parts if not isinstance(p, TextPart))
    if not others and not "\n".join(texts):
        return
    storage = in_memory_storage()
    recorder = Recorder()
    async with open_chat_agent(model=recorder.model, storage=storage) as agent:
        await agent.send("c", content=parts)
    user = (await stored(storage, "c"))[0]
    assert (user.content, user.parts) == ("\n".join(texts), others)
    assert recorder.requests[0].messages[-1].parts == others


async def test_a_describer_that_fails_fails_the_turn_and_the_agent_goes_on() -> None:
    storage = in_memory_storage()
    recorder = Recorder(accepts=())
    calls = 0

    async def describe(image: ImagePart) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("vision service down")
        return "a cat"

    async with open_chat_agent(
        model=recorder.model, storage=storage, describe_image=describe
    ) as agent:
        with pytest.raises(TurnError, match=r"^describe_image raised RuntimeError") as info:
            await agent.send("c", content=[IMAGE])
        assert info.value.code == "internal_error"
        assert (await agent.send("c", "again")).text == "saw 0 parts"
    assert recorder.requests[-1].messages[1].parts == (TextPart(text="[image: a cat]"),)

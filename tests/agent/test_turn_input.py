"""Strings a store cannot hold are refused before a turn runs.

A Python ``str`` may hold a lone surrogate ("\\ud800"), which is not Unicode
text and has no UTF-8 form. Such a conversation id, text or idempotency key
used to reach SQLite and fail there, as a ``store_error`` counted as a
storage fault (an HTTP 500). ``send`` and ``stream`` now refuse it with a
``ValueError`` naming the field and the character, and nothing is stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import ModelRequest, ModelResponse
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle, in_memory_storage, open_sqlite_storage, writer_stats

FIELDS = ["conversation_id", "text", "idempotency_key"]
VALID = {"conversation_id": "c", "text": "hello", "idempotency_key": "k"}


def echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=request.messages[-1].content)


surrogates = st.characters(categories=["Cs"])
unicode_text = st.text(st.characters(codec="utf-8"), max_size=20)
"""Any Unicode text (the utf-8 codec leaves lone surrogates out)."""


@st.composite
def with_surrogate(draw: st.DrawFn) -> str:
    """Text with at least one lone surrogate, anywhere."""
    before, after = draw(unicode_text), draw(unicode_text)
    return before + draw(surrogates) + after


async def send(storage: StorageBundle, values: dict[str, str]) -> str:
    async with open_chat_agent(model=ScriptedModel(echo), storage=storage) as agent:
        result = await agent.send(
            values["conversation_id"], values["text"], idempotency_key=values["idempotency_key"]
        )
    return result.text


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(FIELDS), bad=with_surrogate())
def test_a_lone_surrogate_is_refused_and_nothing_stored(field: str, bad: str) -> None:
    """In any field, anywhere in the string: a ValueError naming the field and
    the character, before anything is stored."""
    storage = in_memory_storage()
    values = {**VALID, field: bad}
    if field == "conversation_id":
        bad = bad[:256]  # longer ids are refused for their length first
        values[field] = bad
    index = next(i for i, c in enumerate(bad) if 0xD800 <= ord(c) <= 0xDFFF)
    with pytest.raises(ValueError, match=rf"^{field} must be valid Unicode") as info:
        trio.run(send, storage, values)
    assert f"{bad[index]!r} at index {index}" in str(info.value)
    assert trio.run(storage.message_store.list_conversations) == []


@settings(max_examples=100, deadline=None)
@given(text=unicode_text.filter(bool), key=unicode_text.filter(bool))
def test_any_unicode_text_is_accepted(text: str, key: str) -> None:
    """The check refuses only what cannot be stored: any Unicode text and key
    (astral characters, NUL, controls) go through."""
    assert (
        trio.run(
            send,
            in_memory_storage(),
            {"conversation_id": "c", "text": text, "idempotency_key": key},
        )
        == text
    )


@pytest.mark.parametrize("field", FIELDS)
async def test_sqlite_gets_no_write_it_cannot_store(field: str, tmp_path: Path) -> None:
    """On SQLite the refusal comes before the writer: no failed write, no
    store_error, and the conversation goes on."""
    async with open_sqlite_storage(tmp_path / "db") as storage:
        with pytest.raises(ValueError, match=rf"^{field} must be valid Unicode"):
            await send(storage, {**VALID, field: "a\ud800b"})
        stats = writer_stats(storage)
        assert stats is not None and stats.failed_writes == 0
        assert await send(storage, VALID) == "hello"

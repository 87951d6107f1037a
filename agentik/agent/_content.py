"""A turn's content parts: what ``send(content=[...])`` becomes, whether the
model can take it, and images described in text for a model that cannot.

``turn_input`` splits the content into the user message's text (its text
parts, joined by newlines: ``Message.content``) and its other parts, in order
(``Message.parts``). ``check_supported`` refuses, before anything is stored,
a part the model does not take (``accepts_parts``) unless a describer maps
images to text (``TurnError``, ``unsupported_content``). ``described`` gives
the request a text-only model sees: each image replaced by its description,
asked once per image (by content, or by url) and kept in a bounded cache.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeAlias

import attrs

from agentik._errors import TurnError
from agentik._messages import Message
from agentik._parts import PART_TYPES, FilePart, ImagePart, Part, TextPart, blob_hash
from agentik.agent._failures import component_error
from agentik.models import PartKind

ImageDescriber: TypeAlias = Callable[[ImagePart], Awaitable[str]]
"""Describes an image in text, for a model that takes no images
(``open_chat_agent(describe_image=...)``)."""

DESCRIPTIONS_KEPT = 10_000
"""Image descriptions a cache keeps (oldest dropped first)."""


def turn_input(text: str | None, content: Sequence[Part] | None) -> tuple[str, tuple[Part, ...]]:
    """The user message's text and parts from ``send``'s ``text`` or
    ``content`` (exactly one); a clear ``ValueError`` or ``TypeError``."""
    if content is None:
        if text is None:
            raise TypeError("send needs text or content, got neither")
        return text, ()
    if text is not None:
        raise TypeError("give text or content, not both")
    if isinstance(content, str | bytes) or not isinstance(content, Sequence):
        raise TypeError(f"content must be a list of parts, got {type(content).__name__}")
    if not content:
        raise ValueError("content must hold at least one part")
    texts: list[str] = []
    parts: list[Part] = []
    for part in content:
        if not isinstance(part, PART_TYPES):
            raise TypeError(
                f"content parts must be TextPart, ImagePart or FilePart, got {type(part).__name__}"
            )
        if isinstance(part, TextPart):
            texts.append(part.text)
        else:
            parts.append(part)
    joined = "\n".join(texts)
    if not parts and not joined:
        raise ValueError("content must hold some text, an image or a file")
    return joined, tuple(parts)


def check_supported(
    parts: Iterable[Part], accepts: frozenset[PartKind], describer: ImageDescriber | None
) -> None:
    """Refuse parts the model does not take (``unsupported_content``)."""
    for part in parts:
        if isinstance(part, ImagePart) and "image" not in accepts and describer is None:
            raise TurnError(
                "the model takes no images (accepts_parts) and no describer maps them"
                " to text (describe_image); send text only",
                code="unsupported_content",
            )
        if isinstance(part, FilePart) and "file" not in accepts:
            raise TurnError(
                "the model takes no files (accepts_parts); send the file's text instead",
                code="unsupported_content",
            )


@attrs.define
class Descriptions:
    """Image descriptions by image (its data's hash, or its url): bounded,
    shared by the agent's conversations (the same picture is described once)."""

    describe: ImageDescriber
    kept: collections.OrderedDict[str, str] = attrs.Factory(collections.OrderedDict)

    async def of(self, image: ImagePart) -> str:
        key = f"url:{image.url}" if image.data is None else f"sha256:{blob_hash(image.data)}"
        found = self.kept.get(key)
        if found is None:
            try:
                found = await self.describe(image)
            except Exception as exc:  # outside code: its failure fails the turn, coded
                raise component_error("describe_image", exc) from exc
            if not isinstance(found, str):
                raise TurnError(
                    f"describe_image gave {type(found).__name__}, expected a string",
                    code="internal_error",
                )
            self.kept[key] = found
            if len(self.kept) > DESCRIPTIONS_KEPT:
                self.kept.popitem(last=False)
        return found


async def described(messages: Sequence[Message], descriptions: Descriptions) -> list[Message]:
    """``messages`` with each image replaced by a text part describing it."""
    out: list[Message] = []
    for message in messages:
        if not any(isinstance(part, ImagePart) for part in message.parts):
            out.append(message)
            continue
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, ImagePart):
                part = TextPart(text=f"[image: {await descriptions.of(part)}]")
            parts.append(part)
        out.append(attrs.evolve(message, parts=tuple(parts)))
    return out

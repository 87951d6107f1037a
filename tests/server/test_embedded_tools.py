"""A program that embeds the server passes its tools and toolsets to
``ServerConfig`` as objects (``NamedTool``, ``ToolsetContribution``, lists of
them, callables returning them), not only as ``"module:attr"`` strings."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
import trio

from agentik import NamedTool, ToolsetContribution, tool
from agentik.server import ConfigError, ServerConfig, load_tools, load_toolsets, serve_agentik


@tool
async def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


async def _whisper(arguments: dict[str, object]) -> str:
    return str(arguments.get("text", "")).lower()


WHISPER = NamedTool("whisper", "Say it softer.", {"type": "object"}, _whisper)


@tool
async def scales_weigh(grams: int) -> str:
    """Weigh something."""
    return f"{grams} g"


SCALES = ToolsetContribution(name="scales", description="Weighs things.", tools=(scales_weigh,))


async def test_an_embedding_program_passes_its_tools_as_objects(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The demo model calls what the text names when it is offered: each tool
    passed as an object is, and the toolset passed as an object can be enabled."""
    config = ServerConfig(
        port=0,
        database=str(tmp_path / "embedded.db"),
        tools=(shout, lambda: [WHISPER]),
        toolsets=(SCALES,),
    )
    stop = trio.Event()
    url = await nursery.start(
        lambda task_status: serve_agentik(
            config, shutdown_trigger=stop.wait, task_status=task_status
        )
    )
    turns = "/agentik/conversations/c/turns"
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        said = [
            (await client.post(turns, json={"text": text})).json()["text"]
            for text in (
                'call shout {"text": "hi"}',
                'call whisper {"text": "HUSH"}',
                'call enable_toolset {"name": "scales"}',
                'call scales_weigh {"grams": 5}',
            )
        ]
    stop.set()
    assert said == [
        "shout returned: HI",
        "whisper returned: hush",
        "enable_toolset returned: Toolset 'scales' activated.",
        "scales_weigh returned: 5 g",
    ]


def test_objects_load_as_entry_points_do() -> None:
    assert load_tools([shout, [WHISPER], lambda: WHISPER]) == [shout, WHISPER, WHISPER]
    assert load_toolsets([SCALES, lambda: [SCALES]]) == [SCALES, SCALES]


async def _bare(text: str) -> str:
    return text


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (42, r"^\[agent\] tools entry 42 must give tools \(NamedTool\), got int$"),
        ([shout, "x"], r"^\[agent\] tools entry \[NamedTool.*… gave str, expected a NamedTool$"),
        (
            _bare,
            r"^\[agent\] tools entry tests\.server\.test_embedded_tools\._bare is an async"
            r" function, not a tool: decorate it with @tool",
        ),
        (
            SCALES,
            r"^\[agent\] tools entry ToolsetContribution 'scales' must give tools"
            r" \(NamedTool\), got Toolset",
        ),
        ("no colon", r"^\[agent\] tools entry 'no colon' must be 'module:attribute'$"),
    ],
)
def test_a_bad_object_is_a_configuration_error(entry: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_tools([entry])  # type: ignore[list-item]

"""agentik calling agentik over A2A: ``remote_send`` against a second agentik
server on 127.0.0.1 (tests/a2a_client/support.py), streaming and not."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik import A2AAgentConfig, in_memory_storage, open_a2a_toolsets, open_chat_agent
from agentik.a2a_client import A2AState
from tests.a2a_client.support import caller_model, remote_agent


@pytest.mark.parametrize("streaming", [True, False])
async def test_send_returns_the_remote_agents_final_text(tmp_path: Path, streaming: bool) -> None:
    """The tool's result is the remote agent's answer; the card's skills describe it."""
    async with remote_agent(tmp_path) as remote:
        config = A2AAgentConfig(name="remote", url=remote.url, streaming=streaming)
        async with open_a2a_toolsets([config]) as (source,):
            assert source.health.streaming is streaming
            assert source.health.state is A2AState.READY
            assert "vault: Pays money." in source.contribution.description
            async with open_chat_agent(
                model=caller_model(), storage=in_memory_storage(), toolsets=[source]
            ) as agent:
                result = await agent.send("c1", "hello there")
    assert result.text == "remote: You said: hello there"

"""Public test helpers.

For code built on agentik (a pytest plugin, loaded by the ``pytest11`` entry
point; docs/testing.md): ``Script``, a scripted model that reads like the
conversation, the fixtures ``agentik_script``, ``agentik_backend``,
``agentik_storage``, ``agentik_agent_options`` and ``agentik_agent``, and
assertions on history (``assert_tool_called``, ``assert_valid_history``,
``assert_toolset_active`` …).

For storage backends: the store contract.

async def test_my_backend():
    await check_storage_bundle(lambda: open_my_storage())
"""

from agentik._public import publish as _publish
from agentik.testing._history import assert_tool_called as assert_tool_called
from agentik.testing._history import assert_toolset_active as assert_toolset_active
from agentik.testing._history import assert_toolset_inactive as assert_toolset_inactive
from agentik.testing._history import assert_valid_history as assert_valid_history
from agentik.testing._history import history as history
from agentik.testing._history import tool_result as tool_result
from agentik.testing._script import Script as Script
from agentik.testing._script import ScriptedTurn as ScriptedTurn
from agentik.testing._script import UnexpectedModelRequest as UnexpectedModelRequest
from agentik.testing._store_contract import MakeBundle as MakeBundle
from agentik.testing._store_contract import check_message_store as check_message_store
from agentik.testing._store_contract import check_reflection_store as check_reflection_store
from agentik.testing._store_contract import check_secret_store as check_secret_store
from agentik.testing._store_contract import check_skill_store as check_skill_store
from agentik.testing._store_contract import check_storage_bundle as check_storage_bundle
from agentik.testing._store_contract import (
    check_working_memory_store as check_working_memory_store,
)

__all__ = [
    "MakeBundle",
    "Script",
    "ScriptedTurn",
    "UnexpectedModelRequest",
    "assert_tool_called",
    "assert_toolset_active",
    "assert_toolset_inactive",
    "assert_valid_history",
    "check_message_store",
    "check_reflection_store",
    "check_secret_store",
    "check_skill_store",
    "check_storage_bundle",
    "check_working_memory_store",
    "history",
    "tool_result",
]

_publish(globals(), __all__, __name__)

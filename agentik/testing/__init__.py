"""Public test helpers: the store contract, for checking any storage backend.

async def test_my_backend():
    await check_storage_bundle(lambda: open_my_storage())
"""

from agentik.testing._store_contract import MakeBundle as MakeBundle
from agentik.testing._store_contract import check_message_store as check_message_store
from agentik.testing._store_contract import check_reflection_store as check_reflection_store
from agentik.testing._store_contract import check_skill_store as check_skill_store
from agentik.testing._store_contract import check_storage_bundle as check_storage_bundle
from agentik.testing._store_contract import (
    check_working_memory_store as check_working_memory_store,
)

__all__ = [
    "MakeBundle",
    "check_message_store",
    "check_reflection_store",
    "check_skill_store",
    "check_storage_bundle",
    "check_working_memory_store",
]

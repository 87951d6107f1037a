"""The store contract as public check functions, like ``trio.testing.check_two_way_stream``.

A backend author passes a factory of fresh bundles; each check opens a new
bundle per case, drives it through the public protocol only, and raises
``AssertionError`` naming what broke. agentik's own tests run the same
functions against the in-memory, SQLite and PostgreSQL backends, so every
backend is held to one definition of correct.

What a bundle is held to follows its type, as the agent treats it: a
``Storage`` to the full protocol (``FullMessageStore``,
``FullWorkingMemoryStore``); a plain ``StorageBundle`` to the seed protocols,
and the stand-ins ``full_storage`` gives it to the degraded behaviour
docs/storage.md describes (``_degraded_contract``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from agentik.storage import StorageBundle, full_storage
from agentik.testing._cases import Case
from agentik.testing._degraded_contract import DEGRADED_MEMORY_CASES, DEGRADED_MESSAGE_CASES
from agentik.testing._memory_contract import (
    FULL_WORKING_MEMORY_CASES,
    REFLECTION_CASES,
    SKILL_CASES,
    WORKING_MEMORY_CASES,
)
from agentik.testing._message_contract import FULL_MESSAGE_CASES, MESSAGE_CASES
from agentik.testing._secret_contract import SECRET_CASES

MakeBundle = Callable[[], AbstractAsyncContextManager[StorageBundle]]
"""Returns an async context manager yielding a fresh, empty bundle: a
``Storage`` for a backend with every capability, or a plain ``StorageBundle``
of seed stores."""


async def _run(
    make_bundle: MakeBundle,
    cases: tuple[Case, ...],
    full: tuple[Case, ...] = (),
    degraded: tuple[Case, ...] = (),
) -> None:
    """Each case on a fresh bundle, as a ``Storage`` (``full_storage``): the
    ``cases``, then ``full`` for a ``Storage`` or ``degraded`` for a plain
    ``StorageBundle`` (known from the first bundle opened)."""
    chosen: tuple[Case, ...] | None = None
    position = 0
    while chosen is None or position < len(chosen):
        async with make_bundle() as bundle:
            storage = full_storage(bundle)
            if chosen is None:
                chosen = cases + (degraded if storage.degraded else full)
                if not chosen:
                    return
            case = chosen[position]
            position += 1
            try:
                await case(storage)
            except AssertionError as error:
                raise AssertionError(f"store contract case {case.__name__}: {error}") from error


async def check_message_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``MessageStore`` against the contract: a ``Storage``'s
    against ``FullMessageStore``, a plain bundle's against the seed protocol
    (and its stand-ins against the degraded behaviour)."""
    await _run(make_bundle, MESSAGE_CASES, FULL_MESSAGE_CASES, DEGRADED_MESSAGE_CASES)


async def check_working_memory_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``WorkingMemoryStore`` against the contract (a
    ``Storage``'s against ``FullWorkingMemoryStore``)."""
    await _run(make_bundle, WORKING_MEMORY_CASES, FULL_WORKING_MEMORY_CASES, DEGRADED_MEMORY_CASES)


async def check_reflection_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``ReflectionStore`` against the contract."""
    await _run(make_bundle, REFLECTION_CASES)


async def check_skill_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``SkillStore`` against the contract."""
    await _run(make_bundle, SKILL_CASES)


async def check_secret_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``SecretStore`` (if it has one) against the contract."""
    await _run(make_bundle, SECRET_CASES)


async def check_storage_bundle(make_bundle: MakeBundle) -> None:
    """Check all four stores of a backend, and its secret store, against the contract."""
    await check_message_store(make_bundle)
    await check_working_memory_store(make_bundle)
    await check_reflection_store(make_bundle)
    await check_skill_store(make_bundle)
    await check_secret_store(make_bundle)

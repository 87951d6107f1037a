"""What an object lacks of a protocol, for the contract's own messages.

A ``Storage`` is checked by the type checker; code that is not (or an object
that hides a method at run time) would fail deep inside a case with an
``AttributeError``. The contract asks first and names what is missing.
"""

from __future__ import annotations

from typing import Generic, Protocol


def protocol_members(protocol: type) -> list[str]:
    """The public methods ``protocol`` (and the protocols it extends) declare."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, Protocol, Generic):
            continue
        names.update(n for n, v in vars(cls).items() if not n.startswith("_") and callable(v))
    return sorted(names)


def missing_members(value: object, protocol: type) -> list[str]:
    """The methods of ``protocol`` that ``value`` does not have."""
    return [name for name in protocol_members(protocol) if not callable(getattr(value, name, None))]

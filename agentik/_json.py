"""JSON value types, so JSON flows through the code without ``Any``; and the
two encoders the hot paths use.

``dumps_ascii`` is ``json.dumps(value)`` and ``dumps_compact`` is
``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``: the public
library call, no private encoder (issue 31.7: reusing the stdlib's private C
encoder did not measure >= 3 % on ``python -m bench.turns``).
"""

from __future__ import annotations

import json
from typing import TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"


def dumps_ascii(value: object) -> str:
    """``json.dumps(value)``."""
    return json.dumps(value)


def dumps_compact(value: object) -> str:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

"""JSON value types, so JSON flows through the code without ``Any``; and the
two encoders the hot paths use.

``dumps_ascii`` is ``json.dumps(value)`` and ``dumps_compact`` is
``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``, character
for character (tests/test_json.py holds them to it with hypothesis, the
library as the oracle). They are the standard library's own C encoder, built
once: ``json.dumps`` builds it again on every call, which was half of the
2.7 µs a tool call's JSON took (docs/performance.md). Without the C
accelerator (an interpreter that has none), or if it takes other arguments
or answers a probe differently from the library, they are
``JSONEncoder.encode``.
Neither checks for cycles: agentik encodes only values it built, which hold none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _encoder
from typing import NoReturn, TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"


def _refuse(value: object) -> NoReturn:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_PROBE = {"a": [1, 2.5, None, True, "é\u2028\ud800"], "b": {"c": -(2**70)}}
"""What the encoders are checked on at import, against ``json.dumps``."""


def _encoder_for(*, ensure_ascii: bool, separators: tuple[str, str]) -> Callable[[object], str]:
    library = json.JSONEncoder(ensure_ascii=ensure_ascii, separators=separators).encode
    make = getattr(_encoder, "c_make_encoder", None)
    if make is None:
        return library
    escape = _encoder.encode_basestring_ascii if ensure_ascii else _encoder.encode_basestring
    item_separator, key_separator = separators
    try:
        # (markers, default, encoder, indent, key_separator, item_separator,
        #  sort_keys, skipkeys, allow_nan): what JSONEncoder.iterencode passes.
        chunks = make(
            None, _refuse, escape, None, key_separator, item_separator, False, False, True
        )
    except TypeError:  # a Python whose private encoder takes other arguments
        return library

    def encode(value: object) -> str:
        return "".join(chunks(value, 0))

    return encode if encode(_PROBE) == library(_PROBE) else library


dumps_ascii = _encoder_for(ensure_ascii=True, separators=(", ", ": "))
"""``json.dumps(value)``."""

dumps_compact = _encoder_for(ensure_ascii=False, separators=(",", ":"))
"""``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``."""

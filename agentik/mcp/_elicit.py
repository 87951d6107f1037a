"""An answer to a form-mode elicitation, checked against its schema. Pure.

SEP-1034: a field the person leaves out takes the schema's ``default``, so
"accept" with no content means "accept the defaults". The filled-in answer
must then match the requested schema (a flat object of strings, numbers,
booleans and enums); one that does not is refused before anything is sent,
so the server never sees content it did not ask for.
"""

from __future__ import annotations

import jsonschema
import jsonschema.exceptions

from agentik._json import JsonObject, JsonValue
from agentik.agent import ElicitationError


def form_answer(schema: JsonObject, content: JsonObject | None) -> JsonObject:
    """``content`` with the schema's defaults for the fields it leaves out, validated.

    Raises:
        ElicitationError: ``invalid``, naming the field and what it must be.
    """
    answer: dict[str, JsonValue] = dict(content or {})
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, field in properties.items():
            if name not in answer and isinstance(field, dict) and "default" in field:
                answer[name] = field["default"]
    try:
        jsonschema.Draft202012Validator(schema).validate(answer)
    except jsonschema.exceptions.ValidationError as error:
        where = ".".join(str(p) for p in error.absolute_path) or "the answer"
        raise ElicitationError(f"{where}: {error.message}", code="invalid") from None
    except jsonschema.exceptions.SchemaError as error:
        raise ElicitationError(
            f"the question's schema is invalid: {error.message}", code="invalid"
        ) from None
    return answer

"""``NamedTool``: a tool the model can call, by name, with JSON arguments."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

import attrs

from agentik._json import JsonObject

ToolHandler: TypeAlias = Callable[[JsonObject], Awaitable[str]]
"""An async callable taking the parsed arguments object and returning the result text."""


@attrs.frozen(eq=False)
class NamedTool:
    """A tool definition: what the model is offered, and what runs when it calls it.

    Compared by identity: two definitions are the same tool only if they are
    the same object.
    """

    name: str
    description: str
    parameters: JsonObject
    """The JSON Schema of the arguments object."""
    handler: ToolHandler = attrs.field(repr=False)
    requires_approval: bool = attrs.field(default=False, kw_only=True)
    """A person must approve each call before it runs (``ChatAgent.decide``)."""
    idempotent: bool = attrs.field(default=False, kw_only=True)
    """Running a call twice does no harm: a call a crash interrupted is run
    again when its turn resumes, instead of being answered ``interrupted``."""
    sequential: bool = attrs.field(
        default=False, kw_only=True, validator=attrs.validators.instance_of(bool)
    )
    """A call must not overlap another call of the same model answer: it
    starts once the calls before it are done, and the calls after it start
    once it is done (the calls of an answer otherwise run at once)."""

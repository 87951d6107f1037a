"""The toolset section of the system prompt: a short catalog, nothing more. Pure.

The text is the plan's, verbatim: a heading, two intro lines, then the ACTIVE
and INACTIVE groups, every row ``name — description`` in both, in the
contributions' order, ``(none)`` for an empty group. Given the toolsets'
costs (``ToolsetIndex.render_section`` always gives them), each row ends with
what the toolset's schemas take, rounded: ``name — description (~3,200
tokens)``, so the model can weigh a toolset before it enables it. Auto-activation is never
mentioned: it is a safety net for the model, not an instruction. With no
contributions there is no section at all (None).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from agentik.toolsets._contribution import ToolsetContribution
from agentik.toolsets._cost import rounded_tokens

HEADER = (
    "## Toolsets\n"
    'Named groups of tools. One set per conversation. Use enable_toolset({"name": X})\n'
    'to add a toolset; disable_toolset({"name": X}) to remove. Both are idempotent.'
)
ACTIVE_HEADING = "ACTIVE"
INACTIVE_HEADING = 'INACTIVE call enable_toolset({"name": X}) to add'
EMPTY_GROUP = "(none)"


def render_toolset_section(
    contributions: Sequence[ToolsetContribution],
    active: Collection[str],
    costs: Mapping[str, int] | None = None,
) -> str | None:
    """The catalog the model sees, or None when there are no toolsets.

    Names in ``active`` that no contribution has are ignored: the catalog only
    lists what exists. ``costs`` (tokens of each toolset's schemas, by name)
    adds `` (~N tokens)`` to every row.
    """
    if not contributions:
        return None
    active_rows: list[str] = []
    inactive_rows: list[str] = []
    for contribution in contributions:
        row = f"{contribution.name} — {contribution.description}"
        if costs is not None:
            row += f" (~{rounded_tokens(costs[contribution.name]):,} tokens)"
        (active_rows if contribution.name in active else inactive_rows).append(row)
    return "\n".join(
        (
            HEADER,
            "",
            ACTIVE_HEADING,
            *(active_rows or (EMPTY_GROUP,)),
            "",
            INACTIVE_HEADING,
            *(inactive_rows or (EMPTY_GROUP,)),
        )
    )

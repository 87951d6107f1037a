"""The ``agentik`` command line: ``serve``, ``chat``, ``conversations``, ``show``, ``demo``."""

from agentik._public import publish as _publish
from agentik.cli._main import main as main

__all__ = ["main"]

_publish(globals(), __all__, __name__)

"""The ``agentik`` command line: ``serve``, ``chat``, ``conversations``, ``show``, ``demo``."""

from agentik.cli._main import main as main

__all__ = ["main"]

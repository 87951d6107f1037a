"""``python -m agentik.cli``: the same as the ``agentik`` command."""

import sys

from agentik.cli import main

sys.exit(main())

"""The Python examples in the docs run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
EXAMPLES = [
    (path.name, i, block)
    for path in sorted(DOCS / name for name in ("agent.md", "observability.md"))
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S))
    if "trio.run(" in block
]


@pytest.mark.parametrize(
    ("doc", "index", "code"), EXAMPLES, ids=[f"{d}-{i}" for d, i, _ in EXAMPLES]
)
def test_example_runs(doc: str, index: int, code: str, tmp_path: Path) -> None:
    """Each complete example (one that calls trio.run) exits 0."""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr

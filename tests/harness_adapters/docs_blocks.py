"""Blocks of ``docs/harnesses.md`` that a test run writes (between ``<!-- NAME: begin -->`` and ``<!-- NAME: end -->``):
the test fails when the file's block is not its run's, and ``ROLLWIRE_WRITE_MATRIX=1`` writes it again."""

from __future__ import annotations

import os
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "harnesses.md"


def check_block(name: str, content: str) -> None:
    """Assert the docs' block ``name`` holds ``content`` (after writing it, under ``ROLLWIRE_WRITE_MATRIX=1``)."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = DOCS.read_text()
    assert begin in text and end in text, f"{DOCS} has no {name} block"
    before, _, rest = text.partition(begin)
    _, _, after = rest.partition(end)
    written = f"{before}{begin}\n{content}\n{end}{after}"
    if os.environ.get("ROLLWIRE_WRITE_MATRIX") == "1":
        DOCS.write_text(written)
        text = written
    assert text == written, f"docs/harnesses.md's {name} is not this run's; this run's:\n{content}"

"""Every segment-break reason the proxy records maps to a bounded metric label (not ``other``): the reasons are
read from the splice planner's and the call recorder's source, so a new or reworded reason fails here until mapped."""

from __future__ import annotations

import re
from pathlib import Path

from rollwire.proxy.metrics import break_kind

PROXY = Path(__file__).resolve().parents[2] / "proxy"


def test_every_recorded_break_reason_has_a_kind() -> None:
    session = (PROXY / "splice" / "plan.py").read_text()
    reasons = re.findall(r'(?:return|reason =) f"([a-z][^"{]*)', session)
    assert len(reasons) >= 6, reasons  # tools, rewritten, shortened, answer, branch, re-render
    record = (PROXY / "call" / "record.py").read_text()
    reasons += re.findall(r'else f"(choice )\{', record)
    kinds = {reason: break_kind(reason) for reason in reasons}
    assert "other" not in kinds.values(), kinds
    assert len(set(kinds.values())) == len(reasons)
    assert break_kind("history rewritten: message 3 differs from call 17's request") == "history_rewritten"
    assert break_kind("something new") == "other"

"""An adapter's own side-call rules reach each of its rollouts (``meta.side_call_rules``), where the proxy
classifies that rollout's calls by them instead of the defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass

import anyio
import pytest

from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.side_calls import SideCallRule, rules_from
from tests.orchestrator.runs import ScriptAdapter, orchestrator_settings, plan, run_with


@dataclass
class RuledAdapter(ScriptAdapter):
    side_call_rules: tuple[SideCallRule, ...] = (SideCallRule("helper", text="^HELPER"),)


@pytest.mark.asyncio
async def test_adapter_rules_are_put_on_its_rollouts(book, tmp_path) -> None:
    settings = orchestrator_settings(concurrency=1, workspace_root=str(tmp_path / "ws"), warm_pool=False)
    adapter = RuledAdapter("print('ok')")
    with anyio.fail_after(60):
        async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
            await run_with(runtime, book, plan("run-rules", tasks=1, group=2), settings, adapter)
    rows = book.rollouts("run-rules")
    assert len(rows) == 2
    assert all(rules_from(row.meta["side_call_rules"]) == adapter.side_call_rules for row in rows)

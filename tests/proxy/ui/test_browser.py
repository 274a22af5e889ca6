"""Real headless Chromium: the runs page of a recorded run -> its rollouts -> one rollout, whose sampled
tokens are marked apart from prompt tokens and whose tool events (one failing) are listed; a screenshot
is saved in the test's tmp dir."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from viewer import DevTools, find_chromium, write_rollout

from rollwire.rollouts import RolloutBook
from rollwire.store import open_engine
from tests.proxy.conftest import OPERATOR_KEY, Proxy
from tests.proxy.ui.conftest import Recorded
from tests.rl.rows import write_rl_run


@pytest.fixture()
def browser() -> Iterator[DevTools]:
    binary = find_chromium()
    if binary is None:
        pytest.skip("needs Debian's chromium package (apt-get install chromium); not on PATH")
    tools = DevTools(binary)
    yield tools
    tools.close()


def _click(browser: DevTools, selector: str) -> str:
    """Wait for a link, click it like a user, and give back where it led."""
    found = json.dumps(selector)
    href = browser.wait_for(f"document.querySelector({found})?.getAttribute('href')")
    browser.call("Runtime.evaluate", expression=f"document.querySelector({found}).click()")
    return str(href)


def test_runs_to_rollout_in_chromium(browser: DevTools, recorded: Recorded, tmp_path: Path) -> None:
    browser.call("Page.navigate", url=f"{recorded.proxy.admin_url}/ui/?key={recorded.key}#/")
    row = f"document.querySelector('a.run-link[href=\"#/run/{recorded.run}\"]')?.closest('tr')"
    chart = browser.wait_for(f"{row}?.querySelectorAll('svg.chart rect').length")
    assert chart == 1  # one policy version, one bar of mean reward
    assert _click(browser, f'a.run-link[href="#/run/{recorded.run}"]') == f"#/run/{recorded.run}"
    assert _click(browser, "a.rollout-link") == f"#/rollout/{recorded.rollout}"
    browser.wait_for("document.getElementById('rw-perf')")
    seen = browser.wait_for("""({
        url: location.href, sampled: document.querySelectorAll('.tokens span.s').length,
        prompt: document.querySelectorAll('.tokens span.p').length,
        sampledColour: getComputedStyle(document.querySelector('.tokens span.s')).backgroundColor,
        promptColour: getComputedStyle(document.querySelector('.tokens span.p')).backgroundColor,
        tools: [...document.querySelectorAll('#timeline tr.tool-event')].map(r => [r.cells[1].textContent,
                r.classList.contains('error')]),
        calls: document.querySelectorAll('#timeline tr.model-call').length,
        breakdown: document.getElementById('reward-breakdown').textContent,
        log: document.getElementById('log-tail').textContent})""")
    trajectory = recorded.proxy.admin.get(f"/admin/v1/rollouts/{recorded.rollout}/trajectory").json()
    masks = [m for s in trajectory["segments"] for m in s["loss_mask"]]
    assert seen["sampled"] == sum(masks) > 0 and seen["prompt"] == len(masks) - sum(masks)
    assert seen["sampledColour"] != seen["promptColour"]
    assert seen["tools"] == [["files.read_file", False], ["shell.run", True]] and seen["calls"] == 2
    assert "tests_pass" in seen["breakdown"] and seen["log"] == "harness: done\n"
    assert "key=" not in seen["url"]  # the key went into the cookie, not the address bar
    path = browser.screenshot(tmp_path / "rollout.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_segment_break_shown(browser: DevTools, start_proxy: Callable[..., Proxy], tmp_path: Path) -> None:
    """A rewritten history: the second segment opens with its break reason, every token is drawn."""
    store_url = f"sqlite:///{tmp_path / 'breaks.db'}"
    rollout = write_rollout(store_url, tokens=600, vocab=200)
    proxy = start_proxy("http://127.0.0.1:9", store_url=store_url)
    browser.call("Page.navigate", url=f"{proxy.admin_url}/ui/?key={OPERATOR_KEY}#/rollout/{rollout}")
    perf = json.loads(browser.wait_for("document.getElementById('rw-perf')?.textContent"))
    seen = browser.wait_for("""({breaks: [...document.querySelectorAll('.segment .break')].map(b => b.textContent),
        drawn: document.querySelectorAll('.tokens span').length})""")
    trajectory = proxy.admin.get(f"/admin/v1/rollouts/{rollout}/trajectory").json()
    assert [s["break_reason"] for s in trajectory["segments"]] == [None, "history rewritten"]
    assert seen["breaks"] == ["segment break: history rewritten"]
    assert seen["drawn"] == perf["tokens"] == sum(len(s["token_ids"]) for s in trajectory["segments"])
    browser.screenshot(tmp_path / "segments.png")


def test_run_page_draws_the_curve_across_versions(
    browser: DevTools, start_proxy: Callable[..., Proxy], tmp_path: Path
) -> None:
    """An RL run's page: train reward by the version each group was drawn at and held-out pass@1 by the version
    evaluated, the numbers `rollwire report` computes (worked out by hand in ``tests/rl/rows.py``)."""
    store_url = f"sqlite:///{tmp_path / 'rl.db'}"
    write_rl_run(RolloutBook(open_engine(store_url)))
    proxy = start_proxy("http://127.0.0.1:9", store_url=store_url)
    browser.call("Page.navigate", url=f"{proxy.admin_url}/ui/?key={OPERATOR_KEY}#/run/rl-a")
    browser.wait_for("document.querySelectorAll('svg.versions circle.point').length")
    seen = browser.wait_for("""({
        train: [...document.querySelectorAll('svg.versions .train circle title')].map(t => t.textContent),
        heldOut: [...document.querySelectorAll('svg.versions .held-out circle title')].map(t => t.textContent),
        lines: document.querySelectorAll('svg.versions polyline').length})""")
    # train: v1 (1, 0) -> 0.5; v2 (1, failed = 0) -> 0.5. held-out pass@1: v1 (0/2, 1/2) -> 0.25; v3 (2/2, 1/2) -> 0.75
    assert seen["train"] == ["train v1: 0.500 (n=2)", "train v2: 0.500 (n=2)"]
    assert seen["heldOut"] == ["held-out v1: 0.250 (n=4)", "held-out v3: 0.750 (n=4)"]
    assert seen["lines"] == 2
    browser.screenshot(tmp_path / "versions.png")

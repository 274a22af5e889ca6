"""Trace viewer load time: a recorded rollout of N tokens opened in headless Chromium, timed by the page.

    python bench/viewer.py [--tokens 1000 10000 50000] [--chromium PATH]

Each size is a synthetic rollout written to a fresh store (10 model calls, one segment break, two tool
events), served by an in-process proxy on loopback and opened at ``/ui/#/rollout/ID`` on its admin listener. The
numbers are the page's own performance marks (ms since navigation): data fetched, first token chunk on screen
("usable": summary, timeline and the first chunk are there and the page takes input), all tokens rendered, and the
longest single rendering task (what a click could wait behind). Needs Debian's ``chromium`` package.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

KEY = "bench-operator-key"
CALLS = 10
USABLE_MS = 1000.0
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
]


def find_chromium(explicit: str | None = None) -> str | None:
    """Debian's chromium (or chromium-browser / google-chrome) on PATH."""
    if explicit:
        return explicit
    return next((p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None)


def chromium(binary: str, url: str, *extra: str, budget_ms: int = 20_000, timeout_s: float = 60) -> str:
    """Run one headless Chromium on ``url`` until its JS settles (virtual time budget); stdout back."""
    # Chromium's helper processes can still write to the profile as it exits: clean up what can be.
    with tempfile.TemporaryDirectory(prefix="rw-chromium-", ignore_cleanup_errors=True) as profile:
        args = [binary, *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *extra, url]
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-1000:]}")
    return done.stdout


def dump_dom(binary: str, url: str, **kw: Any) -> str:
    return chromium(binary, url, "--dump-dom", **kw)


class DevTools:
    """Real-time timing needs a browser without virtual time: one headless Chromium driven over CDP."""

    def __init__(self, binary: str) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="rw-chromium-", ignore_cleanup_errors=True)
        args = [
            binary,
            *FLAGS,
            f"--user-data-dir={self._profile.name}",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
            "about:blank",
        ]
        self._proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            if line.startswith("DevTools listening on "):
                port = line.split("127.0.0.1:")[1].split("/")[0]
                break
        else:
            raise RuntimeError(f"chromium exited {self._proc.wait()} before opening its DevTools port")
        threading.Thread(target=self._proc.stderr.read, daemon=True).start()  # keep the pipe from filling
        import httpx
        import websocket

        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json() if t["type"] == "page"]
        self._ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30)
        self._id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def wait_for(self, expression: str, timeout_s: float = 30) -> Any:
        """Poll inside the page (a promise resolving when ``expression`` is truthy)."""
        script = f"""new Promise((ok, no) => {{ const t0 = Date.now(); const tick = () => {{
            let v = null; try {{ v = ({expression}); }} catch (e) {{ v = null; }} if (v) ok(v); else if (Date.now() - t0 > {timeout_s * 1000}) no("timeout");
            else setTimeout(tick, 20); }}; tick(); }})"""
        answer = self.call("Runtime.evaluate", expression=script, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"page never showed {expression!r}: {answer['exceptionDetails'].get('text')}")
        return answer["result"]["value"]

    def screenshot(self, path: Path) -> Path:
        """The whole page as PNG, not only the viewport."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 8000), "scale": 1}
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        self._ws.close()
        with contextlib.suppress(ProcessLookupError):  # the whole group: Chromium's helpers too
            os.killpg(self._proc.pid, signal.SIGTERM)
        self._proc.wait(timeout=10)
        self._profile.cleanup()


def write_rollout(store_url: str, tokens: int, vocab: int, seed: int = 0) -> str:
    """A finished rollout of about ``tokens`` tokens over CALLS calls, the last three in a second segment."""
    from rollwire.store import (
        ModelCall,
        Rollout,
        RolloutStatus,
        Run,
        ToolEvent,
        encode_floats,
        encode_ids,
        now_ns,
        open_engine,
        session_scope,
    )

    rng = random.Random(seed)
    per = max(2, tokens // (2 * CALLS))
    engine = open_engine(store_url)
    t0 = now_ns()
    with session_scope(engine) as session:
        session.add(Run(id="bench", name="viewer bench"))
    with session_scope(engine) as session:
        session.add(
            Rollout(
                id="ro-bench",
                run_id="bench",
                token_hash="-",
                status=RolloutStatus.FINISHED,
                reward=0.5,
                reward_breakdown={"passed": 0.5},
                exit_code=0,
                log_tail="ok\n",
                finished_seq=1,
            )
        )
    with session_scope(engine) as session:
        so_far: list[int] = []
        for i in range(CALLS):
            if i == CALLS - 3:
                so_far = so_far[: per // 2]
            prompt = so_far + [rng.randrange(vocab) for _ in range(per)]
            sampled = [rng.randrange(vocab) for _ in range(per)]
            session.add(
                ModelCall(
                    rollout_id="ro-bench",
                    prompt_ids=encode_ids(prompt),
                    completion_ids=encode_ids(sampled),
                    completion_logprobs=encode_floats([-rng.expovariate(1.0) for _ in sampled]),
                    segment_index=int(i >= CALLS - 3),
                    segment_break="history rewritten" if i == CALLS - 3 else None,
                    latency_ms=20.0 + i,
                    started_ns=t0 + i * 50_000_000,
                    ended_ns=t0 + i * 50_000_000 + 20_000_000,
                )
            )
            so_far = prompt + sampled
        for k, error in enumerate((None, "exit status 1")):
            session.add(
                ToolEvent(
                    rollout_id="ro-bench",
                    server="shell",
                    tool="run",
                    is_error=error is not None,
                    error=error,
                    latency_ms=5.0,
                    started_ns=t0 + (2 * k + 1) * 25_000_000,
                )
            )
    engine.dispose()
    return "ro-bench"


@contextmanager
def serve(store_url: str, home: Path, model: Path) -> Iterator[str]:
    from rollwire.app.serving import ServerThread
    from rollwire.proxy.app import create_app
    from rollwire.settings import ProxySettings

    settings = ProxySettings(upstream="http://127.0.0.1:9", model=str(model))
    with ServerThread(create_app(settings, store_url, home, operator_key=KEY)) as server:
        yield server.urls["admin"]  # the viewer is on the proxy's admin listener


def measure(browser: DevTools, tokens: int, work: Path, model: Path, vocab: int) -> dict[str, float]:
    """Open the rollout page in a fresh tab state and read the marks it leaves once every token is drawn."""
    work.mkdir(exist_ok=True)
    store_url = f"sqlite:///{work / f'viewer{tokens}.db'}"
    rollout = write_rollout(store_url, tokens, vocab)
    with serve(store_url, work, model) as url:
        browser.call("Page.navigate", url=f"{url}/ui/?key={KEY}#/rollout/{rollout}")
        marks: dict[str, float] = json.loads(browser.wait_for("document.getElementById('rw-perf')?.textContent"))
    return marks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1000, 10_000, 50_000])
    parser.add_argument("--chromium", help="browser binary (default: chromium on PATH)")
    args = parser.parse_args(argv)
    binary = find_chromium(args.chromium)
    if binary is None:
        print("chromium not found: install Debian's chromium package (apt-get install chromium)", file=sys.stderr)
        return 2
    from rollwire.tiny_model import ensure_tiny_model

    with tempfile.TemporaryDirectory(prefix="rw-viewer-bench-") as tmp:
        work = Path(tmp)
        model = ensure_tiny_model(work)
        from transformers import AutoTokenizer

        vocab = len(AutoTokenizer.from_pretrained(model))
        browser = DevTools(binary)
        try:
            measure(browser, min(args.tokens), work / "warm", model, vocab)  # first page load warms the browser
            rows = [(n, measure(browser, n, work, model, vocab)) for n in args.tokens]
        finally:
            browser.close()
    base = rows[0][1]["usable_ms"]
    print(
        f"{'tokens':>7} {'data_ms':>8} {'usable_ms':>10} {'done_ms':>8} {'longest_task_ms':>16} "
        f"{'usable_vs_first':>16} {'usable<1s':>9}"
    )
    for n, m in rows:
        print(
            f"{m['tokens']:>7} {m['data_ms']:>8.1f} {m['usable_ms']:>10.1f} {m['done_ms']:>8.1f} "
            f"{m['longest_chunk_ms']:>16.1f} {m['usable_ms'] / base:>16.2f} "
            f"{'yes' if m['usable_ms'] < USABLE_MS else 'NO':>9}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

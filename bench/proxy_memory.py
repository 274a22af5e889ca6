"""The proxy's memory over many rollouts: RSS after every block of rollouts, each a short tool conversation.

    python bench/proxy_memory.py [--rollouts 10000] [--block 1000] [--turns 2] [--concurrency 16]

Same stub upstream and load generator as ``bench/proxy.py``. A proxy process keeps per-rollout state (the
earlier calls it splices onto, token lookups, budget counts); each is bounded (``cache_rollouts`` and
``cache_tokens`` for the calls, see ``rollwire.proxy.splice.priors``), so RSS grows while the caches fill and then
stays flat however many rollouts pass. Extra arguments after ``--`` go to ``rollwire proxy``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proxy as bench


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--block", type=int, default=1000, help="rollouts between two RSS readings")
    parser.add_argument("--turns", type=int, default=2, help="calls per rollout")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("proxy_args", nargs="*", help="extra `rollwire proxy` arguments (after --)")
    args = parser.parse_args()
    server_cores, load_cores = bench._cores()
    ids = bench.tool_call_ids()
    with tempfile.TemporaryDirectory() as tmp:
        up = bench._port()
        stub = bench.stub_argv(up, ids)
        port, admin_port = bench._port(), bench._port()
        # the extra arguments come last: they win
        argv = [*bench.rollwire_argv(port, up, Path(tmp) / "memory.db", admin_port=admin_port), *args.proxy_args]
        with (
            bench.process(stub, f"http://127.0.0.1:{up}/v1/models", load_cores),
            bench.process(argv, f"http://127.0.0.1:{port}/health", server_cores) as proxy,
        ):
            admin = httpx.Client(base_url=f"http://127.0.0.1:{admin_port}", headers={"Authorization": "Bearer bench"})
            print(f"{'rollouts':>9} {'calls':>7} {'RSS MiB':>8} {'req/s':>7} {'cpu ms/req':>10}", flush=True)
            print(f"{0:>9} {0:>7} {rss_mib(proxy.pid):>8.1f}", flush=True)
            done = 0
            while done < args.rollouts:
                n = min(args.block, args.rollouts - done)
                paths = [f"/{p}/chat/completions" for p in bench.rollouts(admin, n)]
                spec = {"host": "127.0.0.1", "port": port, "kind": "chat", "stream": False, "prompt": []}
                spec |= {"turns": args.turns, "requests": n * args.turns, "concurrency": args.concurrency}
                row = bench.measure({**spec, "paths": paths}, proxy.pid, load_cores)
                done += n
                calls = done * args.turns
                print(
                    f"{done:>9} {calls:>7} {rss_mib(proxy.pid):>8.1f} {row.rate:>7.0f} {row.cpu_ms:>10.3f}", flush=True
                )


if __name__ == "__main__":
    try:
        main()
    except bench.LoadFailed as exc:  # the RSS series stops here; what was printed stands
        raise SystemExit(f"proxy_memory: {exc}") from None

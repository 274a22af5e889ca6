"""Must-show 4: SIGKILL the proxy after N answered calls, restart it on the same store: all N calls are there
and reconstruct into the rollout's trajectory; the session continues exactly after the restart."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from rollwire.app.serving import listening_socket
from rollwire.reconstruct import reconstruct
from rollwire.store import open_engine

N = 4


def _start(
    engine_url: str, db: str, model: Path, listener: socket.socket, admin: socket.socket
) -> tuple[subprocess.Popen[str], str]:
    """A proxy serving on the test's listening sockets (main and admin): the restarted one gets the same ports,
    and no other process can take them between the kill and the restart."""
    port = listener.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "rollwire.app.cli",
        "proxy",
        "--fd",
        str(listener.fileno()),
        "--port",
        str(port),
        "--upstream",
        engine_url,
        "--db",
        db,
        "--model",
        str(model),
        "--admin-fd",
        str(admin.fileno()),
        "--admin-port",
        str(admin.getsockname()[1]),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "ROLLWIRE_PROXY__OPERATOR_KEY": "k"}, pass_fds=[listener.fileno(), admin.fileno()],
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"(http://\S+/r/\S+/v1)", line)
        if found:
            base = found.group(1)
            break
    else:
        raise AssertionError(f"proxy exited before printing a base URL (rc {proc.wait()})")
    # the socket listens before the proxy starts, so the first request just queues
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=60).status_code == 200
    return proc, base


def test_sigkill_loses_no_answered_call(
    engine_url: str, served_model: str, tiny_model_dir: Path, any_store_url: str
) -> None:
    db = any_store_url
    listener, admin = listening_socket("127.0.0.1", 0), listening_socket("127.0.0.1", 0)
    proc, base = _start(engine_url, db, tiny_model_dir, listener, admin)
    messages = [{"role": "user", "content": "count"}]
    try:
        with httpx.Client(base_url=base, timeout=60) as client:
            for i in range(N):
                answer = client.post(
                    "/chat/completions", json={"model": served_model, "messages": messages, "max_tokens": 4, "seed": i}
                )
                assert answer.status_code == 200
                messages = messages + [answer.json()["choices"][0]["message"], {"role": "user", "content": f"more {i}"}]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
    rollout_id = re.search(r"/r/(\S+)/v1", base)
    assert rollout_id
    proc2, _ = _start(engine_url, db, tiny_model_dir, listener, admin)
    try:
        with httpx.Client(base_url=base, timeout=60) as client:  # the old token still works after the restart
            answer = client.post(
                "/chat/completions", json={"model": served_model, "messages": messages, "max_tokens": 4}
            )
            assert answer.status_code == 200
    finally:
        proc2.send_signal(signal.SIGKILL)
        proc2.wait(10)
        if proc2.stdout:
            proc2.stdout.close()
        listener.close()
        admin.close()
    engine = open_engine(db)
    from sqlmodel import Session, select

    from rollwire.proxy.auth import hash_token
    from rollwire.store import ModelCall, Rollout

    with Session(engine) as session:
        rollout = session.exec(select(Rollout).where(Rollout.token_hash == hash_token(rollout_id.group(1)))).one()
        stored = session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout.id)).all()
    assert len(stored) == N + 1 and len({c.started_ns for c in stored}) == N + 1  # none lost, none twice
    trajectory = reconstruct(engine, rollout.id)
    assert sum(len(s.call_ids) for s in trajectory.segments) == N + 1
    assert len(trajectory.segments) == 1  # the restarted proxy spliced onto the calls it read back
    assert trajectory.segments[0].num_sampled > 0

"""``rollwire rl --runtime kubernetes``: the command renders its trainer as a Job beside the rollout pods, against
kmock's API server (a process of its own, reached through a kubeconfig as a cluster is) and a real stack (the
proxy whose published version the command follows). The Job runs ``rollwire train`` under torchrun with the
run's recipe and its target version; a Job that fails for good stops the command with one line; the rerun
replaces the failed Job and carries on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rollwire.orchestrator.runtimes.kubernetes.trainer_job import job_name
from tests.orchestrator.fake_cluster import NAMESPACE
from tests.polling import wait_until
from tests.rl.test_rl_cli import _env, _started

FAKE_CLUSTER = Path(__file__).resolve().parents[1] / "orchestrator" / "fake_cluster.py"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(API URL, kubeconfig) of kmock's API server with the fake kubelet, served by its own process."""
    process = subprocess.Popen([sys.executable, str(FAKE_CLUSTER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, cwd=FAKE_CLUSTER.parents[2])  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("READY "), line
        url = line.split()[1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
            "clusters": [{"name": "kmock", "cluster": {"server": url}}],
            "users": [{"name": "kmock", "user": {"token": "unused"}}],
            "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock", "namespace": NAMESPACE}}],
        }))  # fmt: skip
        yield url, kubeconfig
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_trainer_is_a_job_beside_the_rollout_pods(cluster: tuple[str, Path], tmp_path: Path) -> None:
    url, kubeconfig = cluster
    home = tmp_path / "home"
    env = {**_env(tmp_path), "ROLLWIRE_HOME": str(home), "ROLLWIRE_ORCHESTRATOR__KUBERNETES__KUBECONFIG": str(kubeconfig),
           "ROLLWIRE_ORCHESTRATOR__KUBERNETES__NAMESPACE": NAMESPACE}  # fmt: skip
    ports = [f"--{part}-port=0" for part in ("proxy", "admin", "engine", "env", "gateway")]
    up = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "up", *ports]
    with _started(up, env, tmp_path / "up.log") as stack_process:
        stack_file = home / "stack.json"
        wait_until(stack_file.is_file, "the stack file", timeout_s=300)
        assert stack_process.poll() is None, (tmp_path / "up.log").read_text()[-2000:]
        # the fake kubelet plays a pod by its image: img/hang runs until deleted, so no group ends while the test
        # watches the trainer Job (with the adapter's own image, the fake pods would end at once, unscored)
        argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "rl", "--suite", "tiny",
                "--runtime", "kubernetes", "--stack", str(stack_file), "-K", "3", "-G", "2", "--groups-per-step", "1",
                "--max-lag", "1", "--trainer-gpus", "2", "--trainer-strategy", "fsdp", "--option", "image=img/hang",
                "--run-id", "rl-job", "--out", str(tmp_path / "rl")]  # fmt: skip
        jobs = f"{url}/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job_name('rl-job')}"
        pods = f"{url}/api/v1/namespaces/{NAMESPACE}/pods"

        def job() -> dict[str, object] | None:
            found = httpx.get(jobs, timeout=10)
            return found.json() if found.status_code == 200 else None

        log = tmp_path / "rl.log"
        with _started(argv, env, log) as process:
            created = wait_until(lambda: process.poll() is not None or job(), "the trainer Job", timeout_s=180)
            assert isinstance(created, dict), log.read_text()[-3000:]
            container = created["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
            command = container["command"]
            assert command[:6] == ["torchrun", "--standalone", "--nproc-per-node=2", "-m", "rollwire.app.cli", "train"]
            def flag(name: str) -> str:
                return str(command[command.index(name) + 1])

            assert flag("--run-id") == "rl-job" and flag("--until-version") == "3" and flag("--strategy") == "fsdp"
            assert flag("--groups-per-step") == "1" and flag("--is-correction") == "tis" and "--dynamic-sampling" in command
            assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
            # beside the rollout pods: the sampler runs the run's rollouts in the same namespace meanwhile
            wait_until(lambda: httpx.get(pods, timeout=10).json().get("items"), "the run's rollout pods")
            status = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                      "message": "Job has reached the specified backoff limit"}]}  # fmt: skip
            assert httpx.patch(f"{jobs}/status", json={"status": status}, timeout=10).status_code == 200
            assert process.wait(timeout=120) != 0
        said = log.read_text().strip().splitlines()[-1]
        assert f"the trainer Job {job_name('rl-job')} failed (BackoffLimitExceeded" in said and "resumes it" in said, said
        uid = created["metadata"]["uid"]  # type: ignore[index]
        with _started(argv, env, tmp_path / "rerun.log") as process:
            replaced = wait_until(lambda: process.poll() is not None or (j := job()) and j["metadata"]["uid"] != uid,  # type: ignore[index]
                                  "the failed Job replaced", timeout_s=180)  # fmt: skip
            assert replaced is True, (tmp_path / "rerun.log").read_text()[-3000:]
            wait_until(lambda: "replaced a failed one" in (tmp_path / "rerun.log").read_text(), "the rerun's word")
            os.killpg(process.pid, 15)  # SIGTERM: the command stops cleanly, leaving the Job for the next rerun
            process.wait(timeout=120)
        assert job() is not None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--trainer", "job"], "--trainer job trains elsewhere, against a running stack: name it with --stack FILE"),
        (["--trainer", "job", "--stack", "s.json"], "--trainer job runs the trainer as a Kubernetes Job: it needs --runtime kubernetes"),
        (["--trainer", "external", "--stack", "s.json", "--no-dynamic-sampling"], "--trainer external needs dynamic sampling"),
        (["--runtime", "kubernetes", "--stack", "s.json", "--trainer-gpus", "0"], "--trainer-gpus must be at least 1"),
    ],
)  # fmt: skip
def test_a_trainer_elsewhere_with_what_it_cannot_do_is_one_line(args: list[str], says: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "rollwire.app.cli", "rl", "--suite", "tiny", *args, "--out", str(tmp_path / "rl")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=_env(tmp_path), cwd=tmp_path)
    assert result.returncode != 0 and says in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1

"""The whole loop on a real cluster (kubeconfig present): deploy the rendered stack in a throwaway namespace, run
a small suite end to end with rollout pods (``rollwire rollouts --runtime kubernetes`` as a Job in the cluster),
and check the NetworkPolicy: a pod labelled as a rollout reaches the proxy but not its admin port, the env
servers, the engine or the internet. The namespace is deleted afterwards.

One command for a cluster (images pushed to REGISTRY, or the published ones when unset):

    ROLLWIRE_TEST_IMAGE_REGISTRY=REGISTRY pytest tests/orchestrator/test_real_cluster_stack.py

``ROLLWIRE_TEST_INTERNET_URL`` is the outside address the probe must not reach (default ``http://1.1.1.1``).
The cluster's network plugin must enforce NetworkPolicy; the probe says so when it does not.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.orchestrator.cluster_stack import orchestrator_job, probe_pod, secrets_for, stack
from tests.orchestrator.real_cluster import CLUSTER_MARKS, KUBECONFIG, REGISTRY
from tests.polling import wait_until

pytestmark = CLUSTER_MARKS
INTERNET = os.environ.get("ROLLWIRE_TEST_INTERNET_URL", "http://1.1.1.1")
SUITE, GROUP = "tiny", 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, str]]:
    from kubernetes import client, config, utils

    api = config.new_client_from_config(KUBECONFIG)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    namespace = f"rollwire-e2e-{secrets.token_hex(3)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        for doc in [*secrets_for(namespace), *(d for d in stack(namespace, REGISTRY) if d["kind"] != "Namespace")]:
            utils.create_from_dict(api, doc, namespace=namespace)
        for kind, name in (("deployment", "proxy"), ("deployment", "gateway"), ("deployment", "mcp-envs"),
                           ("deployment", "vllm"), ("statefulset", "postgres")):  # fmt: skip
            read = apps.read_namespaced_deployment_status if kind == "deployment" else apps.read_namespaced_stateful_set_status

            def ready_replicas() -> int:
                status = read(name, namespace).status
                assert status is not None, f"{kind} {name} has no status"
                return status.ready_replicas or 0

            wait_until(lambda: ready_replicas() >= 1, f"{kind} {name} ready",
                       timeout_s=600, every_s=2)  # a cluster pushes nothing to a test
        yield api, namespace
    finally:
        core.delete_namespace(namespace, propagation_policy="Foreground")


def _finished_pod_log(core: Any, namespace: str, selector: str, timeout_s: float) -> tuple[str, str]:
    def done() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return bool(pods) and pods[0].status.phase in ("Succeeded", "Failed")

    wait_until(done, f"pod {selector} to finish", timeout_s=timeout_s, every_s=2)
    pod = core.list_namespaced_pod(namespace, label_selector=selector).items[0]
    return pod.status.phase, core.read_namespaced_pod_log(pod.metadata.name, namespace)


def test_a_suite_runs_end_to_end_with_rollout_pods(cluster) -> None:
    from kubernetes import client, utils

    api, namespace = cluster
    utils.create_from_dict(api, orchestrator_job(namespace, REGISTRY, SUITE, GROUP), namespace=namespace)
    phase, log = _finished_pod_log(client.CoreV1Api(api), namespace, "app.kubernetes.io/name=orchestrator", 900)
    assert phase == "Succeeded", log[-3000:]
    summary = next(line for line in log.splitlines() if line.startswith("run ") and " finished, " in line)
    finished = int(summary.split(": ", 1)[1].split()[0])
    assert finished >= 1, summary  # rollout pods ran the reference agent through the proxy and were scored
    assert "mean reward" in summary


def test_network_policy_refuses_direct_reach(cluster) -> None:
    from kubernetes import client, utils

    api, namespace = cluster
    utils.create_from_dict(api, probe_pod(namespace, INTERNET), namespace=namespace)
    _phase, log = _finished_pod_log(client.CoreV1Api(api), namespace, "rollwire.dev/probe=egress", 300)
    seen = dict(line.split("=", 1) for line in log.split() if "=" in line)
    assert seen.get("proxy") == "reached", f"the probe could not reach the proxy, so it proves nothing: {seen}"
    refused = {key: seen.get(key) for key in ("proxy-admin", "envs", "engine", "internet")}
    assert set(refused.values()) == {"refused"}, f"reached past the NetworkPolicy (is it enforced here?): {seen}"

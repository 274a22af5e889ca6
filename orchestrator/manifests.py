"""Renders the kustomize base in ``k8s/`` with the user's settings (namespace, images), and an example rollout Pod
of any adapter, for ``rollwire k8s render``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rollwire.errors import NotFound
from rollwire.harness_adapters.base import RolloutContext
from rollwire.harness_adapters.images import STACK_IMAGE, in_registry
from rollwire.harness_adapters.registry import get_adapter
from rollwire.mcp_servers.server_config import load_config
from rollwire.orchestrator.mcp_manifests import mcp_objects
from rollwire.orchestrator.runtimes.base import RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.mcp_sidecars import RolloutServers
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import build_pod, build_secret, job_sidecars, run_configmap
from rollwire.settings import KubernetesSettings

DEFAULT_IMAGE = STACK_IMAGE
EXAMPLE_UID = "00000000-0000-0000-0000-000000000000"


def k8s_dir() -> Path:
    """The manifests folder beside the packages (an editable or source checkout)."""
    folder = Path(__file__).resolve().parents[1] / "k8s" / "base"
    if not (folder / "kustomization.yaml").is_file():
        raise NotFound(f"no kustomize base at {folder}")
    return folder


def render(settings: KubernetesSettings, folder: Path | None = None) -> list[dict[str, Any]]:
    """Every object of the base, in kustomization order, with namespace and rollwire image set from settings."""
    base = folder or k8s_dir()
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((base / resource).read_text()):
            if doc:
                docs.append(_apply(doc, settings))
    return docs


def _apply(doc: dict[str, Any], settings: KubernetesSettings) -> dict[str, Any]:
    if doc["kind"] == "Namespace":
        doc["metadata"]["name"] = settings.namespace
    else:
        doc["metadata"]["namespace"] = settings.namespace
    for subject in doc.get("subjects", []):
        subject["namespace"] = settings.namespace
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    for container in pod.get("containers", []):
        if container.get("image") == DEFAULT_IMAGE:
            container["image"] = settings.image
        container["image"] = in_registry(container["image"], settings.image_registry)
    return doc


def trainer_template(settings: KubernetesSettings) -> dict[str, Any]:
    """The stack's trainer Job (``trainer-job.yaml``) with the settings applied: what a run's trainer Job is built
    from (``trainer_job.build_trainer_job``), so both share image, placement, hardening and admin wiring."""
    for doc in render(settings):
        if doc["kind"] == "Job" and doc["metadata"]["name"] == "rollwire-trainer":
            return doc
    raise NotFound("the kustomize base has no trainer Job (rollwire-trainer)")


def example_rollout(harness: str, settings: KubernetesSettings, proxy: str, gateway: str) -> list[dict[str, Any]]:
    """The run ConfigMap, Secret and Pod the Kubernetes runtime would create for one rollout of ``harness``
    (a placeholder token and uid, and, with ``settings.mcp_config``, the file's rollout-scoped servers as sidecars
    with a placeholder key): for review, a security scan, or a dry-run apply."""
    adapter = get_adapter(harness)
    token = "example-token"
    ctx = RolloutContext(
        run_id="example", rollout_id="example-0", task_id="task", prompt="Write cat to answer.txt.", token=token,
        base_url=f"{proxy}/r/{token}/v1", anthropic_base_url=f"{proxy}/r/{token}", mcp_url=f"{gateway}/r/{token}/mcp",
        deadline_s=900.0,
    )  # fmt: skip
    owner = run_configmap(ctx.run_id, settings.namespace)
    owner["metadata"]["uid"] = EXAMPLE_UID
    job = RolloutJob(ctx.run_id, ctx.rollout_id, adapter.launch(ctx), ctx.deadline_s)
    example_secret = {"mcp_sidecar_secret": settings.mcp_sidecar_secret or "example-sidecar-secret"}
    sidecars = job_sidecars(job, settings, RolloutServers.from_settings(settings.model_copy(update=example_secret)))
    return [owner, build_secret(job, settings.namespace, owner, sidecars), build_pod(job, settings, owner, sidecars)]


def render_yaml(settings: KubernetesSettings, mcp_config: str = "") -> str:
    """The stack, plus what the mcpServers file ``mcp_config`` adds (``mcp_manifests``), as one YAML stream."""
    docs = render(settings)
    if mcp_config:
        raw, specs = load_config(mcp_config)
        docs += mcp_objects(specs, raw, settings, docs)
    return yaml.safe_dump_all(docs, sort_keys=False)


__all__ = ["example_rollout", "k8s_dir", "render", "render_yaml", "trainer_template"]

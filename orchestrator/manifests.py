"""Renders the kustomize base in ``k8s/`` with the user's settings (namespace, images), for ``rollwire k8s render``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rollwire.errors import NotFound
from rollwire.settings import KubernetesSettings

DEFAULT_IMAGE = "ghcr.io/rollwire/rollwire:0.1.0"


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
    return doc


def render_yaml(settings: KubernetesSettings) -> str:
    return yaml.safe_dump_all(render(settings), sort_keys=False)


__all__ = ["k8s_dir", "render", "render_yaml"]

"""What every real-cluster suite shares: the kubeconfig it runs against, the marks that skip it (with the reason)
where there is none, and the namespace and registry the environment names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

KUBECONFIG = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))
CLUSTER_MARKS = [
    pytest.mark.needs_cluster,
    pytest.mark.skipif(not Path(KUBECONFIG).is_file(), reason=f"no kubeconfig at {KUBECONFIG}: no cluster to run against"),
]
NAMESPACE = os.environ.get("ROLLWIRE_TEST_NAMESPACE", "default")
REGISTRY = os.environ.get("ROLLWIRE_TEST_IMAGE_REGISTRY", "")
"""Where the images under test were pushed ('' : the published ones)."""

__all__ = ["CLUSTER_MARKS", "KUBECONFIG", "NAMESPACE", "REGISTRY"]

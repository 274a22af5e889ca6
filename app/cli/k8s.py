"""Print the cluster manifests (namespace, RBAC, proxy, gateway, MCP envs, vLLM, Postgres, trainer) with your settings.

Pipe to ``kubectl apply -f -``; settings come from flags or ROLLWIRE_ORCHESTRATOR__KUBERNETES__* env vars.
``--mcp-config FILE`` adds your MCP servers: docs/kubernetes.md, "Deploy your MCP servers".
"""

from __future__ import annotations

import argparse

from rollwire.settings import Settings

HELP = "print the Kubernetes manifests with your settings"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="k8s_command", metavar="ACTION", required=True)
    render = sub.add_parser("render", help="print every manifest as one multi-document YAML stream")
    render.add_argument("--namespace", default=None, help="namespace (default: settings, 'rollwire')")
    render.add_argument("--image", default=None, help="rollwire image for proxy, gateway, MCP envs and trainer")
    render.add_argument(
        "--image-registry", default=None, help="registry replacing ghcr.io/rollwire in every rollwire image (stack, rollouts)"
    )
    render.add_argument(
        "--mcp-config", metavar="FILE", default=None,
        help="an mcpServers file (the one `rollwire up --mcp-config` reads): adds each shared server's Deployment, "
        'Service and NetworkPolicy, the gateway\'s config and, for "scope": "rollout" servers, what lets the '
        "gateway reach them in rollout pods; with --rollout-pod, the pod's sidecars",
    )  # fmt: skip
    render.add_argument(
        "--rollout-pod", metavar="HARNESS", default=None,
        help="print instead the ConfigMap, Secret and Pod of one example rollout of this harness adapter",
    )  # fmt: skip


def run(args: argparse.Namespace, settings: Settings) -> int:
    import yaml

    from rollwire.orchestrator.manifests import example_rollout, render_yaml

    kube = settings.orchestrator.kubernetes
    given = {
        "namespace": args.namespace, "image": args.image, "image_registry": args.image_registry,
        "mcp_config": args.mcp_config,
    }  # fmt: skip
    kube = kube.model_copy(update={key: value for key, value in given.items() if value})
    if args.rollout_pod is None:
        print(render_yaml(kube, kube.mcp_config), end="")
        return 0
    namespace = kube.namespace
    proxy = settings.orchestrator.proxy_url or f"http://proxy.{namespace}:8000"
    gateway = settings.orchestrator.gateway_url or f"http://gateway.{namespace}:8001"
    print(yaml.safe_dump_all(example_rollout(args.rollout_pod, kube, proxy, gateway), sort_keys=False), end="")
    return 0

"""Print the cluster manifests (namespace, RBAC, proxy, gateway, MCP envs, vLLM, Postgres, trainer) with your settings.

Pipe to ``kubectl apply -f -``; settings come from flags or ROLLWIRE_ORCHESTRATOR__KUBERNETES__* env vars.
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


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.orchestrator.manifests import render_yaml

    kube = settings.orchestrator.kubernetes
    updates = {key: value for key, value in {"namespace": args.namespace, "image": args.image}.items() if value}
    print(render_yaml(kube.model_copy(update=updates)), end="")
    return 0

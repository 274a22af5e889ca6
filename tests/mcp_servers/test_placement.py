"""The mcpServers file's cluster keys (``placement``): what each kind of entry becomes on a cluster, every bad entry
one readable line naming the server, and a file written for one machine read as it was."""

from __future__ import annotations

import pytest

from rollwire.errors import InvalidRequest
from rollwire.mcp_servers.placement import (
    DEFAULT_RESOURCES,
    Scope,
    object_name,
    proof,
    sidecar_key,
    sidecar_ports,
)
from rollwire.mcp_servers.server_config import UpstreamSpec, parse_servers

FILE = {
    "mcpServers": {
        "memory": {"command": "mcp-server-memory", "env": {"MEMORY_FILE_PATH": "{rollout_dir}/graph.jsonl"}},
        "time": {"command": "mcp-server-time", "scope": "shared", "replicas": 2, "resources": {"cpu": "100m"}},
        "search": {"url": "http://127.0.0.1:9000/mcp/", "image": "reg.example/search:1.4", "port": 9000},
        "docs": {"url": "https://docs.example.com/mcp"},
        "fs": {"command": "mcp-server-filesystem", "args": ["{rollout_dir}"], "image": "reg.example/runner-plus:2"},
    }
}


def test_each_kind_of_entry_finds_its_home() -> None:
    specs = parse_servers(FILE, "test")
    memory, time, search, docs, fs = (specs[n].cluster for n in ("memory", "time", "search", "docs", "fs"))
    assert (
        memory.scope == Scope.ROLLOUT
        and memory.bridged
        and memory.image == ""
        and memory.resources == DEFAULT_RESOURCES
    )
    assert time.scope == Scope.SHARED and time.bridged and time.replicas == 2
    assert dict(time.resources)["cpu"] == "100m" and dict(time.resources)["memory"] == "256Mi"
    assert (search.scope, search.bridged, search.port, search.path) == (Scope.SHARED, False, 9000, "/mcp/")
    assert docs.scope == Scope.REMOTE
    assert fs.scope == Scope.ROLLOUT and fs.image == "reg.example/runner-plus:2"
    assert sidecar_ports({n: s.cluster for n, s in specs.items()}, 8400) == {"fs": 8400, "memory": 8401}
    # the local runtime reads the same entries as before: the search server is its url, memory a stdio command
    assert specs["search"].url == "http://127.0.0.1:9000/mcp/" and specs["memory"].command == "mcp-server-memory"


def test_a_spec_made_in_code_is_placed_by_its_transport() -> None:
    assert UpstreamSpec("x", command="srv").cluster.scope == Scope.ROLLOUT
    assert UpstreamSpec("y", url="http://h/mcp").cluster.scope == Scope.REMOTE


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"command": "x", "scope": "everyone"}, "'scope' must be 'rollout' or 'shared'"),
        ({"url": "http://h/mcp", "scope": "shared"}, "cluster keys 'scope' do not apply"),
        ({"url": "http://h/mcp", "image": "i:1"}, "needs the 'port' it listens on"),
        ({"url": "http://h/mcp", "image": "i:1", "port": 80, "scope": "rollout"}, "open to the harness"),
        ({"command": "x", "port": 8080}, "'port' is for an image that serves HTTP itself"),
        ({"command": "x", "image": "has space:1"}, "'image' must be an image reference"),
        ({"command": "x", "port": "80"}, "'port' must be a port number"),
        ({"command": "x", "replicas": 3}, "'replicas' is for shared servers"),
        ({"command": "x", "scope": "shared", "replicas": 0}, "'replicas' must be a whole number"),
        ({"command": "x", "resources": {"gpu": "1"}}, "resource 'gpu' is not one of"),
        ({"command": "x", "resources": {"memory": "lots"}}, "resource 'memory' must be a quantity"),
        ({"command": "x", "resources": ["cpu"]}, "'resources' must map"),
        ({"command": "x", "path": "mcp"}, "'path' must start with '/'"),
    ],
)
def test_a_bad_entry_is_one_line_naming_the_server(entry: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_servers({"mcpServers": {"srv": entry}}, "test")
    assert "'srv'" in caught.value.message and says in caught.value.message and "\n" not in caught.value.message


def test_what_only_a_cluster_cannot_give_is_refused_there_only() -> None:
    spec = parse_servers({"web": {"command": "x", "network": True}}, "test")["web"]  # fine on one machine
    with pytest.raises(InvalidRequest, match='"network": true needs "scope": "shared"'):
        spec.cluster.check("web")
    parse_servers({"web": {"command": "x", "network": True, "scope": "shared"}}, "t")["web"].cluster.check("web")


def test_a_server_fetched_at_start_is_refused_on_a_cluster() -> None:
    """``npx -y pkg`` works on one machine; in a pod with no network it would hang at every start."""
    spec = parse_servers({"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}}, "t")
    with pytest.raises(InvalidRequest, match="npx would download the server each time"):
        spec["memory"].cluster.check("memory", spec["memory"].command)
    shared = parse_servers({"f": {"command": "/usr/bin/uvx", "args": ["x"], "scope": "shared", "network": True}}, "t")
    shared["f"].cluster.check("f", "/usr/bin/uvx")  # a shared server with its network may fetch


def test_names_that_collide_on_kubernetes_are_refused() -> None:
    assert object_name("My_Server.v2") == "mcp-server-my-server-v2"
    assert object_name("envs") == "mcp-server-envs"  # never the stack's own mcp-envs (or any other of its names)
    with pytest.raises(InvalidRequest, match="'a.b' and 'a_b' both become 'mcp-a-b'"):
        parse_servers({"a.b": {"command": "x"}, "a_b": {"command": "y"}}, "test")


def test_sidecar_keys_are_per_rollout_and_server_and_need_the_secret() -> None:
    key_a = sidecar_key("s3cret", "rollout", "ro-a", "memory")
    others = {
        sidecar_key("s3cret", "rollout", "ro-b", "memory"), sidecar_key("s3cret", "rollout", "ro-a", "git"),
        sidecar_key("s3cret", "shared", "memory"), sidecar_key("other", "rollout", "ro-a", "memory"),
    }  # fmt: skip
    assert len(key_a) == 64 and sidecar_key("s3cret", "rollout", "ro-a", "memory") == key_a
    assert key_a not in others and len(others) == 4
    assert proof(key_a, "n1") != proof(key_a, "n2") and proof(key_a, "n1") != proof(sidecar_key("x", "y"), "n1")
    with pytest.raises(InvalidRequest, match="sidecar secret"):
        sidecar_key("", "rollout", "ro-a", "memory")

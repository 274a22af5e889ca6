"""A rollout's URLs: model calls at the proxy, MCP at the gateway when it has its own address."""

from rollwire.proxy.admin import rollout_links


def test_mcp_url_points_at_the_gateway_when_configured() -> None:
    links = rollout_links("http://127.0.0.1:8000/", "tok", "http://127.0.0.1:8300")
    assert links == {
        "base_url": "http://127.0.0.1:8000/r/tok/v1",
        "anthropic_base_url": "http://127.0.0.1:8000/r/tok",
        "mcp_url": "http://127.0.0.1:8300/r/tok/mcp",
    }


def test_without_a_gateway_address_everything_is_under_the_proxy() -> None:
    assert rollout_links("http://p:1", "tok")["mcp_url"] == "http://p:1/r/tok/mcp"

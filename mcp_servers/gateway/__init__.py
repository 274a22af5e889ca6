"""The recording MCP gateway: ``/r/{token}/mcp`` aggregates a rollout's MCP servers, enforces limits, records calls."""

"""rollwire.mcp_servers."""

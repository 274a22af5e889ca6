"""rollwire.orchestrator."""

"""rollwire.harness_adapters."""

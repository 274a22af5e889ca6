"""rollwire.engine."""

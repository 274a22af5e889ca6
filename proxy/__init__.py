"""rollwire.proxy."""

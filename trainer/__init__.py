"""rollwire.trainer."""

"""The application layer: the `rollwire` commands, the demo and the local stack, composed from the core and the
components. Nothing below it imports it."""

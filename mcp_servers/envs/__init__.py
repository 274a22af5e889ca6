"""Stateful MCP environment servers (workspace, sqldb, calendar, mail) whose state the checkers read."""

"""Task suites (data files), their loader, and the execution-based checkers that score a rollout's final state."""

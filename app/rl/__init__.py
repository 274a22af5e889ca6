"""Continuous RL (``rollwire rl``): rollouts and training overlapped under bounded staleness."""

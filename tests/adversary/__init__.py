"""Red-team tests: a hostile rollout tries every known way to game the reward or reach the platform."""

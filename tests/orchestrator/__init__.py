"""Orchestrator tests: the scheduler and its local and Kubernetes runtimes, against fakes and real parts."""

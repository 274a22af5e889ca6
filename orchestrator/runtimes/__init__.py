"""Where rollouts run: one Runtime protocol (``base``), one module per variant (``local``, ``kubernetes``)."""

from rollwire.orchestrator.runtimes.base import Ended, EndKind, Handle, RolloutJob, Runtime

__all__ = ["EndKind", "Ended", "Handle", "RolloutJob", "Runtime"]

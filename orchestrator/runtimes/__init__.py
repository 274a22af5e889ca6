"""Where rollouts run: one Runtime protocol (``base``), one subpackage per variant (``local``, ``kubernetes``)."""

from rollwire.orchestrator.runtimes.base import Ended, EndKind, Handle, RolloutJob, Runtime

__all__ = ["EndKind", "Ended", "Handle", "RolloutJob", "Runtime"]

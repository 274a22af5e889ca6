"""How faithful the recorded trajectories are, per harness version and turn (``rollwire audit``)."""

from rollwire.proxy.audit.causes import CAUSES, break_cause
from rollwire.proxy.audit.figures import Audit, CallAudit, audit, rollout_audit
from rollwire.proxy.audit.render import as_html, as_markdown, as_text

__all__ = ["CAUSES", "Audit", "CallAudit", "as_html", "as_markdown", "as_text", "audit", "break_cause", "rollout_audit"]

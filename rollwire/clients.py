"""Which harness made a model call, from the User-Agent it sent: kept on each call (``ModelCall.client``) so an
audit can say how faithful one harness version is (``rollwire.proxy.audit``).

The header comes from inside a rollout, so what is kept is bounded and printable: the policy can write any bytes
there, and they end up in tables, terminals and HTML.
"""

from __future__ import annotations

import re

CLIENT_CHARS = 200
"""The longest User-Agent kept; the product and version lead it."""
UNKNOWN_CLIENT = "unknown"
"""The harness name of a call that sent no User-Agent (or one with no product token)."""

_PRODUCT = re.compile(r"^\s*([A-Za-z][\w.\-]*(?:/[A-Za-z][\w\-]*)?)[/ ]v?(\d[\w.+\-]*)")
"""``name/1.2.3``, and the OpenAI SDKs' two-part ``OpenAI/Python 1.2.3`` / ``Agents/Python 0.3.0``."""


def kept_user_agent(raw: str | None) -> str:
    """``raw`` as stored: printable ASCII only (anything else becomes ``?``), at most ``CLIENT_CHARS`` long."""
    if not raw:
        return ""
    cut = raw[:CLIENT_CHARS]
    return "".join(c if " " <= c <= "~" else "?" for c in cut).strip()


def harness_of(user_agent: str) -> tuple[str, str]:
    """(name, version) of the product a User-Agent leads with: ``codex_cli_rs/0.171.0 (Debian 12)`` ->
    ``("codex_cli_rs", "0.171.0")``; ``OpenAI/Python 1.109.1`` -> ``("OpenAI/Python", "1.109.1")``. A header
    with no product token keeps its first word as the name and an empty version."""
    found = _PRODUCT.match(user_agent)
    if found:
        return found.group(1), found.group(2)
    first = user_agent.split(maxsplit=1)[0] if user_agent.strip() else ""
    return (first or UNKNOWN_CLIENT), ""


__all__ = ["CLIENT_CHARS", "UNKNOWN_CLIENT", "harness_of", "kept_user_agent"]

"""An audit as a terminal table or a self-contained HTML page. Harness names and versions come from User-Agent
headers a rollout sent: escaped in HTML, and printed as stored (printable ASCII, ``rollwire.clients``)."""

from __future__ import annotations

import html

from rollwire.proxy.audit.causes import CAUSES
from rollwire.proxy.audit.figures import Audit, HarnessFigures, TurnFigures

_COLUMNS = ("turn", "calls", "spliced", "prompt tokens", "reused", "prefilled again", "breaks by cause")


def _breaks(figures: TurnFigures) -> str:
    return ", ".join(f"{cause} {figures.causes[cause]}" for cause in CAUSES if figures.causes[cause]) or "-"


def _cells(turn: str, f: TurnFigures) -> list[str]:
    return [turn, str(f.calls), str(f.spliced), str(f.prompt_tokens), str(f.reused), str(f.prefilled_again), _breaks(f)]


def _title(h: HarnessFigures) -> str:
    adapters = f" (adapter {', '.join(sorted(h.adapters))})" if h.adapters else ""
    rollouts = f"{len(h.rollouts)} rollout" + ("s" if len(h.rollouts) != 1 else "")
    calls = f"{h.total.calls} call" + ("s" if h.total.calls != 1 else "")
    return (
        f"{h.harness} {h.version or '(no version)'}{adapters}: {rollouts}, {calls}, splice rate {h.splice_rate():.1%}"
    )


def as_text(audit: Audit) -> str:
    """Per harness version: a title line, then one row per turn and a total row."""
    if not audit.calls:
        return "no complete model call recorded: nothing to audit"
    out: list[str] = []
    for h in audit.harnesses():
        rows = [list(_COLUMNS)] + [_cells(str(t), f) for t, f in sorted(h.turns.items())] + [_cells("all", h.total)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS) - 1)]
        out.append(_title(h))
        for row in rows:
            out.append("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) + "  " + row[-1])
        out.append("")
    unknown = audit.unknown()
    if unknown:
        out.append(f"{len(unknown)} breaks of unknown cause (a defect: report it with these calls):")
        out += [
            f"  rollout {c.rollout_id} call {c.call_id} (turn {c.turn}): {c.reason or 'no reason recorded'}"
            for c in unknown
        ]
    else:
        out.append("no break of unknown cause")
    return "\n".join(out)


MATRIX_COLUMNS = ("harness", "version", "adapter", "rollouts", "calls", "spliced", "splice rate", "breaks by cause")


def as_markdown(audit: Audit) -> str:
    """One Markdown table row per harness version (``docs/harnesses.md``'s matrix is this, from a CI run)."""
    lines = ["| " + " | ".join(MATRIX_COLUMNS) + " |", "|" + "---|" * len(MATRIX_COLUMNS)]
    for h in sorted(audit.harnesses(), key=lambda h: (sorted(h.adapters), h.harness, h.version)):
        cells = [
            h.harness, h.version or "-", ", ".join(sorted(h.adapters)) or "-", str(len(h.rollouts)), str(h.total.calls),
            str(h.total.spliced), f"{h.splice_rate():.0%}", _breaks(h.total),
        ]  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def as_html(audit: Audit, title: str) -> str:
    """The same tables, the causes' meanings, and every break with the proxy's recorded reason."""
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for h in audit.harnesses():
        head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
        rows = [_cells(str(t), f) for t, f in sorted(h.turns.items())] + [_cells("all", h.total)]
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        parts.append(f"<h2>{html.escape(_title(h))}</h2><table><tr>{head}</tr>{body}</table>")
    breaks = "".join(
        f"<tr><td>{html.escape(c.rollout_id)}</td><td>{c.call_id}</td><td>{c.turn}</td><td>{html.escape(c.line)}</td>"
        f"<td>{html.escape(c.cause or '')}</td><td>{html.escape(c.reason or '')}</td></tr>"
        for c in audit.breaks()
    )
    parts.append(
        "<h2>Breaks</h2><table><tr><th>rollout</th><th>call</th><th>turn</th><th>line</th><th>cause</th>"
        f"<th>recorded reason</th></tr>{breaks}</table>"
    )
    meanings = "".join(f"<tr><td>{cause}</td><td>{html.escape(text)}</td></tr>" for cause, text in CAUSES.items())
    parts.append(f"<h2>Causes</h2><table>{meanings}</table>")
    style = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}"
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"
    )


__all__ = ["MATRIX_COLUMNS", "as_html", "as_markdown", "as_text"]

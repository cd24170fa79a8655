"""The report as text: the terminal view (verdict first, then short tables) and the journal line."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TextIO

from suspendguard.guard.report import Report
from suspendguard.model import Holder
from suspendguard.system.log import Logger
from suspendguard.system.terminal import safe

_COLOURS = {"allow": "\033[32m", "veto": "\033[31;1m", "warn": "\033[33m"}
_RESET = "\033[0m"


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Aligned columns; every cell made safe for a terminal (see system/terminal.py)."""
    if not rows:
        return []
    rows = [[safe(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
            for r in rows]


def short_command(holder: Holder) -> str:
    """The command line with the program's folder left out: easier to read in a table."""
    if not holder.cmdline:
        return f"[{holder.comm}]"
    first, *rest = holder.command.split(" ", 1)
    return " ".join([os.path.basename(first), *rest])


def paint(text: str, kind: str, colour: bool) -> str:
    return f"{_COLOURS[kind]}{text}{_RESET}" if colour else text


def render(report: Report, out: TextIO, colour: bool = False) -> None:
    v = report.verdict
    mode = "dry run" if report.dry_run else (report.action or "check")
    head = "ALLOW" if v.kind == "allow" else "VETO"
    if v.kind == "veto" and not report.can_veto:
        head = "VETO (advisory: a sleep hook cannot stop the suspend)"
    # Reasons, notes and commands carry text any user can set: each line is
    # made safe below, and the few painted ones here, before their colour.
    lines = [f"verdict: {paint(head, v.kind, colour)} ({safe(mode)})"]
    lines += [f"  - {safe(r)}" for r in v.reasons]
    lines += [f"  ! {paint(safe(w), 'warn', colour)}" for w in v.warnings]
    painted = len(lines)
    if v.kind == "allow" and not v.reasons and not report.holders:
        lines.append("  no process holds an accelerator node")
    lines.append("")
    nodes = report.inventory.nodes
    if nodes:
        families = ", ".join(report.inventory.families())
        lines.append(f"devices: {len(nodes)} node(s) ({families})")
        lines += table([(n.path, n.role, n.identity) for n in nodes])
    else:
        lines.append("devices: no accelerator nodes found")
    lines.append("")
    if report.holders:
        rows = [("PID", "USER", "ACTION", "SIGINT", "OUTCOME", "NODES", "COMMAND")]
        for hr in report.holders:
            h = hr.decision.holder
            rows.append((str(h.pid), h.user, hr.decision.action, h.sigint,
                         hr.outcome.describe()[:48], ",".join(h.node_paths())[:40] or h.source,
                         short_command(h)[:70]))
        lines.append(f"holders: {len(report.holders)}")
        lines += table(rows)
        for hr in report.holders:
            h = hr.decision.holder
            notes = [f"rule: {hr.decision.rule}", *list(hr.decision.notes)]
            if hr.respawned:
                notes.append(hr.respawned)
            where = ", ".join(w for w in (h.unit, h.container and f"container {h.container}") if w)
            lines.append(f"  pid {h.pid}" + (f" ({where})" if where else "") + ": " + "; ".join(notes))
    else:
        lines.append("holders: none")
    if report.unreadable:
        pids = ", ".join(str(p) for p in report.unreadable_pids[:8])
        more = ", ..." if len(report.unreadable_pids) > 8 else ""
        lines.append(f"  (could not inspect {report.unreadable} process(es): pid {pids}{more}; "
                     "permission denied)")
    if report.idle is not None:
        lines.append("")
        lines.append(f"idle: {report.idle.state}")
        for dev in report.idle.devices:
            readings = ", ".join(f"{k} {v}" for k, v in dev.readings.items() if v is not None)
            lines.append(f"  {dev.id}: {dev.state} ({dev.source})"
                         + (f" {readings}" if readings else ""))
        for b in report.idle.backends:
            if not b.available:
                lines.append(f"  backend {b.name}: unavailable: {b.reason}")
    lines[painted:] = [safe(line) for line in lines[painted:]]
    out.write("\n".join(lines) + "\n")


def log_verdict(report: Report, log: Logger) -> None:
    """The verdict as one journal line: what the operator and the journal wait for."""
    if report.dry_run and log.quiet:
        return  # an interactive dry run: the report itself says it
    what = report.action or ("dry run" if report.dry_run else "check")
    attempt = f"attempt {report.attempt_id} " if report.attempt_id else ""
    would = "would " if report.dry_run else ""
    if report.verdict.kind == "veto":
        tail = "; ".join(report.verdict.reasons)
        if report.can_veto:
            log.error(f"{attempt}({what}): {would}veto: {tail}")
        else:
            log.error(f"{attempt}({what}): would veto, but a sleep hook cannot stop the "
                      f"suspend: {tail}")
    else:
        count = sum(1 for h in report.holders
                    if h.outcome.kind == ("would-signal" if report.dry_run else "exited"))
        done = f"{count} holder(s) would be drained" if report.dry_run else \
            f"{count} holder(s) drained"
        log.info(f"{attempt}({what}): {would}allow: {done}"
                 + (f"; warnings: {'; '.join(report.verdict.warnings)}"
                    if report.verdict.warnings else ""))

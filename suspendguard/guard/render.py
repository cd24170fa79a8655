"""The report as text: the verdict first, then the tables every command shares, and the journal line."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TextIO

from suspendguard.guard.report import Report
from suspendguard.idle.base import IdleReport
from suspendguard.model import Node
from suspendguard.record import Attempt, HolderRecord
from suspendguard.system import journal_ids, journald
from suspendguard.system.log import ERR, INFO, Logger
from suspendguard.system.terminal import safe, table
from suspendguard.verdict import Verdict

_COLOURS = {"allow": "\033[32m", "veto": "\033[31;1m", "unknown": "\033[31;1m",
            "warn": "\033[33m"}
_RESET = "\033[0m"
HEADS = {"allow": "ALLOW", "veto": "VETO", "unknown": "UNKNOWN"}


def short_command(command: str) -> str:
    """A command line (``Holder.command``) with the program's folder left out: easier to
    read in a table. A process with no command line (``[comm]``) is shown as it is."""
    first, *rest = command.split(" ", 1)
    if first.startswith("/"):
        first = os.path.basename(first)
    return " ".join([first, *rest])


def paint(text: str, kind: str, colour: bool) -> str:
    return f"{_COLOURS[kind]}{text}{_RESET}" if colour else text


def verdict_lines(v: Verdict, mode: str, colour: bool, lead: bool = True) -> list[str]:
    """The verdict, its reasons (-) and warnings (!); an unknown leads with why
    (unless ``lead`` is False: a line above already says it)."""
    head = HEADS[v.kind]
    # Reasons and warnings carry names and commands any user can set: each is
    # made safe for the terminal (system/terminal.py) before it is painted.
    lines = []
    mode = safe(mode)
    if v.kind == "unknown" and lead:
        first, *rest = v.texts or ("the guard cannot tell",)
        lines.append(f"{paint('UNKNOWN', 'unknown', colour)}: {safe(first)}")
        lines += [f"  - {safe(r)}" for r in rest]
        lines.append(f"verdict: {paint(head, v.kind, colour)} ({mode}): never read as allow "
                     "(exit status 5)")
    else:
        tail = ": never read as allow (exit status 5)" if v.kind == "unknown" else ""
        lines.append(f"verdict: {paint(head, v.kind, colour)} ({mode}){tail}")
        lines += [f"  - {safe(r)}" for r in v.texts]
    lines += [f"  ! {paint(safe(w), 'warn', colour)}" for w in v.warnings]
    return lines


def device_lines(nodes: Sequence[Node], families: Sequence[str], width: int | None,
                 title: str = "devices") -> list[str]:
    if not nodes:
        return [f"{title}: no accelerator nodes found"]
    rows = [("NODE", "FAMILY", "ROLE", "IDENTITY")]
    rows += [(n.path, n.family, n.role, n.identity) for n in nodes]
    return [f"{title}: {', '.join(families)}, {len(nodes)} node(s)",
            *table(rows, width=width, flex=(0,))]


def holder_lines(holders: Sequence[HolderRecord], width: int | None,
                 title: str = "holders") -> list[str]:
    """One row per holder, then each distinct rule once with its pids, then per-holder notes."""
    if not holders:
        return [f"{title}: none"]
    rows = [("PID", "USER", "ACTION", "SIGINT", "OUTCOME", "COMMAND")]
    for hr in holders:
        h = hr.decision.holder
        rows.append((str(h.pid), h.user, hr.decision.action, h.sigint, hr.outcome.cell(),
                     short_command(h.command)))
    lines = [f"{title}: {len(holders)}", *table(rows, width=width, flex=(5, 4, 1))]
    by_rule: dict[str, list[str]] = {}
    for hr in holders:
        by_rule.setdefault(hr.decision.rule, []).append(str(hr.decision.holder.pid))
    lines.append("  rules:")
    lines += [f"    {safe(rule)}: pid {', '.join(pids)}" for rule, pids in by_rule.items()]
    for hr in holders:
        h = hr.decision.holder
        # The outcome's why whole (a prediction, an escalation): a table's cell cuts it.
        notes = [*hr.decision.notes, *([hr.respawned] if hr.respawned else []),
                 *owner_notes(hr), *([hr.outcome.why] if hr.outcome.why else [])]
        if notes:
            where = ", ".join(w for w in (h.unit, h.container and f"container {h.container}") if w)
            lines.append(safe(f"  pid {h.pid}" + (f" ({where})" if where else "") + ": "
                              + "; ".join(notes)))
    return lines


def owner_notes(hr: HolderRecord) -> list[str]:
    """Who runs the holder, and what its owner will and will not do through the drain."""
    o, pid = hr.owner, hr.decision.holder.pid
    if o.kind == "plain":
        return []
    if o.main_pid and o.main_pid != pid:
        # A launcher (cron, a shell, torchrun) is not the job: the job is signalled, not it.
        notes = [f"started by {o.describe()}, whose main process (pid {o.main_pid}) "
                 "is not signalled"]
    else:
        notes = [f"run by {o.describe()}"]
    if o.transient and o.kind == "user-service":
        notes.append("a transient user unit: it cannot be made again after resume "
                     "([restore] transient)")
    elif o.transient:
        notes.append("a transient unit (systemd-run): made again after resume from its "
                     "recorded settings")
    return notes


def idle_lines(idle: IdleReport, width: int | None, indent: str = "  ") -> list[str]:
    rows = []
    for dev in idle.devices:
        readings = ", ".join(f"{k} {v:g}" for k, v in dev.readings.items()
                             if isinstance(v, (int, float)))
        rows.append((dev.id, dev.state, dev.source, readings or dev.reason))
    lines = table(rows, indent=indent, width=width)
    for b in idle.backends:
        state = "available" if b.available else "unavailable"
        reason = f": {b.reason}" if b.reason else ""
        lines.append(safe(f"{indent}backend {b.name}: {state}{reason}"))
    return lines


def render(report: Report, out: TextIO, colour: bool = False, width: int | None = 80) -> None:
    mode = "dry run" if report.attempt.dry_run else report.attempt.what
    lines = verdict_lines(report.verdict, mode, colour)
    if report.verdict.kind == "allow" and not report.holders:
        lines.append("  no process holds an accelerator node")
    lines.append("")
    lines += device_lines(report.inventory.nodes, report.inventory.families(), width)
    lines.append("")
    lines += holder_lines(report.holders, width)
    note = report.unreadable_note(os.geteuid() == 0)
    if note:
        lines.append(safe(f"  {note}"))
    lines.append("")
    lines.append(f"idle: {report.idle.state}")
    if isinstance(report.idle, IdleReport):
        lines += idle_lines(report.idle, width)
    else:
        lines.append(safe(f"  {report.idle.reason}"))
    out.write("\n".join(lines) + "\n")


def log_verdict(report: Report, log: Logger) -> None:
    """The verdict as one journal line: what the operator and the journal wait for.

    Under systemd a real run also gets one structured entry: a refusal its
    reasons' texts and codes as fields (``SUSPENDGUARD_REASON_DETAILS``, the
    JSON of check's ``reason_details``), for whoever filters the journal by
    code; an allow after a drain the holders drained. Each carries its
    MESSAGE_ID (system/journal_ids.py): ``journalctl -x`` explains it
    through the catalog.
    """
    a = report.attempt
    if a.dry_run and log.quiet:
        return  # an interactive dry run: the report itself says it
    _log_line(report, log)
    if not log.journal or a.dry_run:
        return
    if a.verdict.kind != "allow":
        journald.send(verdict_entry(a))
    elif drained(report.holders):
        journald.send(allow_entry(a, report.holders))


def _common(a: Attempt) -> dict[str, str]:
    return {"SYSLOG_IDENTIFIER": "suspendguard", "SUSPENDGUARD_VERDICT": a.verdict.kind,
            "SUSPENDGUARD_ATTEMPT": str(a.id or ""), "SUSPENDGUARD_ACTION": a.action or ""}


def verdict_entry(a: Attempt) -> dict[str, str]:
    """The structured journal entry of a refused attempt: its MESSAGE the first reason
    (the catalog and the fields say the rest)."""
    codes = ", ".join(dict.fromkeys(r.code for r in a.verdict.reasons))
    attempt = f", attempt {a.id}" if a.id else ""
    first, *rest = a.verdict.texts or ("the guard cannot tell",)
    more = f" (and {len(rest)} more reason{'s' if len(rest) > 1 else ''})" if rest else ""
    return {"MESSAGE": f"{a.what} refused ({a.verdict.kind}{attempt}): {first}{more}",
            "MESSAGE_ID": journal_ids.VETO, "PRIORITY": str(ERR), **_common(a),
            "SUSPENDGUARD_REASON_CODES": codes,
            "SUSPENDGUARD_REASONS": json.dumps(list(a.verdict.texts)),
            "SUSPENDGUARD_REASONS_TEXT": "; ".join(a.verdict.texts),
            "SUSPENDGUARD_REASON_DETAILS": json.dumps([r.to_json() for r in a.verdict.reasons])}


def drained(holders: Sequence[HolderRecord]) -> list[HolderRecord]:
    """The holders a real run drained (asked with SIGINT, and gone)."""
    return [hr for hr in holders if hr.outcome.kind == "exited"]


def allow_entry(a: Attempt, holders: Sequence[HolderRecord]) -> dict[str, str]:
    """The structured journal entry of a suspend allowed once its holders were drained."""
    gone = drained(holders)

    def name(hr: HolderRecord) -> str:
        h = hr.decision.holder
        where = h.unit or (f"container {h.container}" if h.container else "")
        # An escalation is said: that job did not leave on its own signal.
        how = hr.outcome.why if hr.outcome.why.startswith("after escalation") else ""
        return f"pid {h.pid} {h.comm}" + "".join(f" ({w})" for w in (where, how) if w)

    names = ", ".join(name(hr) for hr in gone)
    stopped = ", ".join(s.owner.name for s in a.stops)
    what = a.what
    attempt = f", attempt {a.id}" if a.id else ""
    return {"MESSAGE": f"{what} allowed after draining {len(gone)} holder(s){attempt}: {names}",
            "MESSAGE_ID": journal_ids.ALLOW_AFTER_DRAIN, "PRIORITY": str(INFO), **_common(a),
            "SUSPENDGUARD_DRAINED": str(len(gone)),
            "SUSPENDGUARD_DRAINED_HOLDERS": names,
            "SUSPENDGUARD_STOPPED": stopped or "none",
            "SUSPENDGUARD_WARNINGS": "; ".join(a.verdict.warnings) or "none"}


def _log_line(report: Report, log: Logger) -> None:
    a = report.attempt
    what = a.what
    attempt = f"attempt {a.id} " if a.id else ""
    would = "would " if a.dry_run else ""
    tail = "; ".join(report.verdict.texts)
    # A look (a dry run, the unit's in observe mode) refused nothing: not an error.
    refusal = log.warning if a.dry_run else log.error
    if report.verdict.kind == "unknown":
        refusal(f"{attempt}({what}): unknown, {would}refuse: {tail}" if a.dry_run
                else f"{attempt}({what}): unknown, refused: {tail}")
    elif report.verdict.kind == "veto":
        refusal(f"{attempt}({what}): {would}veto: {tail}")
    else:
        count = sum(1 for h in report.holders
                    if h.outcome.kind == ("would-signal" if a.dry_run else "exited"))
        done = (f"{count} holder(s) would be drained" if a.dry_run else
                f"{count} holder(s) drained")
        log.info(f"{attempt}({what}): {would}allow: {done}"
                 + (f"; warnings: {'; '.join(report.verdict.warnings)}"
                    if report.verdict.warnings else ""))

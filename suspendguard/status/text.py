"""The human rendering of the status report: aligned text, sections in order of importance."""

from __future__ import annotations

import time
from typing import TextIO

from suspendguard.guard.render import paint, table
from suspendguard.idle.base import IdleReport
from suspendguard.model import Unavailable
from suspendguard.status.model import Status
from suspendguard.system.dbus.logind import LogindInfo
from suspendguard.system.terminal import safe


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _seconds_usec(usec: int) -> str:
    return f"{usec / 1_000_000:g} s"


def _verdict_lines(s: Status, colour: bool) -> list[str]:
    report = s.report
    if isinstance(report, Unavailable):
        return [f"verdict: unavailable: {report.reason}"]
    v = report.verdict
    head = "ALLOW" if v.kind == "allow" else "VETO"
    lines = [f"verdict: {paint(head, v.kind, colour)} (what check --dry-run gives now)"]
    lines += [f"  - {safe(r)}" for r in v.reasons]
    lines += [f"  ! {paint(safe(w), 'warn', colour)}" for w in v.warnings]
    return lines


def _accelerator_lines(s: Status) -> list[str]:
    report = s.report
    if isinstance(report, Unavailable):
        return [f"accelerators: unavailable: {report.reason}"]
    nodes = report.inventory.nodes
    if not nodes:
        lines = ["accelerators: no accelerator nodes found"]
    else:
        families = ", ".join(report.inventory.families())
        lines = [f"accelerators: {families}, {len(nodes)} node(s)"]
        lines += table([(n.path, n.family, n.role, n.identity) for n in nodes])
    lines += [f"  note: {n}" for n in report.inventory.notes]
    idle = report.idle
    if idle is not None:
        lines.append(f"  idle check: {idle.state}")
    if isinstance(idle, IdleReport):
        rows = []
        for dev in idle.devices:
            readings = ", ".join(f"{k} {v:g}" for k, v in dev.readings.items()
                                 if isinstance(v, (int, float)))
            rows.append((dev.id, dev.state, dev.source, readings or dev.reason))
        lines += table(rows, indent="    ")
        for b in idle.backends:
            state = "available" if b.available else "unavailable"
            reason = f": {b.reason}" if b.reason else ""
            lines.append(f"    backend {b.name}: {state}{reason}")
    return lines


def _holder_lines(s: Status) -> list[str]:
    report = s.report
    if isinstance(report, Unavailable):
        return []
    lines: list[str] = []
    if report.holders:
        rows = [("PID", "USER", "ACTION", "SIGINT", "WOULD", "COMMAND")]
        for hr in report.holders:
            h = hr.decision.holder
            rows.append((str(h.pid), h.user, hr.decision.action, h.sigint,
                         hr.outcome.describe()[:60], h.command[:60]))
        lines.append(f"holders now: {len(report.holders)}")
        lines += table(rows)
        for hr in report.holders:
            h = hr.decision.holder
            where = ", ".join(x for x in (h.unit, h.container and f"container {h.container}") if x)
            notes = [f"rule: {hr.decision.rule}", *hr.decision.notes]
            lines.append(f"  pid {h.pid}" + (f" ({where})" if where else "") + ": "
                         + "; ".join(notes))
    else:
        lines.append("holders now: none")
    note = s.unreadable_note()
    if note:
        lines.append(f"  {note}")
    return lines


def _installation_lines(s: Status) -> list[str]:
    inst = s.installation
    enabled = inst.enabled
    missing = [i.action for i in inst.instances if not i.enabled]
    lines = [f"installation: {'installed' if inst.installed else 'not installed'}"]
    if inst.unit is not None:
        timeout = inst.unit.timeout_start_s
        lines.append(f"  unit: {inst.unit.path}"
                     + (f" (TimeoutStartSec={timeout})" if timeout is not None else ""))
    else:
        lines.append("  unit: absent")
    lines.append("  enabled for: " + (", ".join(enabled) or "none")
                 + (f"; not for: {', '.join(missing)}" if enabled and missing else ""))
    if inst.hook.present:
        lines.append(f"  hook: {inst.hook.path} "
                     + ("(executable)" if inst.hook.executable else "(NOT executable)"))
    else:
        lines.append(f"  hook: absent ({inst.hook.path})")
    lines.append(f"  config: {s.config.path}: {s.config.describe()}")
    lines.append(f"  state dir: {s.state_dir.path}: {s.state_dir.describe()}")
    if isinstance(inst.manifest, Unavailable):
        lines.append(f"  manifest: {inst.manifest.reason}")
    return lines


def _logind_lines(s: Status, colour: bool) -> list[str]:
    info = s.logind
    if not isinstance(info, LogindInfo):
        reason = info.reason
        return [reason if reason.startswith("logind: ") else f"logind: unavailable: {reason}"]
    lines = [f"logind: CanSuspend {info.can_suspend}, CanHibernate {info.can_hibernate}, "
             f"InhibitDelayMaxUSec {_seconds_usec(info.inhibit_delay_max_usec)}, "
             f"PreparingForSleep {_yes(info.preparing_for_sleep)}"]
    if info.inhibitors:
        rows = [("WHAT", "WHO", "MODE", "UID", "PID", "WHY")]
        rows += [(i.what, i.who, i.mode, str(i.uid), str(i.pid), i.why[:60])
                 for i in info.inhibitors]
        lines.append(f"  inhibitors: {len(info.inhibitors)}")
        lines += table(rows, indent="    ")
    else:
        lines.append("  inhibitors: none")
    for i in s.sleep_blockers():
        lines.append("  ! " + paint(safe(f"{i.describe()} (stops suspends asked for by users)"),
                                    "warn", colour))
    return lines


def _systemd_lines(s: Status) -> list[str]:
    units = s.systemd
    if isinstance(units, Unavailable):
        reason = units.reason
        return [reason if reason.startswith("systemd: ") else f"systemd: unavailable: {reason}"]
    rows = []
    for name, u in units.items():
        if not u.found:
            rows.append((name, u.load_state or "not-found", "", "", ""))
            continue
        last = u.result or "-"
        if u.exec_main_status:
            last += f" (status {u.exec_main_status})"
        rows.append((name, u.load_state, u.unit_file_state or "-",
                     f"{u.active_state}/{u.sub_state}", f"last result {last}"))
    return ["systemd: veto units", *table(rows)]


def _history_lines(s: Status) -> list[str]:
    h = s.history.recent
    if isinstance(h, Unavailable):
        return [f"history: {h.reason}"]
    if not h.attempts:
        return [f"history: no suspend attempts recorded yet ({s.history.path})"]
    counts = ", ".join(f"{k} {v}" for k, v in sorted(h.counts.items()))
    lines = [f"history: {sum(h.counts.values())} attempt(s): {counts}; the last {len(h.attempts)}:"]
    rows = [("ID", "STARTED", "ACTION", "VERDICT", "SECONDS", "DRAINED", "FIRST REASON")]
    for a in h.attempts:
        seconds = f"{a.duration:.1f}" if a.duration is not None else "-"
        drained = sum(1 for x in a.holders if x.outcome == "exited")
        rows.append((str(a.id), _when(a.started), a.action or "check", a.verdict, seconds,
                     f"{drained}/{len(a.holders)}" if a.holders else "-",
                     (a.reasons[0] if a.reasons else "")[:70]))
    lines += table(rows)
    for a in h.attempts:
        if a.holders:
            jobs = ", ".join(f"{x.pid} {x.comm} {x.outcome}" for x in a.holders[:6])
            more = f" (+{len(a.holders) - 6})" if len(a.holders) > 6 else ""
            lines.append(f"  #{a.id} jobs: {jobs}{more}")
        if a.findings:
            rules = sorted({str(f.get("rule")) for f in a.findings})
            lines.append(f"  #{a.id} after resume: {', '.join(rules)}")
    if h.findings:
        lines.append("  findings after resume: "
                     + ", ".join(f"{k} {v}" for k, v in sorted(h.findings.items())))
    return lines


def render(s: Status, out: TextIO, colour: bool = False) -> None:
    # Commands, reasons, inhibitors' "why" and paths carry text any user can
    # set: every line is made safe for the terminal; the painted sections
    # made theirs safe before their colour.
    plain = [_accelerator_lines(s), _holder_lines(s), _installation_lines(s),
             _systemd_lines(s), _history_lines(s)]
    a, h, i, sd, hist = ([safe(line) for line in lines] for lines in plain)
    sections = [_verdict_lines(s, colour), a, h, i, _logind_lines(s, colour), sd, hist]
    if not s.root:
        sections.append(["(not root: processes, files and history this user cannot read are "
                         "missing from this report)"])
    out.write("\n\n".join("\n".join(lines) for lines in sections if lines) + "\n")

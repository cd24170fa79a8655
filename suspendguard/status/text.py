"""The human rendering of the status report: aligned text, sections in order of importance."""

from __future__ import annotations

import shlex
from typing import TextIO

from suspendguard.config import Config
from suspendguard.doctor.finding import to_fix
from suspendguard.guard.render import device_lines, holder_lines, idle_lines, paint, verdict_lines
from suspendguard.idle.base import IdleReport
from suspendguard.model import Unavailable
from suspendguard.record import Stop
from suspendguard.status.model import Status, restore_command
from suspendguard.system.dbus.logind import LogindInfo
from suspendguard.system.terminal import safe, table, when


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


def _seconds_usec(usec: int) -> str:
    return f"{usec / 1_000_000:g} s"


def _verdict_lines(s: Status, colour: bool) -> list[str]:
    """What happens to the next suspend first, then the verdict and its reasons."""
    lead = s.next_suspend()
    kind = "allow" if lead.endswith("would go ahead now") else "veto"
    lines = [paint(safe(lead), kind, colour)]
    v = s.verdict()
    if isinstance(v, Unavailable):
        return [*lines, safe(f"verdict: unavailable: {v.reason}")]
    return [*lines, *verdict_lines(v, "what check --dry-run gives now", colour, lead=False)]


def _accelerator_lines(s: Status, width: int | None) -> list[str]:
    report = s.report
    if isinstance(report, Unavailable):
        return [f"accelerators: unavailable: {report.reason}"]
    lines = device_lines(report.inventory.nodes, report.inventory.families(), width,
                         title="accelerators")
    lines += [f"  note: {n}" for n in report.inventory.notes]
    idle = report.idle
    lines.append(f"  idle check: {idle.state}")
    if isinstance(idle, IdleReport):
        lines += idle_lines(idle, width, indent="    ")
    else:
        lines.append(f"    {idle.reason}")
    return lines


def _holder_lines(s: Status, width: int | None) -> list[str]:
    report = s.report
    if isinstance(report, Unavailable):
        return []
    lines = holder_lines(report.holders, width, title="holders now")
    note = s.unreadable_note()
    if note:
        lines.append(f"  {note}")
    return lines


def _restore_state(p: Stop) -> str:
    if p.result is None:
        return ("pending" if p.issued is not None else
                "pending (the guard ended while it issued the stop)")
    if p.result == "left":
        return "left down: stopped before a reboot"
    if p.result == "starting":
        return "starting when restore ended"
    return f"{p.result}: {p.why}"


def _not_restored_lines(s: Status) -> list[str]:
    """Jobs the guard stopped and has not started again: they stay down until someone does."""
    down = s.not_restored()
    if not down:
        return []
    rows = [("OWNER", "STOPPED", "ATTEMPT", "RESTORE")]
    waiting = s.checking is not None
    rows += [(p.owner.key, when(p.stopped) if p.stopped is not None else "unknown",
              f"#{p.attempt_id}", _restore_state(p)
              + ("; waiting for the check after resume" if waiting and p.result in (None, "held")
                 else "")) for p in down]
    # Owner keys name units: nothing here may be cut.
    lines = [f"stopped by the guard, not started again: {len(down)}", *table(rows)]
    commands = {restore_command(p, s.history.config_path):
                "to see whether it came up" if p.result == "starting" else "to start again"
                for p in down}
    for command, what in commands.items():
        lines.append(f"  {what}: {command}")
    config = s.config.config
    if (any(p.result is None for p in down) and isinstance(config, Config)
            and not config.restore.after_resume):
        lines.append("  ([restore] after_resume = false: restore then only removes the drain "
                     "drop-ins; start each unit with systemctl start UNIT)")
    return lines


def _installation_lines(s: Status) -> list[str]:
    inst = s.installation
    enabled = inst.enabled
    missing = [i.action for i in inst.instances if not i.enabled]
    lines = [f"installation: {'installed' if inst.installed else 'not installed'}"]
    refusal = inst.refusal()
    if refusal:
        lines[0] += f", but every suspend will be refused: {refusal}"
    if inst.unit is not None:
        timeout = inst.unit.timeout_start_s
        lines.append(f"  unit: {inst.unit.path}"
                     + (f" (TimeoutStartSec={timeout})" if timeout is not None else ""))
        py = inst.unit.interpreter
        if py is not None:
            state = {True: "runs the guard", False: py.reason, None: "not checked (staged tree)"}
            lines.append(f"  interpreter: {py.path}: {state[py.usable]}")
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
    lines.append(f"  mode: {s.mode.name}" + (f" ({s.mode.problem})" if s.mode.problem else "")
                 + ("" if s.mode.name in ("enforce", "unknown")
                    else ": suspends are not enforced (suspendguard mode enforce)"))
    if isinstance(inst.manifest, Unavailable):
        lines.append(f"  manifest: {inst.manifest.reason}")
    return lines


def _logind_lines(s: Status, colour: bool, width: int | None) -> list[str]:
    info = s.logind
    if not isinstance(info, LogindInfo):
        reason = info.reason
        return [reason if reason.startswith("logind: ") else f"logind: unavailable: {reason}"]
    lines = [f"logind: CanSuspend {info.can_suspend}, CanHibernate {info.can_hibernate}, "
             f"InhibitDelayMaxUSec {_seconds_usec(info.inhibit_delay_max_usec)}, "
             f"PreparingForSleep {_yes(info.preparing_for_sleep)}"]
    if info.inhibitors:
        rows = [("WHAT", "WHO", "MODE", "UID", "PID", "WHY")]
        rows += [(i.what, i.who, i.mode, str(i.uid), str(i.pid), i.why)
                 for i in info.inhibitors]
        lines.append(f"  inhibitors: {len(info.inhibitors)}")
        lines += table(rows, indent="    ", width=width, flex=(5, 1))
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
    # Unit names and systemd's own state words: nothing here may be cut.
    return ["systemd: veto units", *table(rows)]


def _history_lines(s: Status, width: int | None) -> list[str]:
    h = s.history.recent
    if isinstance(h, Unavailable):
        return [f"history: {h.reason}"]
    damaged = [f"  ! {note}" for note in h.notes]  # so an older attempt is not taken for the last
    if not h.attempts and damaged:
        return [f"history: no attempt could be read ({len(damaged)} damaged):", *damaged]
    if not h.attempts:
        return [f"history: no suspend attempts recorded yet ({s.history.path})"]
    counts = ", ".join(f"{k} {v}" for k, v in sorted(h.counts.items()))
    lines = [f"history: {sum(h.counts.values())} attempt(s): {counts}; the last {len(h.attempts)}:",
             *damaged]
    rows = [("ID", "STARTED", "ACTION", "VERDICT", "SECONDS", "DRAINED", "FIRST REASON")]
    for a in h.attempts:
        seconds = f"{a.duration:.1f}" if a.duration is not None else "-"
        drained = sum(1 for x in a.holders if x.outcome.kind == "exited")
        rows.append((str(a.id), when(a.started), a.what, a.result, seconds,
                     f"{drained}/{len(a.holders)}" if a.holders else "-",
                     a.reasons[0] if a.reasons else ""))
    lines += table(rows, width=width, flex=(6, 2))
    config = s.history.config_path
    lines.append(f"  the last whole: suspendguard"
                 f"{f' --config {shlex.quote(config)}' if config else ''} history {h.attempts[0].id}")
    for a in h.attempts:
        if a.holders:
            jobs = ", ".join(f"{x.holder.pid} {x.holder.comm} {x.outcome.kind}" for x in a.holders[:6])
            more = f" (+{len(a.holders) - 6})" if len(a.holders) > 6 else ""
            lines.append(f"  #{a.id} jobs: {jobs}{more}")
        if a.findings:
            rules = sorted({f.rule for f in a.findings})
            lines.append(f"  #{a.id} after resume: {', '.join(rules)}")
    if h.findings:
        lines.append("  findings after resume: "
                     + ", ".join(f"{k} {v}" for k, v in sorted(h.findings.items())))
    return lines


def _doctor_lines(s: Status) -> list[str]:
    """suspendguard doctor's findings to fix, in one line each."""
    fix = to_fix(s.doctor)
    if not fix:
        return []
    return [f"suspend setup: {len(fix)} to fix (suspendguard doctor says how)",
            *(f"  ! {f.text}" for f in fix)]


def _health_lines(s: Status) -> list[str]:
    """The last health check after resume, when a device was not healthy."""
    rows = s.health()
    if all(r.state == "healthy" for r in rows):
        return []
    lines = [f"device health after the last resume ({when(rows[0].time)}):"]
    lines += [f"  {r.device}: {r.state}" + (f": {r.reason}" if r.reason else "") for r in rows]
    return lines


def render(s: Status, out: TextIO, colour: bool = False, width: int | None = 80) -> None:
    """The report; ``width`` None (``--wide``) cuts no table cell.

    Commands, reasons, inhibitors' "why" and paths carry text any user can
    set: every line of the plain sections is made safe for the terminal
    here (system/terminal.py); the painted ones made theirs safe before
    their colour.
    """
    def plain(lines: list[str]) -> list[str]:
        return [safe(line) for line in lines]

    held = s.held()
    busy = s.busy(when)
    sections = [
        # What the guard is doing now, then jobs kept stopped on an unhealthy
        # device, come before anything else.
        [paint(safe(busy), "unknown", colour)] if busy else [],
        [paint(safe(held), "veto", colour)] if held else [],
        _verdict_lines(s, colour),
        plain(_accelerator_lines(s, width)),
        plain(_holder_lines(s, width)),
        plain(_not_restored_lines(s)),
        plain(_health_lines(s)),
        plain(_installation_lines(s)),
        plain(_doctor_lines(s)),
        _logind_lines(s, colour, width),
        plain(_systemd_lines(s)),
        plain(_history_lines(s, width)),
    ]
    if not s.root:
        sections.append(["(not root: processes, files and history this user cannot read are "
                         "missing from this report)"])
    out.write("\n\n".join("\n".join(lines) for lines in sections if lines) + "\n")

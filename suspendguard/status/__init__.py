"""``suspendguard status``: everything an operator asks before and after a suspend.

Read-only and safe at any time, as root or as a normal user: it runs the
dry-run pipeline (no signal, nothing recorded), reads the installation, asks
logind and systemd over D-Bus, and reads the history. Each part that cannot
be had here (no bus, not root, no state yet, an invalid config) says why and
the report is still made: the exit status is 0 whenever it was.

Three renderings of the same :class:`Status`: aligned text for people,
JSON under stable keys, and Prometheus text exposition for node_exporter's
textfile collector (see :mod:`suspendguard.status.prometheus`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from suspendguard import __version__
from suspendguard.config import Config, defaults, resolve_path
from suspendguard.errors import ConfigError, SuspendGuardError
from suspendguard.guard.pipeline import Report, default_idle_check, run
from suspendguard.guard.report import paint, table
from suspendguard.install.state import installation_state
from suspendguard.install.templates import instance
from suspendguard.model import SLEEP_ACTIONS, Unavailable
from suspendguard.store.history import DB_NAME, Attempt, History, HistoryError
from suspendguard.system.dbus import (
    Inhibitor,
    LogindInfo,
    UnitInfo,
    logind_info,
    sleep_blockers,
    system_bus_address,
    unit_info,
)
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

if TYPE_CHECKING:
    from suspendguard.commands.context import Context
    from suspendguard.guard.pipeline import IdleCheck

# Enough to see a pattern, short enough for a terminal.
HISTORY_ATTEMPTS = 5
DBUS_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ConfigState:
    path: str
    explicit: bool
    valid: bool
    error: str  # the one-line ConfigError, "" when valid
    loaded: bool  # a file was read (False: built-in defaults)

    def describe(self) -> str:
        if not self.valid:
            return f"invalid: {self.error} (status uses the built-in defaults)"
        if not self.loaded:
            return "absent: built-in defaults"
        return "valid"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "valid": self.valid, "error": self.error or None,
                "loaded": self.loaded}


@dataclass(frozen=True)
class StateDir:
    path: str
    exists: bool
    writable: bool  # os.access for this user; nothing is written

    def describe(self) -> str:
        if not self.exists:
            return "absent (created by install or the first recorded attempt)"
        return "writable" if self.writable else "not writable by this user"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "exists": self.exists, "writable": self.writable}


@dataclass(frozen=True)
class HistoryState:
    path: str
    attempts: tuple[Attempt, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    findings: Mapping[str, int] = field(default_factory=dict)
    error: str = ""  # why there is nothing to show ("no history yet ...")

    def to_json(self) -> dict[str, Any]:
        return {
            "available": not self.error,
            "reason": self.error or None,
            "path": self.path,
            "attempts": [a.to_json() for a in self.attempts],
            "counts": dict(self.counts),
            "findings": dict(self.findings),
        }


@dataclass(frozen=True)
class Status:
    generated: float
    euid: int
    config: ConfigState
    report: Report | Unavailable
    installation: Mapping[str, Any]
    state_dir: StateDir
    logind: LogindInfo | Unavailable
    systemd: Mapping[str, UnitInfo] | Unavailable
    history: HistoryState
    duration_s: float
    configured_families: tuple[str, ...] = ()

    @property
    def root(self) -> bool:
        return self.euid == 0

    def sleep_blockers(self) -> tuple[Inhibitor, ...]:
        """Block locks on sleep held by someone else: they stop a user's suspend."""
        return sleep_blockers(self.logind) if isinstance(self.logind, LogindInfo) else ()

    def unreadable_note(self) -> str:
        """"N processes could not be inspected (not root)", or ""."""
        if isinstance(self.report, Unavailable) or not self.report.unreadable:
            return ""
        n = self.report.unreadable
        why = "not root" if not self.root else "permission denied"
        return f"{n} process{'es' if n != 1 else ''} could not be inspected ({why})"

    def to_json(self) -> dict[str, Any]:
        report = self.report
        data: dict[str, Any] = {
            "version": __version__,
            "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.generated)),
            "euid": self.euid,
            "duration_s": round(self.duration_s, 3),
        }
        if isinstance(report, Unavailable):
            data["verdict"] = report.to_json()
            data["accelerators"] = report.to_json()
            data["holders"] = []
            data["scan"] = report.to_json()
        else:
            data["verdict"] = {
                "available": True,
                "verdict": report.verdict.kind,
                "exit_status": report.verdict.exit_status,
                "reasons": list(report.verdict.reasons),
                "warnings": list(report.verdict.warnings),
            }
            data["accelerators"] = {
                "available": True,
                "families": list(report.inventory.families()),
                "configured_families": list(self.configured_families),
                "nodes": [n.to_json() for n in report.inventory.nodes],
                "notes": list(report.inventory.notes),
                "idle": report.idle.to_json() if report.idle is not None else None,
            }
            data["holders"] = [h.to_json() for h in report.holders]
            data["scan"] = {"available": True, "as_root": self.root,
                            "unreadable": report.unreadable,
                            "note": self.unreadable_note() or None}
        installation = dict(self.installation)
        installation["state_dir"] = self.state_dir.to_json()
        data["installation"] = installation
        logind = self.logind.to_json()
        if isinstance(self.logind, LogindInfo):
            logind["sleep_blockers"] = [i.to_json() for i in self.sleep_blockers()]
        data["logind"] = logind
        if isinstance(self.systemd, Mapping):
            data["systemd"] = {"available": True,
                               "units": {name: u.to_json() for name, u in self.systemd.items()}}
        else:
            data["systemd"] = self.systemd.to_json()
        data["history"] = self.history.to_json()
        data["config"] = self.config.to_json()
        return data


# --- collecting ---------------------------------------------------------------


def _load_config(ctx: Context) -> tuple[Config, ConfigState]:
    path, explicit = resolve_path(ctx.config_arg, ctx.environ)
    try:
        config = ctx.config()
    except ConfigError as exc:
        return defaults(), ConfigState(path, explicit, False, str(exc), False)
    return config, ConfigState(config.path or path, explicit, True, "", config.loaded)


def _state_dir(path: str) -> StateDir:
    exists = os.path.isdir(path)
    return StateDir(path, exists, exists and os.access(path, os.W_OK | os.X_OK))


def _history(state_dir: str, n: int) -> HistoryState:
    where = os.path.join(state_dir, DB_NAME)
    try:
        with History.open(state_dir, readonly=True) as h:
            return HistoryState(where, tuple(h.attempts(n, include_dry_run=False)), h.counts(),
                                h.finding_counts())
    except HistoryError as exc:
        return HistoryState(where, error=str(exc))
    except OSError as exc:  # an unreadable state dir is an answer, not a crash
        return HistoryState(where, error=f"cannot read {where}: {exc.strerror or exc}")


def _units(timeout: float, address: str) -> Mapping[str, UnitInfo] | Unavailable:
    return unit_info([instance(a) for a in SLEEP_ACTIONS], timeout, address)


def _pipeline(config: Config, proc: ProcFS | None, idle_check: IdleCheck | None) -> Report | Unavailable:
    try:
        return run(config, dry_run=True, record=False, origin="status", proc=proc,
                   idle_check=idle_check, log=Logger(io.StringIO(), {}, quiet=True))
    except (SuspendGuardError, OSError) as exc:
        return Unavailable(f"the dry run could not be made: {exc}")


def collect(
    ctx: Context,
    *,
    root: str = "/",
    proc: ProcFS | None = None,
    idle_check: IdleCheck | None = default_idle_check,
    dbus_timeout: float = DBUS_TIMEOUT_S,
    history_attempts: int = HISTORY_ATTEMPTS,
) -> Status:
    """Gather every part; D-Bus answers are awaited while the dry run goes on."""
    started = time.time()
    clock = time.monotonic()
    config, config_state = _load_config(ctx)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2,
                                               thread_name_prefix="suspendguard-status") as pool:
        # The bus the caller's environment names (the CLI's, not only this
        # process's: tests and wrappers hand one in).
        bus = system_bus_address(ctx.environ)
        logind_f = pool.submit(logind_info, dbus_timeout, bus)
        units_f = pool.submit(_units, dbus_timeout, bus)
        report = _pipeline(config, proc, idle_check)
        installation = installation_state(root).to_json()
        state_dir = _state_dir(config.state.dir)
        history = _history(config.state.dir, history_attempts)
        logind = logind_f.result()
        units = units_f.result()
    return Status(started, os.geteuid(), config_state, report, installation, state_dir,
                  logind, units, history, time.monotonic() - clock, config.devices.families)


# --- the human rendering --------------------------------------------------------------


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
    lines += [f"  - {r}" for r in v.reasons]
    lines += [f"  ! {paint(w, 'warn', colour)}" for w in v.warnings]
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
    if report.idle is not None:
        data = report.idle.to_json()
        lines.append(f"  idle check: {data.get('state')}")
        rows = []
        for dev in data.get("devices", []):
            readings = ", ".join(f"{k} {v:g}" for k, v in (dev.get("readings") or {}).items()
                                 if isinstance(v, (int, float)))
            rows.append((str(dev.get("id")), str(dev.get("state")), str(dev.get("source")),
                         readings or str(dev.get("reason") or "")))
        lines += table(rows, indent="    ")
        for b in data.get("backends", []):
            state = "available" if b.get("available") else "unavailable"
            reason = f": {b.get('reason')}" if b.get("reason") else ""
            lines.append(f"    backend {b.get('name')}: {state}{reason}")
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
    unit = inst.get("unit") or {}
    hook = inst.get("hook") or {}
    instances: Mapping[str, Any] = inst.get("instances") or {}
    enabled = [a for a in SLEEP_ACTIONS if (instances.get(a) or {}).get("enabled")]
    missing = [a for a in SLEEP_ACTIONS if a not in enabled]
    lines = [f"installation: {'installed' if inst.get('installed') else 'not installed'}"]
    if unit.get("present"):
        timeout = unit.get("timeout_start_s")
        lines.append(f"  unit: {unit.get('path')}"
                     + (f" (TimeoutStartSec={timeout})" if timeout is not None else ""))
    else:
        lines.append("  unit: absent")
    lines.append("  enabled for: " + (", ".join(enabled) or "none")
                 + (f"; not for: {', '.join(missing)}" if enabled and missing else ""))
    if hook.get("present"):
        lines.append(f"  hook: {hook.get('path')} "
                     + ("(executable)" if hook.get("executable") else "(NOT executable)"))
    else:
        lines.append(f"  hook: absent ({hook.get('path')})")
    lines.append(f"  config: {s.config.path}: {s.config.describe()}")
    lines.append(f"  state dir: {s.state_dir.path}: {s.state_dir.describe()}")
    manifest = inst.get("manifest") or {}
    if manifest.get("error"):
        lines.append(f"  manifest: {manifest['error']}")
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
        lines.append("  ! " + paint(f"{i.describe()} (stops suspends asked for by users)",
                                    "warn", colour))
    return lines


def _systemd_lines(s: Status) -> list[str]:
    units = s.systemd
    if not isinstance(units, Mapping):
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
    h = s.history
    if h.error:
        return [f"history: {h.error}"]
    if not h.attempts:
        return [f"history: no suspend attempts recorded yet ({h.path})"]
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
    sections = [
        _verdict_lines(s, colour),
        _accelerator_lines(s),
        _holder_lines(s),
        _installation_lines(s),
        _logind_lines(s, colour),
        _systemd_lines(s),
        _history_lines(s),
    ]
    if not s.root:
        sections.append(["(not root: processes, files and history this user cannot read are "
                         "missing from this report)"])
    out.write("\n\n".join("\n".join(lines) for lines in sections if lines) + "\n")


# --- the command ------------------------------------------------------------------


def command(args: argparse.Namespace, ctx: Context,
            collector: Callable[[Context], Status] | None = None) -> int:
    status = (collector or collect)(ctx)
    if getattr(args, "json", False):
        json.dump(status.to_json(), ctx.out, indent=2)
        ctx.out.write("\n")
    elif getattr(args, "prometheus", False):
        from suspendguard.status.prometheus import exposition

        ctx.out.write(exposition(status))
    else:
        colour = ctx.out.isatty() and "NO_COLOR" not in ctx.environ
        render(status, ctx.out, colour)
    return 0

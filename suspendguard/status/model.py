"""The typed status report: every part an operator asks about, each a value or Unavailable.

Gathered by :mod:`suspendguard.status.collect`, rendered by
:mod:`~suspendguard.status.text` and :mod:`~suspendguard.status.prometheus`
from these records; JSON exists only in the ``to_json`` methods, under
stable keys.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from suspendguard import __version__
from suspendguard.config import Config
from suspendguard.config.load import DENIED
from suspendguard.doctor.finding import Finding, to_fix
from suspendguard.guard.report import Report
from suspendguard.idle.base import INSTALL, IdleReport, family_of
from suspendguard.install.installed import Installation
from suspendguard.model import Unavailable
from suspendguard.record import Attempt, DeviceHealth, Stop, iso
from suspendguard.store.mode import ENFORCE, Mode
from suspendguard.store.progress import Progress
from suspendguard.supervise import usermanager
from suspendguard.system.dbus.logind import Inhibitor, LogindInfo, sleep_blockers
from suspendguard.system.dbus.systemd import UnitInfo
from suspendguard.verdict import Reason, Verdict

# Why such a user cannot tell what the veto unit, which runs as root, will do.
ONLY_ROOT = ("only root can read the config the veto unit runs by: permission denied "
             "(sudo suspendguard status)")


@dataclass(frozen=True, slots=True)
class ConfigStatus:
    """The configuration file status read: where, whether named, and what it held."""

    path: str
    explicit: bool
    config: Config | Unavailable  # Unavailable: the file is invalid, and why (one line)

    @property
    def valid(self) -> bool:
        return isinstance(self.config, Config)

    @property
    def loaded(self) -> bool:
        """A file was read (False: the built-in defaults)."""
        return isinstance(self.config, Config) and self.config.loaded

    @property
    def error(self) -> str:
        """Why the file is invalid, without the path a caller prints next to it; "" if valid."""
        if not isinstance(self.config, Unavailable):
            return ""
        return self.config.reason.removeprefix(f"{self.path}: ")

    def denied(self, root: bool) -> bool:
        """This user may not read the file. Root's own denial (NFS) is the unit's too: invalid."""
        reason = self.config.reason if isinstance(self.config, Unavailable) else ""
        return not root and reason.endswith(f": {DENIED}")  # after the path, shown safe

    def describe(self, root: bool | None = None) -> str:
        """``root``: whether status runs as root (default: whether this process does)."""
        if self.denied(os.geteuid() == 0 if root is None else root):
            return f"not readable by this user: {ONLY_ROOT} (status uses the built-in defaults)"
        if isinstance(self.config, Unavailable):
            return f"invalid: {self.error} (status uses the built-in defaults)"
        if not self.loaded:
            return "absent: built-in defaults"
        return "valid"

    def to_json(self) -> dict[str, Any]:
        error = self.config.reason if isinstance(self.config, Unavailable) else None
        return {"path": self.path, "valid": self.valid, "error": error, "loaded": self.loaded}


@dataclass(frozen=True, slots=True)
class StateDir:
    """The ``[state] dir`` folder (the one thing "state" names): there, and writable?"""

    path: str
    exists: bool
    writable: bool  # os.access for this user; nothing is written
    not_a_folder: bool = False  # something else (a file) is at the path: it cannot be created

    def describe(self) -> str:
        if self.not_a_folder:
            return ("not a directory: no history or mode can be kept there (remove what is "
                    "there, or change [state] dir)")
        if not self.exists:
            return "absent (created by install or the first recorded attempt)"
        return "writable" if self.writable else "not writable by this user"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "exists": self.exists, "writable": self.writable}


@dataclass(frozen=True, slots=True)
class RecentHistory:
    """The last recorded attempts (dry runs left out), the totals, and what is still down."""

    attempts: tuple[Attempt, ...]  # newest first
    counts: Mapping[str, int]  # attempts by verdict
    findings: Mapping[str, int]  # findings after resume by rule
    # Jobs the guard stopped and has not brought back (restore has not run
    # yet, or their start failed), of any attempt, not only the last few;
    # oldest first, in stop order.
    not_restored: tuple[Stop, ...] = ()
    # The last health check after resume, one row per device (none before the first).
    health: tuple[DeviceHealth, ...] = ()
    notes: tuple[str, ...] = ()  # the damaged rows skipped, each named


def restore_command(stop: Stop, config_path: str | None = None) -> str:
    """What brings ``stop`` back: ``suspendguard restore`` while it is pending (``--force``
    while it is held after resume); once restore has tried and failed (or left a stop
    of an earlier boot down), the owner's own start (restore tries once); for one still
    starting, its status."""
    if stop.result in (None, "held"):
        config = f" --config {shlex.quote(config_path)}" if config_path else ""
        return f"suspendguard{config} restore" + (" --force" if stop.result == "held" else "")
    unit = shlex.quote(stop.owner.name)
    if stop.owner.kind in ("docker", "podman"):
        return f"{stop.owner.kind} start {unit}"
    # A start job still running when restore ended: look whether it came up.
    verb = "status" if stop.result == "starting" else "start"
    uid = stop.owner.uid
    if stop.owner.kind == "user-service" and uid is not None:
        return usermanager.systemctl_line(uid, f"{verb} {unit}")
    return f"systemctl {verb} {unit}"


def held_line(stops: tuple[Stop, ...]) -> str | None:
    """"N jobs held after resume: why" for the jobs kept stopped on an unhealthy device."""
    held = [s for s in stops if s.result == "held"]
    if not held:
        return None
    reasons = "; ".join(dict.fromkeys(s.why for s in held))
    return f"{len(held)} jobs held after resume: {reasons}"


@dataclass(frozen=True, slots=True)
class HistoryStatus:
    path: str
    recent: RecentHistory | Unavailable  # Unavailable: no history yet, or unreadable
    config_path: str | None = None  # the config status read, when named explicitly

    def to_json(self) -> dict[str, Any]:
        recent = self.recent
        if isinstance(recent, Unavailable):
            recent = RecentHistory((), {}, {})
        return {
            "available": not isinstance(self.recent, Unavailable),
            "reason": self.recent.reason if isinstance(self.recent, Unavailable) else None,
            "path": self.path,
            "attempts": [a.to_json() for a in recent.attempts],
            "counts": dict(recent.counts),
            "findings": dict(recent.findings),
            "not_restored": [{**p.to_json(), "attempt": p.attempt_id,
                              "restore_command": restore_command(p, self.config_path)}
                             for p in recent.not_restored],
            "held": held_line(recent.not_restored),
            "health": [r.to_json() for r in recent.health],
        }


@dataclass(frozen=True, slots=True)
class Status:
    generated: float
    euid: int
    config: ConfigStatus
    report: Report | Unavailable  # the dry run
    installation: Installation
    state_dir: StateDir
    logind: LogindInfo | Unavailable
    systemd: Mapping[str, UnitInfo] | Unavailable  # the veto unit instances, by name
    history: HistoryStatus
    duration_s: float
    configured_families: tuple[str, ...] = ()
    mode: Mode = ENFORCE
    doctor: tuple[Finding, ...] = ()  # suspendguard doctor's findings on this host
    checking: Progress | None = None  # the check after resume, while it runs

    def draining(self) -> Attempt | None:
        """The real attempt a guard run is draining for now (its row is still open), if any."""
        recent = self.history.recent
        if isinstance(recent, Unavailable) or not recent.attempts:
            return None
        last = recent.attempts[0]
        return last if last.state == "running" and not last.dry_run else None

    def busy(self, when: Callable[[float], str]) -> str | None:
        """What the guard is doing now, which status leads with: the check after resume (and
        who waits for it), or a drain (which attempt, and for how long more at most)."""
        if self.checking is not None:
            return self.checking.describe(when)
        attempt = self.draining()
        if attempt is None:
            return None
        config = self.config.config
        what = (f"attempt {attempt.id} ({attempt.what}) is draining since "
                f"{when(attempt.started)}")
        if not isinstance(config, Config):
            return what
        left = attempt.started + config.drain.deadline_s - self.generated
        return what + (f", for {left:.0f} s more at most ([drain] deadline_s): what follows "
                       "may change as it does" if left > 0 else
                       ", past its [drain] deadline_s: it is giving its verdict")

    @property
    def root(self) -> bool:
        return self.euid == 0

    def not_restored(self) -> tuple[Stop, ...]:
        recent = self.history.recent
        return () if isinstance(recent, Unavailable) else recent.not_restored

    def held(self) -> str | None:
        """"N jobs held after resume: ...": status leads with it."""
        return held_line(self.not_restored())

    def health(self) -> tuple[DeviceHealth, ...]:
        recent = self.history.recent
        return () if isinstance(recent, Unavailable) else recent.health

    def sleep_blockers(self) -> tuple[Inhibitor, ...]:
        """Block locks on sleep held by someone else: they stop a user's suspend."""
        return sleep_blockers(self.logind) if isinstance(self.logind, LogindInfo) else ()

    def unreadable_note(self) -> str:
        """"N processes could not be inspected (not root): pid ...", or ""."""
        if isinstance(self.report, Unavailable):
            return ""
        return self.report.unreadable_note(self.root)

    def refusal(self) -> str | None:
        """Why every suspend will be refused whatever runs now, or None."""
        return self.setup_refusal() or self.no_backend()

    def config_denied(self) -> bool:
        """The config is root's alone: the unit reads it, this user cannot tell what it says."""
        return self.config.denied(self.root)

    def setup_refusal(self) -> str | None:
        """Why the guard cannot run as set up (its config, the unit's interpreter), or None."""
        if not self.config.valid and not self.config_denied():
            return f"the config is invalid: {self.config.error}"
        if isinstance(self.config.config, Config) and self.config.config.trust:
            more = len(self.config.config.trust) - 1
            return (f"the config cannot be trusted: {self.config.config.trust[0]}"
                    + (f" (and {more} more)" if more else ""))
        return self.installation.refusal()

    def refused_now(self) -> str | None:
        """Why the next suspend will be refused whatever runs now, where the veto unit guards
        suspend and its mode refuses. An interpreter the unit cannot run refuses in every
        mode; a config it cannot load, in all but off and observe, which pre-sleep reads in
        the unit's own folder then; a missing backend, in enforce mode alone."""
        refusal = self.refusal()
        if not refusal or "suspend" not in self.installation.enabled:
            return None
        if self.installation.refusal():
            return refusal
        if refusal == self.no_backend():
            return refusal if self.mode.name == "enforce" else None
        return None if self.mode.name in ("off", "observe") else refusal

    def no_backend(self) -> str | None:
        """"no backend can answer for FAMILY (install X)" when [idle] on_unknown = veto makes
        that a veto of every suspend, else None."""
        report, config = self.report, self.config.config
        if (isinstance(report, Unavailable) or not isinstance(report.idle, IdleReport)
                or not isinstance(config, Config) or config.idle.on_unknown != "veto"):
            return None
        for family, _why in report.idle.unknown:
            if not any(b.available for b in report.idle.backends if family_of(b.name) == family):
                hint = INSTALL.get(family, "an idle backend")  # type: ignore[call-overload]
                return f"no backend can answer for {family} (install {hint})"
        return None

    def verdict(self) -> Verdict | Unavailable:
        """What the guard would answer now: the dry run's verdict, unless the guard
        cannot run as configured, or this user may not read its config (then unknown,
        never the defaults' allow). A missing backend is the dry run's own veto."""
        refusal = self.setup_refusal()
        reason = (Reason("setup-refused", refusal) if refusal else
                  Reason("uninspected", ONLY_ROOT) if self.config_denied() else None)
        if isinstance(self.report, Unavailable):
            return Verdict("unknown", (reason,)) if reason else self.report
        v = self.report.verdict
        if reason:
            return Verdict("unknown", (reason,), (*v.texts, *v.warnings))
        return v

    def next_suspend(self) -> str:
        """What will happen to the next suspend, in one line: status leads with it."""
        refusal = self.refusal()
        enabled = self.installation.enabled
        guarded = "suspend" in enabled  # systemctl suspend, the lid's, logind's idle action
        unit = self.installation.unit
        # A package's unit is enabled, never installed beside (install refuses there).
        fix = ("suspendguard install" if unit is None or unit.path.startswith("/etc/") else
               "systemctl enable suspendguard@suspend.service")
        unguarded = ("suspends are not guarded (the veto unit is not enabled"
                     + (f" for suspend, only for {', '.join(enabled)}" if enabled else "")
                     + f": {fix})")
        if refusal and not guarded:
            return f"{unguarded}; once it is, every suspend will be refused: {refusal}"
        if refused := self.refused_now():
            return f"every suspend will be refused: {refused}"
        if self.config_denied():
            # The mode and the state folder are the config's too: nothing more can be told.
            return (f"{unguarded}; what the guard would say is unknown to this user: {ONLY_ROOT}"
                    if not guarded else f"the next suspend: unknown to this user: {ONLY_ROOT}")
        v = self.verdict()
        if isinstance(v, Unavailable):
            return f"the next suspend: unknown: {v.reason}"
        # The guard's mode lets the suspend go: once enforced, this refusal stands.
        enforced = f"; once enforced, every suspend will be refused: {refusal}" if refusal else ""
        if self.mode.name == "off":
            return ("suspends are not guarded: the guard is off (suspendguard mode enforce)"
                    + (enforced or f"; it would say {v.kind} now"))
        if not guarded:
            return f"{unguarded}; the guard would say {v.kind} now"
        if self.mode.name == "unknown":
            return f"the next suspend: unknown: {self.mode.problem}; the dry run says {v.kind} now"
        if self.mode.name == "observe":
            return ("observe mode: the next suspend goes ahead whatever the guard finds "
                    "(suspendguard mode enforce)" + (enforced or f"; it would say {v.kind} now"))
        if v.kind == "unknown":
            return f"the next suspend: unknown now: {v.texts[0] if v.texts else ''}"
        if v.kind == "veto":
            return f"the next suspend would be refused now: {v.texts[0] if v.texts else ''}"
        return "the next suspend would go ahead now"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": __version__,
            "generated": iso(self.generated),
            "checking_after_resume": self.checking.to_json() if self.checking else None,
            "draining_attempt": a.id if (a := self.draining()) is not None else None,
            "euid": self.euid,
            "duration_s": round(self.duration_s, 3),
        }
        data.update(self._report_json())
        data["installation"] = {**self.installation.to_json(),
                                "state_dir": self.state_dir.to_json()}
        logind = self.logind.to_json()
        if isinstance(self.logind, LogindInfo):
            logind["sleep_blockers"] = [i.to_json() for i in self.sleep_blockers()]
        data["logind"] = logind
        if isinstance(self.systemd, Unavailable):
            data["systemd"] = self.systemd.to_json()
        else:
            data["systemd"] = {"available": True,
                               "units": {name: u.to_json() for name, u in self.systemd.items()}}
        data["history"] = self.history.to_json()
        data["doctor"] = {"to_fix": len(to_fix(self.doctor)),
                          "findings": [f.to_json() for f in self.doctor]}
        data["config"] = self.config.to_json()
        data["mode"] = {"mode": self.mode.name, "problem": self.mode.problem}
        return data

    def _report_json(self) -> dict[str, Any]:
        """The dry run's parts: verdict, accelerators, holders, scan."""
        report = self.report
        verdict = self.verdict()
        verdict_json: dict[str, Any] = (
            verdict.to_json() if isinstance(verdict, Unavailable)
            else {"available": True, "verdict": verdict.kind, "exit_status": verdict.exit_status,
                  "reasons": list(verdict.texts),
                  "reason_details": [r.to_json() for r in verdict.reasons],
                  "warnings": list(verdict.warnings)})
        verdict_json["next_suspend"] = self.next_suspend()
        if isinstance(report, Unavailable):
            return {"verdict": verdict_json, "accelerators": report.to_json(),
                    "holders": [], "scan": report.to_json()}
        return {
            "verdict": verdict_json,
            "accelerators": {
                "available": True,
                "families": list(report.inventory.families()),
                "configured_families": list(self.configured_families),
                "nodes": [n.to_json() for n in report.inventory.nodes],
                "notes": list(report.inventory.notes),
                "idle": report.idle.to_json(),
            },
            "holders": [h.to_json() for h in report.holders],
            "scan": {"available": True, "as_root": self.root, "unreadable": report.unreadable,
                     "note": self.unreadable_note() or None},
        }

"""The preflight's checks: each reads the host (host.py) and gives findings, each with its fix.

The failures are those users meet on their first suspend, as reported in
public threads: preserved video memory without NVIDIA's suspend units
("nv_pmops_suspend returns -5"), its save file on a filesystem too small
for the VRAM in use, a hibernation with too little swap or no resume
device, units ordered before sleep.target that keep systemd's default
dependencies, the guard's own units missing or given too little time,
logind drop-ins that disagree, and the systemd versions that change what
a sleep hook can do.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from suspendguard.config import DEFAULT_STATE_DIR, Config
from suspendguard.doctor.host import Host, setting, timespan_s
from suspendguard.health.resume import plan as resume_plan
from suspendguard.idle.base import QueryFailed
from suspendguard.idle.nvml import NvmlBackend
from suspendguard.install import templates
from suspendguard.install.interpreter import Interpreter, probe, program
from suspendguard.model import SLEEP_ACTIONS, Unavailable
from suspendguard.system.deadline import RESTORE_AFTER_RESUME_S

Severity = Literal["error", "warning", "note"]
NVIDIA_UNITS = ("nvidia-suspend.service", "nvidia-resume.service", "nvidia-hibernate.service")
# NVIDIA's default for NVreg_TemporaryFilePath when none is set.
NVIDIA_TMP = "/tmp"
# The daemons an Ascend driver runs that the guard relies on: npu-smi asks
# dmp_daemon, and the device logs read after resume are slogd's.
ASCEND_DAEMONS = ("dmp_daemon", "slogd")
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    severity: Severity  # error: a suspend will fail or go unguarded; note: to know, nothing to fix
    text: str
    fix: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "text": self.text, "fix": self.fix}


def health_budget_s(config: Config) -> int:
    """What the resume unit needs at most: the check after resume and its repairs, as the
    check itself plans them (health/resume.py), then the restarts' own budget."""
    checking = resume_plan(config)[1] if config.resume.health_check else 0.0
    return math.ceil(checking + RESTORE_AFTER_RESUME_S)


def _timeout_start(host: Host, path: str, names: Sequence[str]
                   ) -> tuple[float | None, Finding | None]:
    """The unit's TimeoutStartSec in seconds (None: not set, or infinity), or a note why not."""
    value = host.unit_setting(path, ("TimeoutSec", "TimeoutStartSec"), names)
    if not value:
        return None, None
    seconds = timespan_s(value)
    if isinstance(seconds, Unavailable):
        return None, Finding(
            "timeout-unreadable", "note",
            f"cannot read TimeoutStartSec={value} of {names[-1]}: {seconds.reason}",
            "install systemd's systemd-analyze, or check the timeout by hand")
    return seconds, None


def nvidia_preserve(host: Host, vram_mb: float | None) -> list[Finding]:
    preserve, where = host.nvidia_param("PreserveVideoMemoryAllocations")
    enabled = [u for u in NVIDIA_UNITS if host.enabled(u)]
    out = []
    if preserve == "1":
        missing = [u for u in NVIDIA_UNITS if u not in enabled]
        if missing:
            out.append(Finding(
                "nvidia-preserve-without-units", "error",
                f"NVreg_PreserveVideoMemoryAllocations=1 ({where}) but {', '.join(missing)} "
                "not enabled: the driver refuses the sleep (nv_pmops_suspend returns -5)",
                f"systemctl enable {' '.join(NVIDIA_UNITS)}"))
        out += _nvidia_tempfile(host, vram_mb)
    elif enabled:
        out.append(Finding(
            "nvidia-units-without-preserve", "warning",
            f"{', '.join(enabled)} enabled but NVreg_PreserveVideoMemoryAllocations is "
            f"{preserve or 'not set'}{f' ({where})' if where else ''}: the units save video "
            "memory only with it, so CUDA contexts lose theirs across the sleep",
            "add 'options nvidia NVreg_PreserveVideoMemoryAllocations=1' to "
            "/etc/modprobe.d/nvidia-power.conf, rebuild the initramfs and reboot; or disable "
            "the units"))
    return out


def _nvidia_tempfile(host: Host, vram_mb: float | None) -> list[Finding]:
    path = host.nvidia_param("TemporaryFilePath")[0] or NVIDIA_TMP
    free = host.free_bytes(path)
    if vram_mb is None or free is None:
        return []
    if free < vram_mb * MIB:
        return [Finding(
            "nvidia-tempfile-too-small", "error",
            f"NVreg_TemporaryFilePath {path} has {free / MIB:.0f} MiB free, less than the "
            f"{vram_mb:.0f} MiB of video memory in use that the driver saves there",
            "point 'options nvidia NVreg_TemporaryFilePath=' at a disk-backed folder with room "
            "for the VRAM in use (not a tmpfs /tmp), e.g. /var/tmp")]
    return []


def hibernation(host: Host, vram_mb: float | None) -> list[Finding]:
    if "disk" not in (host.read("sys/power/state") or "").split():
        return []
    out = []
    mem = host.meminfo()
    if "MemTotal" in mem and "MemAvailable" in mem:
        preserved = ((vram_mb or 0.0) * 1024
                     if host.nvidia_param("PreserveVideoMemoryAllocations")[0] == "1" else 0.0)
        need_kib = mem["MemTotal"] - mem["MemAvailable"] + preserved
        swap_kib = mem.get("SwapTotal", 0)
        if swap_kib < need_kib:
            out.append(Finding(
                "hibernate-swap-too-small", "warning",
                f"swap is {swap_kib // 1024} MiB, less than the {need_kib / 1024:.0f} MiB of "
                "memory in use" + (" and preserved video memory" if preserved else "")
                + ": a hibernation would fail",
                "add swap at least as large as the memory in use (plus the VRAM in use when "
                "video memory is preserved)"))
    resume = (host.read("sys/power/resume") or "").strip()
    cmdline = host.read("proc/cmdline") or ""
    if resume in ("", "0:0") and "resume=" not in cmdline:
        out.append(Finding(
            "hibernate-no-resume-device", "warning",
            "no resume device (/sys/power/resume is 0:0, no resume= on the kernel command "
            "line): a hibernated system would boot afresh and lose what ran",
            "add resume=UUID=<swap's UUID> to the kernel command line (or let systemd's "
            "HibernateLocation pick it), then rebuild the initramfs"))
    return out


def units_before_sleep(host: Host) -> list[Finding]:
    out = []
    for name, text in sorted(host.unit_files().items()):
        before = " ".join(v for k, v in (line.strip().partition("=")[::2]
                                         for line in text.splitlines()) if k.strip() == "Before")
        if "sleep.target" not in before.split():
            continue
        if (setting(text, "DefaultDependencies") or "yes").lower() in ("no", "false", "0"):
            continue
        out.append(Finding(
            "unit-before-sleep-default-deps", "warning",
            f"{name} is ordered Before=sleep.target with systemd's default dependencies: "
            "ordered after basic.target and stopped at shutdown, it may not run before a sleep",
            f"add DefaultDependencies=no to the [Unit] section of {name} (systemctl edit {name})"))
    return out


def _unit_path(host: Host, name: str) -> str | None:
    """Where systemd loads ``name`` from: install's /etc, else a package's /usr/lib or /lib."""
    return next((f"{d}/{name}" for d in templates.UNIT_DIRS
                 if host.read(f"{d}/{name}") is not None), None)


def _enabled(host: Host, action: str) -> bool:
    """The instance's enable link, made by install under /etc or shipped by a package."""
    link = f"{templates.required_by(action)[0]}.requires/{templates.instance(action)}"
    return any(host.exists(f"{d}/{link}") for d in templates.UNIT_DIRS)


def _timeout_fix(unit_path: str, need: int) -> str:
    if unit_path == templates.UNIT_PATH:
        return ("suspendguard install (it writes the timeout from the configuration), and "
                f"no drop-in of {templates.UNIT_TEMPLATE} that sets a shorter one")
    # A package's unit: an install beside it would outlive the package (its /etc unit and
    # links then require a guard that is gone) and overwrite the package's hook.
    return (f"systemctl edit {templates.UNIT_TEMPLATE}: [Service] TimeoutStartSec={need} "
            "(a drop-in: the package's unit stays as shipped)")


def guard_units(host: Host, config: Config) -> list[Finding]:
    unit_path = _unit_path(host, templates.UNIT_TEMPLATE)
    if unit_path is None:
        return [Finding("guard-not-installed", "error",
                        f"the guard's unit {templates.UNIT_PATH} is not installed: no suspend "
                        "is guarded", "suspendguard install")]
    out = []
    packaged = unit_path != templates.UNIT_PATH  # install refuses beside a package's unit
    for action in SLEEP_ACTIONS:
        if not _enabled(host, action):
            out.append(Finding(
                "guard-unit-missing", "error",
                f"{templates.instance(action)} is not enabled: {action} is not guarded",
                f"systemctl enable {templates.instance(action)}" if packaged else
                "suspendguard install (it enables one instance per sleep kind)"))
    need = templates.timeout_start_s(config)
    for action in SLEEP_ACTIONS:
        have, unreadable = _timeout_start(host, unit_path,
                                          (templates.instance(action), templates.UNIT_TEMPLATE))
        if unreadable is not None and unreadable not in out:  # one note for the three
            out.append(unreadable)
        if have is not None and have < need:
            out.append(Finding(
                "guard-timeout-short", "error",
                f"{templates.instance(action)} has TimeoutStartSec={have:g} s, less than "
                f"[drain] deadline_s plus {templates.TIMEOUT_MARGIN_S} s ({need} s): systemd "
                "would kill the guard before it answers, and the suspend fails",
                _timeout_fix(unit_path, need)))
            break
    resume = _unit_path(host, templates.RESUME_UNIT)
    budget = health_budget_s(config)
    have, unreadable = (None, None) if resume is None else _timeout_start(
        host, resume, (templates.RESUME_UNIT,))
    out += [unreadable] if unreadable is not None else []
    if resume is None:
        out.append(Finding("resume-unit-missing", "warning",
                           f"{templates.RESUME_UNIT} is not installed: nothing checks the "
                           "devices or starts the drained jobs again after resume",
                           "reinstall the package" if packaged else "suspendguard install"))
    elif have is not None and have < budget:
        out.append(Finding(
            "resume-timeout-short", "warning",
            f"{templates.RESUME_UNIT} has TimeoutStartSec={have:g} s, less than the health "
            f"check and the restarts may take ({budget} s: [resume] ready_timeout_s and "
            f"health_timeout_s, then {RESTORE_AFTER_RESUME_S:g} s of starts): systemd could "
            "kill it before the jobs are started again, with none of them held",
            f"systemctl edit {templates.RESUME_UNIT}: TimeoutStartSec={budget + 60}"))
    return out


def watch_timeouts(host: Host, config: Config) -> list[Finding]:
    """The watch unit's start and watchdog, each the longest a look may take: a package's
    unit is built for the default [drain] deadline_s, and install writes it only when run."""
    path = _unit_path(host, templates.WATCH_UNIT)
    if path is None:
        return []
    need = templates.timeout_start_s(config)
    out = []
    for key in ("TimeoutStartSec", "WatchdogSec"):
        value = host.unit_setting(path, key, (templates.WATCH_UNIT,))
        have = timespan_s(value) if value else None
        if isinstance(have, float) and have < need:
            out.append(Finding(
                "watch-timeout-short", "warning",
                f"{templates.WATCH_UNIT} has {key}={have:g} s, less than [drain] deadline_s "
                f"plus {templates.TIMEOUT_MARGIN_S} s ({need} s), the longest a look may take: "
                "systemd could kill the watch in a slow look, and its sleep block with it",
                "suspendguard install --watch (it writes both from the configuration)"
                if path == templates.WATCH_PATH else
                f"systemctl edit {templates.WATCH_UNIT}: [Service] {key}={need}"))
    return out


def state_dir_in_units(host: Host, config: Config) -> list[Finding]:
    """The units' sandbox (ProtectSystem=strict) leaves writable only their StateDirectory=
    and ReadWritePaths=: install writes a [state] dir of another place into its units, but
    a package's are built with the default. There the veto unit records nothing and
    refuses every suspend of a supervised job (no stop can be written ahead)."""
    state = os.path.normpath(config.state.dir)
    if state == DEFAULT_STATE_DIR:
        return []
    out = []
    for unit, names in ((templates.UNIT_TEMPLATE, [(templates.instance(a), templates.UNIT_TEMPLATE)
                                                   for a in SLEEP_ACTIONS]),
                        (templates.RESUME_UNIT, [(templates.RESUME_UNIT,)]),
                        (templates.WATCH_UNIT, [(templates.WATCH_UNIT,)])):
        path = _unit_path(host, unit)
        if path is None or not any(_writes_not(host, path, n, state) for n in names):
            continue
        out.append(Finding(
            "state-dir-read-only", "error",
            f"{unit} cannot write [state] dir {state} (ProtectSystem=strict, and it is not "
            "among its ReadWritePaths=): its runs record nothing there"
            + (", and every suspend of a supervised job is refused"
               if unit == templates.UNIT_TEMPLATE else ""),
            "suspendguard install (it writes [state] dir into its units)"
            if path == f"{templates.UNIT_DIR}/{unit}" else
            f"systemctl edit {unit}: [Service] ReadWritePaths=-{state}"))
    return out


def _writes_not(host: Host, path: str, names: Sequence[str], state: str) -> bool:
    """Whether the unit at ``path`` (with the drop-ins of ``names``) cannot write ``state``."""
    if host.unit_setting(path, "ProtectSystem", names) != "strict":
        return False
    writable = [os.path.normpath(p.lstrip("-+")) for p in
                host.unit_list(path, "ReadWritePaths", names)]
    writable += [os.path.join("/var/lib", d) for d in
                 host.unit_list(path, "StateDirectory", names)]
    return not any(state == w or state.startswith(w.rstrip("/") + "/") for w in writable)


def guard_interpreter(host: Host) -> list[Finding]:
    """The installed unit's interpreter, run on this host: others could change it, or the
    guard's code it imports. A staged tree's (``--root``) is the target's: not run here."""
    unit_path = _unit_path(host, templates.UNIT_TEMPLATE)
    if unit_path is None or os.path.normpath(host.root) != "/":
        return []
    exec_start = host.unit_setting(unit_path, "ExecStart", (templates.UNIT_TEMPLATE,))
    python = program(exec_start) if exec_start else None
    return [] if python is None else untrusted_interpreter(probe(python))


def untrusted_interpreter(found: Interpreter) -> list[Finding]:
    if not found.untrusted:
        return []
    return [Finding(
        "guard-interpreter-untrusted", "error", found.distrust(),
        "install the guard into an interpreter only root can change (root's pip, a system "
        f"package), then suspendguard install --python PATH; or make {found.path} and the "
        "guard's code root's, not writable by others")]


def logind_delay(host: Host) -> list[Finding]:
    settings = host.logind_settings("InhibitDelayMaxSec")
    if len({value for _, value in settings}) < 2:
        return []
    said = ", ".join(f"{value} in {file}" for file, value in settings)
    return [Finding(
        "inhibit-delay-conflict", "warning",
        f"InhibitDelayMaxSec is set more than once, differently ({said}): the last one read "
        f"({settings[-1][0]}) wins",
        "keep one InhibitDelayMaxSec=, in one drop-in under /etc/systemd/logind.conf.d/")]


def systemd_version(host: Host) -> list[Finding]:
    version = host.systemd_version()
    if version is None:
        return []
    out = []
    if version >= 256:
        out.append(Finding(
            "systemd-freezes-sessions", "note",
            f"systemd {version} freezes user sessions before the sleep hooks run: the veto "
            "unit, which runs before that, is what drains a job in a user session",
            "keep the veto unit enabled (suspendguard install)"))
    if version >= 257:
        out.append(Finding(
            "systemd-block-inhibitors-bind-root", "note",
            f"systemd {version}: block inhibitors bind root too, so a job's block lock stops "
            "even root's systemctl suspend",
            "suspendguard status lists the sleep blockers and who holds them"))
    return out


def ascend(host: Host) -> list[Finding]:
    if not (host.exists("usr/local/Ascend/driver") or host.exists("dev/davinci_manager")):
        return []
    running = host.process_names()
    return [Finding(
        "ascend-daemon-missing", "warning",
        f"the Ascend driver is installed but {daemon} does not run: "
        + ("npu-smi and the idle check cannot ask the device" if daemon == "dmp_daemon"
           else "the device logs read after resume are not written"),
        f"start the driver's {daemon} as its package does at boot (see the driver's "
        "installation guide), then check with npu-smi info")
        for daemon in ASCEND_DAEMONS if daemon not in running]


Check = Callable[[Host, Config, "float | None"], list[Finding]]
CHECKS: Sequence[tuple[str, Check]] = (
    ("nvidia", lambda h, c, v: nvidia_preserve(h, v)),
    ("hibernation", lambda h, c, v: hibernation(h, v)),
    ("units", lambda h, c, v: units_before_sleep(h)),
    ("guard", lambda h, c, v: guard_units(h, c)),
    ("state", lambda h, c, v: state_dir_in_units(h, c)),
    ("watch", lambda h, c, v: watch_timeouts(h, c)),
    ("interpreter", lambda h, c, v: guard_interpreter(h)),
    ("logind", lambda h, c, v: logind_delay(h)),
    ("systemd", lambda h, c, v: systemd_version(h)),
    ("ascend", lambda h, c, v: ascend(h)),
)


def doctor(host: Host, config: Config, vram_mb: float | None) -> list[Finding]:
    """Every finding of every check, errors first."""
    found = [f for _, check in CHECKS for f in check(host, config, vram_mb)]
    order = {"error": 0, "warning": 1, "note": 2}
    return sorted(found, key=lambda f: order[f.severity])


def to_fix(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity != "note"]


def vram_in_use_mb(config: Config, timeout_s: float = 5.0) -> float | None:
    """The video memory in use on this host's GPUs, from NVML; None when NVML cannot say."""
    backend = NvmlBackend(config.idle)
    if not backend.probe()[0]:
        return None
    try:
        readings = backend.query(timeout_s)
    except QueryFailed:
        return None
    used = [r.readings.get("memory_used_mb") for r in readings]
    return sum(u for u in used if u is not None) if any(u is not None for u in used) else None

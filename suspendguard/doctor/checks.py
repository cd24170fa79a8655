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

from collections.abc import Callable, Sequence

from suspendguard.config import Config
from suspendguard.doctor.finding import Finding
from suspendguard.doctor.host import Host
from suspendguard.doctor.units import (
    guard_interpreter,
    guard_units,
    state_dir_in_units,
    watch_timeouts,
)
from suspendguard.idle.base import QueryFailed
from suspendguard.idle.nvml import NvmlBackend
from suspendguard.install.unit_files import logical_lines, setting
from suspendguard.system.terminal import safe

NVIDIA_UNITS = ("nvidia-suspend.service", "nvidia-resume.service", "nvidia-hibernate.service")
# NVIDIA's default for NVreg_TemporaryFilePath when none is set.
NVIDIA_TMP = "/tmp"
# The daemons an Ascend driver runs that the guard relies on: npu-smi asks
# dmp_daemon, and the device logs read after resume are slogd's.
ASCEND_DAEMONS = ("dmp_daemon", "slogd")
MIB = 1024 * 1024


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
                                         for line in logical_lines(text)) if k.strip() == "Before")
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


def policy_users(host: Host, config: Config) -> list[Finding]:
    """A rule naming a user this host does not know matches no process: a protect rule so
    misspelt leaves its job to be drained at the next suspend."""
    policy = config.policy
    rules = [*(("protect", i, r) for i, r in enumerate(policy.protect)),
             *(("ignore", i, r) for i, r in enumerate(policy.ignore)),
             *(("drain", i, d.match) for i, d in enumerate(policy.drain))]
    return [Finding(
        "policy-user-unknown", "warning",
        f"[policy] {kind} #{i + 1} ({rule.describe()}) names a user this host does not know: "
        f"it matches no process, {_UNMATCHED[kind]}",
        f"correct the name (getent passwd {safe(rule.user)} finds it once it is right), or "
        "match on uid") for kind, i, rule in rules
        if rule.user is not None and not rule.user.isdigit() and not host.knows_user(rule.user)]


# What a rule that matches nothing leaves to happen.
_UNMATCHED = {"protect": "so the job it should protect is signalled at the next suspend",
              "ignore": "so what it should leave alone is signalled at the next suspend",
              "drain": "so its jobs get [drain] timeout_s, not the rule's own"}


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
    ("policy", lambda h, c, v: policy_users(h, c)),
)


def doctor(host: Host, config: Config, vram_mb: float | None) -> list[Finding]:
    """Every finding of every check, errors first."""
    found = [f for _, check in CHECKS for f in check(host, config, vram_mb)]
    order = {"error": 0, "warning": 1, "note": 2}
    return sorted(found, key=lambda f: order[f.severity])


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

"""After resume, before any restore: check each device, repair in order, check again.

The jobs the guard drained are still stopped while this runs; that is what
makes a repair possible (nvidia_uvm cannot be unloaded while a CUDA job
holds it) and what keeps a job from starting onto a broken device. A
process the guard did not stop that holds the device now is never worked
around: nothing is repaired, and that is said. Each check and each repair
is a step, recorded by the caller in the history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from suspendguard.config import Config
from suspendguard.health import ascend, nvidia
from suspendguard.health.model import UVM_SIGNATURE, HealthReport, merge
from suspendguard.logs.journal import JOURNALCTL
from suspendguard.record import DeviceHealth, FindingRecord
from suspendguard.system import runner

# The Ascend wait: the first pause, and the longest one (the pause doubles).
FIRST_PAUSE_S = 0.5
LONGEST_PAUSE_S = 8.0
# A probe of the Ascend wait's last check gets what is left of the wait, at least this.
LAST_PROBE_S = 1.0
TOOL_TIMEOUT_S = 30.0
# The NVIDIA repair's tools: modprobe -r, modprobe, systemctl is-active, systemctl restart.
RELOAD_TOOLS = 4
PERSISTENCED = "nvidia-persistenced.service"

# family -> what holds its device now, that the guard did not stop ("pid 12 python3")
Blockers = Callable[[str], Sequence[str]]
Step = Callable[[str, str], None]  # (step name, what happened): recorded and logged


@dataclass(frozen=True, slots=True)
class Tools:
    """The programs a repair runs; the configuration names modprobe, tests name the rest."""

    modprobe: str = "modprobe"
    systemctl: str = "systemctl"
    journalctl: str = JOURNALCTL
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True, slots=True)
class AfterResume:
    """The first check, the one the restore decides on, and the repairs between them."""

    first: HealthReport
    final: HealthReport
    repairs: tuple[str, ...] = ()  # what was done, in order ("reloaded nvidia_uvm")
    seconds: float = 0.0
    steps: tuple[tuple[str, str], ...] = field(default=())

    def held_reason(self) -> str:
        """Why jobs are held: the devices still unhealthy, and after what (empty: none is)."""
        bad = self.final.unhealthy()
        if not bad:
            return ""
        text = "; ".join(f"device {d.describe()}" for d in bad)
        return text + (f" after {', '.join(self.repairs)}" if self.repairs else "")

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first.to_json(), "final": self.final.to_json(),
                "repairs": list(self.repairs), "seconds": round(self.seconds, 3),
                "steps": [{"step": s, "note": n} for s, n in self.steps]}


def plan(config: Config) -> tuple[str, float]:
    """What the check after resume asks, in words, and the longest it can take: each probe's
    limit, then each repair's: NVIDIA's reload (its tools' limits) and its check again, the
    Ascend wait (its checks cut to what is left of it)."""
    families = config.devices.families
    probe = config.resume.health_timeout_s
    repair = config.resume.repair
    asked, longest = [], 0.0
    if "nvidia" in families:
        asked.append("nvidia (the CUDA probe, NVML, the kernel log)")
        longest += 3 * probe
        if repair:
            longest += RELOAD_TOOLS * _tool_timeout(config) + 3 * probe
    if "ascend" in families:
        asked.append("ascend (npu-smi, pyACL, the device logs)")
        longest += 2 * probe
        if repair:
            longest += config.resume.ready_timeout_s + 2 * LAST_PROBE_S
    return "; ".join(asked) or "no device family to check", longest


def _tool_timeout(config: Config) -> float:
    return min(TOOL_TIMEOUT_S, config.resume.health_timeout_s * 2)


def check(config: Config, since: datetime, findings: Iterable[FindingRecord] = (), *,
          families: Sequence[str] | None = None, tools: Tools = Tools(),
          before: Mapping[str, str] | None = None,
          timeout_s: float | None = None) -> HealthReport:
    """Every device of ``families`` (default: ``[devices] families``), each answer typed;
    ``before``: each device's own health word as the guard read it before the suspend;
    ``timeout_s``: each probe's limit (default: ``[resume] health_timeout_s``)."""
    wanted = config.devices.families if families is None else families
    timeout = config.resume.health_timeout_s if timeout_s is None else timeout_s
    answers: list[DeviceHealth] = []
    notes: list[str] = []
    if "nvidia" in wanted:
        cuda = nvidia.cuda_check(config, timeout)
        if cuda is None:
            notes.append(f"no CUDA driver ({config.resume.cuda_library} cannot be loaded, "
                         "or it sees no GPU): no NVIDIA device checked")
        else:
            answers += cuda
            for found, note in (nvidia.nvml_check(config, timeout, before),
                                nvidia.kernel_check(since, timeout, tools.journalctl)):
                answers += found
                notes += [note] if note else []
    if "ascend" in wanted:
        live: list[DeviceHealth] = []
        for found, note in (ascend.npu_smi_check(config, timeout, before),
                            ascend.acl_check(config, timeout, before)):
            live += found
            notes += [note] if note else []
        answers += live
        catalog = ascend.catalog_check(findings, since)
        if catalog and not live:
            # Nothing here can ask the device again: the finding is said, not decided on.
            catalog = [DeviceHealth(d.device, d.family, "unknown",
                                    f"{d.reason}; neither npu-smi nor pyACL can check it",
                                    d.source) for d in catalog]
        answers += catalog
    return HealthReport(merge(answers), tuple(notes))


def after_resume(config: Config, since: datetime, findings: Sequence[FindingRecord], *,
                 blockers: Blockers, step: Step, tools: Tools | None = None,
                 before: Mapping[str, str] | None = None) -> AfterResume:
    """The check, then each repair the unhealthy families have, in order, then the check
    again. ``before``: the devices' own health words before the suspend (see :func:`check`)."""
    tools = tools or Tools(modprobe=config.resume.modprobe)
    clock = time.monotonic()
    steps: list[tuple[str, str]] = []

    def say(name: str, note: str) -> None:
        steps.append((name, note))
        step(name, note)

    first = check(config, since, findings, tools=tools, before=before)
    say("health", first.summary())
    report, repairs = first, []
    for family in dict.fromkeys(d.family for d in first.unhealthy()):
        if not config.resume.repair:
            say("repair", f"{family}: not repaired: [resume] repair is off")
            continue
        if family == "nvidia" and (unknown := _no_reload(report)):
            say("repair", f"nvidia: no repair known for {unknown}")
            continue
        # Waiting touches nothing: only a repair that acts on the device (the NVIDIA
        # reload) waits for a device nobody else holds.
        held = list(blockers(family)) if family != "ascend" else []
        if held:
            say("repair", f"{family}: not repaired: the device is held by "
                f"{', '.join(held[:5])}, which the guard did not stop")
            continue
        if family == "ascend":
            report, waited = _wait_for_ascend(config, since, report, findings, tools, say,
                                              before)
            repairs.append(f"waiting {waited} for the device")
        elif family == "nvidia":
            if _reload_uvm(config, tools, say):
                repairs.append("reload")
            report = _replace(report, "nvidia", check(config, since, families=("nvidia",),
                                                      tools=tools, before=before))
            say("health", f"nvidia again: {_family_summary(report, 'nvidia')}")
    return AfterResume(first, report, tuple(repairs), time.monotonic() - clock, tuple(steps))


def _no_reload(report: HealthReport) -> str:
    """What makes the reload of nvidia_uvm no repair for ``report``'s NVIDIA answers, in words;
    "" when it is one: CUDA's 999, and no GPU gone. A GPU fallen off the bus (Xid 79) or lost
    to NVML fails CUDA too (often with 999): a reload cannot bring it back, only a reboot."""
    bad = report.unhealthy("nvidia")
    gone = [d for d in bad if nvidia.lost(d)]
    if gone:
        return ("; ".join(d.describe() for d in gone) + " (a GPU lost or fallen off the bus "
                "needs a reboot: nvidia_uvm is not reloaded)")
    if not any(d.signature == UVM_SIGNATURE for d in bad):
        return "; ".join(d.describe() for d in bad)
    return ""


def _family_summary(report: HealthReport, family: str) -> str:
    return HealthReport(tuple(d for d in report.devices if d.family == family)).summary()


def _replace(report: HealthReport, family: str, new: HealthReport) -> HealthReport:
    """``report`` with ``family``'s answers replaced by ``new``'s."""
    kept = tuple(d for d in report.devices if d.family != family)
    notes = tuple(dict.fromkeys((*report.notes, *new.notes)))
    return HealthReport((*kept, *new.devices), notes)


def _wait_for_ascend(config: Config, since: datetime, report: HealthReport,
                     findings: Sequence[FindingRecord], tools: Tools, say: Step,
                     before: Mapping[str, str] | None) -> tuple[HealthReport, str]:
    """Ask again, pausing 0.5 s, 1 s, 2 s ... (at most 8 s), until healthy or ready_timeout_s;
    the report, and how long it waited, in words. Each check keeps the logs' findings no wait
    answers (a reset the logs recorded): once they alone are left, waiting ends."""
    kept = ascend.lasting(findings)
    started = time.monotonic()
    deadline = started + config.resume.ready_timeout_s
    pause, tries = FIRST_PAUSE_S, 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        tools.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE_S)
        tries += 1
        # Its two probes within what is left of the wait: the last check ends with it.
        left = deadline - time.monotonic()
        probe = max(LAST_PROBE_S, min(config.resume.health_timeout_s, left / 2))
        report = _replace(report, "ascend", check(config, since, kept, families=("ascend",),
                                                  tools=tools, before=before, timeout_s=probe))
        if all(d.source == "catalog" for d in report.unhealthy("ascend")):
            break
    waited = time.monotonic() - started
    say("repair", f"ascend: waited {waited:.1f} s ({tries} checks): "
        f"{_family_summary(report, 'ascend')}")
    ran_out = time.monotonic() >= deadline
    return report, f"{config.resume.ready_timeout_s:g} s" if ran_out else f"{waited:.1f} s"


def _reload_uvm(config: Config, tools: Tools, say: Step) -> bool:
    """modprobe -r nvidia_uvm, modprobe nvidia_uvm, restart nvidia-persistenced where it runs."""
    timeout = _tool_timeout(config)
    for argv in ([tools.modprobe, "-r", "nvidia_uvm"], [tools.modprobe, "nvidia_uvm"]):
        result = runner.run(argv, timeout=timeout)
        if not result.ok:
            say("repair", f"nvidia: {' '.join(argv[1:])} failed: {result.describe_failure()}")
            return False
    say("repair", "nvidia: reloaded nvidia_uvm (modprobe -r nvidia_uvm; modprobe nvidia_uvm)")
    active = runner.run([tools.systemctl, "is-active", "--quiet", PERSISTENCED], timeout=timeout)
    if not active.ok:
        say("repair", f"nvidia: {PERSISTENCED} does not run here: not restarted")
        return True
    restarted = runner.run([tools.systemctl, "restart", PERSISTENCED], timeout=timeout)
    say("repair", f"nvidia: restarted {PERSISTENCED}" if restarted.ok
        else f"nvidia: restart of {PERSISTENCED} failed: {restarted.describe_failure()}")
    return True

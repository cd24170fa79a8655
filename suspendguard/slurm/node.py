"""A node's side: what its guard answers the controller, and Slurm's health check on it.

``prepare`` drains the jobs outside Slurm (the controller asks only for an
idle node, so every holder is outside Slurm) and gives the verdict; with
``suspend`` an allowed node then asks logind to sleep, through the veto
unit like any other suspend. ``awake`` is the check after a wake (the
devices' health, and holders outside Slurm), and ``rejoin`` restarts slurmd
so that the node registers (with ``-b`` after a sleep: a node that only
slept keeps its boot time, and slurmctld ignores it otherwise). ``health``
is Slurm's HealthCheckProgram: it drains the node when a process outside
Slurm holds its accelerator or the accelerator is unhealthy, and resumes
only nodes the guard drained itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TextIO

from suspendguard.config import FAMILIES, Config
from suspendguard.errors import HistoryError
from suspendguard.guard.device_view import pid_list, refused_pids
from suspendguard.guard.identity import vouch
from suspendguard.guard.inventory import families_with_devices, take_inventory
from suspendguard.guard.policy import ancestors, decide
from suspendguard.guard.run import Caller, guard_report
from suspendguard.guard.scan import scan_holders
from suspendguard.health.model import HealthReport
from suspendguard.health.resume import check
from suspendguard.logs.after import after_attempt, holder_homes, holder_log_dirs, job_units
from suspendguard.model import Holder, Inventory
from suspendguard.record import Attempt
from suspendguard.slurm.remote import PREFIX, ours, slurm_reason, this_node
from suspendguard.slurm.scontrol import Scontrol, SlurmError
from suspendguard.store import mode as guard_mode
from suspendguard.store.history import History
from suspendguard.system import runner
from suspendguard.system.deadline import Deadline, bounded
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcAccessError, ProcFS
from suspendguard.verdict import Reason, ReasonCode

SYSTEMCTL_TIMEOUT_S = 60.0
HEALTH_BOUND_S = 45.0
# The holder scan's share of it: a read of /proc/PID/maps waits while a process stuck in
# the driver (likely when the accelerator is unhealthy) holds its memory's lock.
SCAN_BOUND_S = 20.0
STEPD = "slurmstepd"  # the parent of every task of a Slurm job
DROPIN = "suspendguard-boot.conf"


def answer(node: str, kind: str, reasons: list[Reason], **more: Any) -> dict[str, Any]:
    """A node's JSON answer: its verdict and the reasons, texts and details."""
    return {"node": node, "verdict": kind, "reasons": [r.text for r in reasons],
            "reason_details": [r.to_json() for r in reasons], **more}


def prepare(ctx: Caller, suspend: bool) -> dict[str, Any]:
    """The drain as ``suspendguard mode`` says, recorded: real in enforce mode; in observe mode
    a look that signals nobody and allows, what it found kept under ``observed``; nothing in
    off mode. With ``suspend``, an allowed node then asks to sleep."""
    config = ctx.config()
    node = this_node(config.slurm, ctx.environ)
    log = Logger(ctx.err, ctx.environ)
    mode = guard_mode.read(config.state.dir)
    if mode.problem:
        log.warning(mode.problem)
    if mode.name == "off":
        doc = answer(node, "allow", [], mode="off", suspend="not asked")
    elif mode.name == "observe":
        report = guard_report(ctx, log, True, "suspend", "slurm", observe=True)
        looked = report.verdict
        doc = answer(node, "allow", [], mode="observe", attempt=report.attempt.id,
                     observed={"verdict": looked.kind, "reasons": list(looked.texts)},
                     suspend="not asked")
    else:
        report = guard_report(ctx, log, False, "suspend", "slurm")
        verdict = report.verdict
        doc = answer(node, verdict.kind, list(verdict.reasons), mode="enforce",
                     attempt=report.attempt.id, suspend="not asked")
    if doc["verdict"] == "allow" and _asker_gone(ctx.out):
        # The controller held the node as unreachable: a sleep now would leave it asleep,
        # drained and out of power saving, with nothing to wake it; powered off by the
        # controller ([slurm] power_off), it will not be, and the jobs stopped must come back.
        why = Reason("node-unreachable", "the controller stopped waiting for this answer "
                     "([slurm] timeout_s): " + ("not suspended" if suspend
                                                else "not powered off"))
        log.warning(f"slurm node prepare: {why.text}")
        return _not_slept(ctx, config, doc, why, log)
    if doc["verdict"] == "allow" and suspend:
        from suspendguard.system.dbus.bus import system_bus_address
        from suspendguard.system.dbus.logind import ask_sleep
        asked = ask_sleep("suspend", address=system_bus_address(ctx.environ))
        if asked is True:
            doc["suspend"] = "asked"
        else:
            why = Reason("power-action-failed", f"logind refused the suspend: {asked}")
            return _not_slept(ctx, config, doc, why, log)
    return doc


def _asker_gone(out: TextIO) -> bool:
    """Whether whoever reads the answer has gone: the remote's pipe or socket reports an
    error or a hang-up (ssh killed at the controller's timeout; sshd closes the session's
    end, and signals no command that runs without a terminal)."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation: an answer kept in memory
        return False
    poll = select.poll()
    poll.register(fd, 0)  # POLLERR and POLLHUP are reported whatever is asked
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))


def _not_slept(ctx: Caller, config: Config, doc: dict[str, Any], why: Reason,
               log: Logger) -> dict[str, Any]:
    """The answer when the node does not sleep after all, the jobs its drain stopped through
    their supervisors started again, as after a veto: no resume will come to do it."""
    attempt = doc.get("attempt")
    if isinstance(attempt, int) and attempt:
        _start_again(ctx, config, attempt, log)
    return {**answer(doc["node"], "veto", [why], suspend="refused"),
            **{k: doc[k] for k in ("mode", "attempt", "observed") if k in doc}}


def restart(ctx: Caller, attempt: int) -> dict[str, Any]:
    """The jobs attempt ``attempt``'s drain stopped through their supervisors, started again:
    the controller did not power the node off after all ([slurm] power_off failed)."""
    config = ctx.config()
    log = Logger(ctx.err, ctx.environ)
    started = _start_again(ctx, config, attempt, log)
    node = this_node(config.slurm, ctx.environ)
    if started is None:
        return answer(node, "unknown", [], attempt=attempt)
    return answer(node, "allow", [], attempt=attempt, started=started)


def _start_again(ctx: Caller, config: Config, attempt: int, log: Logger) -> list[str] | None:
    """The jobs ``attempt`` stopped through their supervisors, started as after a veto, under
    the guard lock: no resume will come to do it. The owners' names; None when the lock was
    refused or the history could not say."""
    from suspendguard.guard.outcome import restore_attempt
    from suspendguard.guard.run import OnDemandOwnerControl
    done = restore_attempt(config.state.dir, attempt, OnDemandOwnerControl(
        ctx.environ, config.state.dir), config.restore, log)
    return None if done is None else [
        r.stop.owner.name for r in done if r.result in ("started", "starting")]


def awake(config: Config, environ: Mapping[str, str], since: float) -> dict[str, Any]:
    """The node after a wake: veto when a process outside Slurm holds its accelerator (in
    enforce mode, as ``health`` drains for it) or a device is unhealthy, unknown when a
    device could not be asked or a process inspected (the controller lets such a node
    back, and says so), else allow. A veto has the controller drain the node before it
    rejoins. ``since``: where the logs are read from when no attempt says it."""
    node = this_node(config.slurm, environ)
    inventory = take_inventory(config.devices)
    mode = guard_mode.read(config.state.dir)
    # A node may be awake while Slurm counts it powered down (its veto unit refused the
    # suspend after the guard allowed, a hold whose drain failed): the job that wakes it
    # would otherwise start beside that holder. Observe and off mode refuse nothing.
    held, unsure = (held_outside_slurm(config, inventory, time.monotonic() + SCAN_BOUND_S)
                    if mode.enforcing else ([], []))
    attempt, words = _slept_after(config)
    when, findings, logs_unread = datetime.fromtimestamp(since), [], []
    if attempt is not None and mode.name != "off":  # off: prepare recorded no attempt
        # The device logs since the suspend began, as the check after resume counts them:
        # a chip that reset while asleep (heartbeat-lost) may read healthy to npu-smi.
        when = datetime.fromtimestamp(attempt.started)
        found = after_attempt(config, when, holder_homes(attempt), until=datetime.now(),
                              units=job_units(attempt), log_dirs=holder_log_dirs(attempt))
        findings = [f.record() for f in found.findings]
        logs_unread = found.unread()
    report = check(config, when, findings, before=words)
    bad, unread = _health_reasons(report, "", inventory, "unhealthy-after-resume")
    if held or bad:
        return answer(node, "veto", held + bad, summary=report.summary())
    unread += unsure
    if logs_unread:
        # What they hold is unknown: a chip that reset while asleep may be in them.
        more = f" and {len(logs_unread) - 1} more" if len(logs_unread) > 1 else ""
        unread.append(Reason("health-unknown", "device logs since the suspend not read "
                             f"whole ({logs_unread[0]}{more}): a failure while asleep "
                             "would be missed"))
    return answer(node, "unknown" if unread else "allow", unread, summary=report.summary())


def _health_reasons(report: HealthReport, note: str, inventory: Inventory,
                    unhealthy: ReasonCode) -> tuple[list[Reason], list[Reason]]:
    """The unhealthy devices (as ``unhealthy``: after a wake, or at any time), and those whose
    health could not be read, as reasons: a
    family whose devices are here and for which no tool answered (none installed, none on
    PATH) is one whose health could not be read; one found by its management nodes alone
    (a driver with no device here) is not."""
    def said(code: ReasonCode, state: str) -> list[Reason]:
        return [Reason(code, f"device {d.describe()}{note}", device=d.family)
                for d in report.devices if d.state == state]

    why = "; ".join(report.notes) or "no tool answered"
    unasked = [Reason("health-unknown", f"{family}: no device checked, though its device "
                      f"nodes are here ({why}){note}", device=family)
               for family in families_with_devices(inventory)
               if family in FAMILIES and family not in report.families()]
    return said(unhealthy, "unhealthy"), said("health-unknown", "unknown") + unasked


def _slept_after(config: Config) -> tuple[Attempt | None, dict[str, str] | None]:
    """The attempt the wake follows: the newest, when it is the controller's ``prepare`` and
    let the node go down (observe mode's look lets it whatever it saw); and the devices'
    own health words the guard read before its last suspend (npu-smi's Health), which the
    check after the wake compares with. None for what cannot be read."""
    try:
        with History.open(config.state.dir, readonly=True) as history:
            newest = next(iter(history.attempts(1)), None)
            last = history.last_slept_on()
            words = history.health_before(last.id) if last else None
    except HistoryError:
        return None, None
    if newest is None or newest.origin != "slurm" or not (newest.dry_run
                                                          or newest.result == "allow"):
        return None, words
    return newest, words


def rejoin(config: Config, environ: Mapping[str, str], boot: bool) -> dict[str, Any]:
    """slurmd restarted, so that the node registers; with ``boot``, once with ``-b``."""
    node = this_node(config.slurm, environ)
    unit = config.slurm.slurmd_unit
    dropin = Path("/run/systemd/system") / f"{unit}.d" / DROPIN
    notes = []
    if boot:
        argv = _exec_start(unit)
        if argv is None:
            notes.append(f"{unit}: its ExecStart could not be read: restarted without -b")
        else:
            try:
                dropin.parent.mkdir(parents=True, exist_ok=True)
                dropin.write_text("# suspendguard slurm rejoin: one start that reports a "
                                  f"boot\n[Service]\nExecStart=\nExecStart={argv} -b\n")
            except OSError as exc:  # not root: the remote runs the node's guard as root
                with contextlib.suppress(OSError):
                    dropin.unlink(missing_ok=True)  # a part written must not claim a boot later
                said = f"{dropin}: not written ({exc.strerror or exc}): {unit} not restarted"
                return answer(node, "veto", [Reason("power-action-failed", said)], notes=notes)
            _systemctl("daemon-reload")
    try:
        result = _systemctl("restart", unit)
    finally:
        if dropin.exists():
            # The next restart (an upgrade, the operator) must not claim a reboot:
            # slurmctld would take the node's running jobs for lost.
            dropin.unlink()
            _systemctl("daemon-reload")
    if not result.ok:
        why = Reason("power-action-failed", f"{unit} did not restart: {result.describe_failure()}")
        return answer(node, "veto", [why], notes=notes)
    return answer(node, "allow", [], notes=notes)


def _systemctl(*args: str) -> runner.RunResult:
    return runner.run(["systemctl", *args], SYSTEMCTL_TIMEOUT_S)


def _exec_start(unit: str) -> str | None:
    """The unit's command line as written ($VARIABLES unexpanded), from systemctl show."""
    shown = _systemctl("show", "-p", "ExecStart", "--value", unit)
    m = re.search(r"argv\[\]=(.*?) ;", shown.stdout)
    return m.group(1).strip() if shown.ok and m else None


def held_outside_slurm(config: Config, inventory: Inventory,
                       until: float) -> tuple[list[Reason], list[Reason]]:
    """The holders of the node's accelerator that no Slurm job started and that a suspend
    would meet: what the guard lets a suspend go with (the driver's daemons, management
    tools, graphics clients, ``[policy] ignore``) holds the node no more here. Then why
    that is not known for every process: those the scan could not read, or not by
    ``until`` (a time.monotonic() time), any of which may hold it."""
    proc = ProcFS()
    scan = scan_holders(inventory, proc, exclude=runner.active_children(), until=until)
    refused, _ = refused_pids(scan)
    unsure = []
    if refused:
        pids = pid_list(refused)
        unsure.append(Reason("uninspected", f"{len(refused)} process(es) could not be "
                             f"inspected (pids {pids}): any of them may hold the accelerator"))
    outside = [h for h in scan.holders if not _in_a_job(proc, h)]
    out = []
    for d in decide(outside, config.policy, config.drain, never_pids=ancestors(os.getpid()),
                    vouched=vouch(outside, proc, None)):
        if d.action in ("ignore", "keep"):
            continue
        h = d.holder
        held = ", ".join(n.seen_as for n in h.nodes) or "the accelerator"
        out.append(Reason("held-outside-slurm",
                          f"pid {h.pid} {h.comm} (user {h.user}) holds {held}, outside Slurm",
                          pid=h.pid, comm=h.comm, unit=h.unit))
    return out, unsure


# slurmstepd's cgroup of a job (cgroup v2: /system.slice/slurmstepd.scope/job_42/step_0/...),
# made by root: pam_slurm_adopt puts a user's ssh session into it too. Slices alone above
# it: below a unit (user@UID.service, any Delegate= unit, a container's scope) a user
# may make cgroups of any name.
_JOB_CGROUP = re.compile(r"/(?:[^/]+\.slice/)*slurmstepd\.scope/job_[0-9]+(?:/|$)")


def _in_a_job(proc: ProcFS, holder: Holder) -> bool:
    """Whether ``holder`` is a task of a Slurm job: in a job's cgroup, or (proctrack without
    cgroups) below a slurmstepd that runs as root, which no user can start."""
    if holder.cgroup and _JOB_CGROUP.match(holder.cgroup):
        return True
    pid, seen = holder.ppid, {holder.pid}
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            st = proc.stat(pid)
            if st is not None and st.comm == STEPD:
                status = proc.status(pid)
                return status is not None and status.uid == 0
        except ProcAccessError:
            return False
        if st is None:
            return False
        pid = st.ppid
    return False


def health(config: Config, environ: Mapping[str, str], log: Logger) -> dict[str, Any]:
    """Drain the node when its accelerator is held outside Slurm or unhealthy; resume it once
    it is neither, if the guard drained it. A drain by anyone else is left alone."""
    node = this_node(config.slurm, environ)
    # slurmd kills its HealthCheckProgram at 60 s: every probe and scontrol ends by this bound.
    with bounded(Deadline(time.monotonic() + HEALTH_BOUND_S)):
        return _health(config, node, log)


def _health(config: Config, node: str, log: Logger) -> dict[str, Any]:
    inventory = take_inventory(config.devices)
    problems, unsure = held_outside_slurm(config, inventory, time.monotonic() + SCAN_BOUND_S)
    mode = guard_mode.read(config.state.dir)
    observed: dict[str, Any] = {}
    if not mode.enforcing:
        # Such a drain keeps the node from a suspend its guard would refuse; in observe or
        # off mode it refuses none, and the drain would only take the node out of use.
        if seen := problems or unsure:  # kept in the answer, as in prepare's
            observed = {"mode": mode.name,
                        "observed": answer(node, "veto" if problems else "unknown", seen)}
        if problems:
            log.info(f"slurm health: {node}: the guard's mode is {mode.name} (suspendguard "
                     f"mode): not drained for {problems[0].text}")
        problems, unsure = [], []
    report = check(config, datetime.now(timezone.utc) - timedelta(minutes=10))
    bad, unread = _health_reasons(report, " (health check)", inventory, "device-unhealthy")
    problems, unread = problems + bad, unread + unsure
    scontrol = Scontrol(config.slurm.scontrol)
    try:
        now = scontrol.node(node)
        action = _health_action(now.drained, now.reason, problems, unknown=bool(unread))
        if action == "drain":
            scontrol.update(node, "DRAIN", slurm_reason(problems[0]))
        elif action == "resume":
            scontrol.update(node, "RESUME")
    except SlurmError as exc:
        log.warning(f"slurm health: {exc}")  # what was found, and what is unknown, kept:
        return answer(node, "unknown", problems + unread, action="none", error=str(exc),
                      **observed)
    if action == "leave" and problems:
        whose = repr(now.reason) if now.reason else "no reason: Slurm dropped it"
        log.info(f"slurm health: {node} is drained by someone else ({whose}): left alone")
    kind = "veto" if problems else "unknown" if unread else "allow"
    return answer(node, kind, problems or unread, action=action, **observed)


def _health_action(drained: bool, reason: str, problems: list[Reason],
                   unknown: bool = False) -> str:
    """drain, resume, keep (our drain stays, its first reason kept) or leave (not ours).

    A device whose health is ``unknown`` drains nothing, and lifts no drain of ours either:
    nothing says that what made the guard drain the node is gone. A drain with no reason
    is nobody's the guard knows (Slurm 22.05 drops the reason of a drained node woken or
    registered after a power-down): left alone."""
    if (reason or drained) and not ours(reason):
        return "leave"
    if problems:
        return "keep" if drained and ours(reason) else "drain"
    if drained and reason.startswith(PREFIX):
        return "keep" if unknown else "resume"
    return "leave"

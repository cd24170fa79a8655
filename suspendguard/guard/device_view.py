"""The device's own view, before the drain and for what the scan could not read.

Before anyone is signalled, each device is read once (``ask_first``) for
its process list and its backends: a process it reports that this host
cannot see, or a family no backend can answer for, is a certain veto then
and there. Processes the scan could not read (``refused_pids``) leave the
verdict unknown unless that view answers for every device (``uninspected``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import replace

from suspendguard.config import FAMILIES, IdleConfig
from suspendguard.guard.describe import describe_process
from suspendguard.guard.policy import MANAGEMENT_ONLY
from suspendguard.guard.run_state import IdleCheck, RunState
from suspendguard.guard.said import NOTHING, Said
from suspendguard.idle.base import IdleReport, family_of
from suspendguard.idle.sampler import check_idle
from suspendguard.model import Decision, Holder, ScanResult
from suspendguard.system.deadline import Deadline, granted, nap
from suspendguard.system.procfs import ProcAccessError, ProcFS
from suspendguard.system.runner import Abandoned
from suspendguard.verdict import Reason

HZ = os.sysconf("SC_CLK_TCK")  # the unit of a process's start time (/proc/PID/stat)


def default_idle_check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
    """The device asked through the built-in backends; its pauses between readings end at
    SIGTERM too (system/deadline.py). Its tools get the time ``deadline`` gives, which the
    run may have moved past its own end (at_least): not cut to the run's bound again."""
    with granted(deadline):
        return check_idle(config, families, deadline, sleep=nap)


def pid_list(pids: Sequence[int], most: int = 10) -> str:
    """"1, 2, 3" for a reason's text: the first ``most``, then ", ..." where there are more."""
    return ", ".join(str(p) for p in pids[:most]) + (", ..." if len(pids) > most else "")


def refused_pids(scan: ScanResult) -> tuple[list[int], Said]:
    """The processes the scan could not read, PID 1 aside; a refused map_files read is warned of.

    PID 1 is never signalled whatever it holds; some containers refuse
    reading it even to root, which is worth counting but not a warning.
    """
    refused = [p for p in scan.unreadable_pids if p != 1]
    said = NOTHING
    if scan.maps_refused:
        n = len(scan.maps_refused)
        said = Said.warn(
            f"{n} process{'es' if n != 1 else ''} map a device file whose /proc/PID/map_files "
            "link the guard may not follow (that takes CAP_SYS_ADMIN, or CAP_CHECKPOINT_RESTORE "
            "from Linux 5.9): a node held only through a mapping is missed for them (pids "
            + pid_list(scan.maps_refused) + ")")
        if os.geteuid() == 0:
            refused = sorted({*refused, *scan.maps_refused} - {1})
    if scan.late:
        n = len(scan.late)
        said += Said.warn(
            f"the scan of {n} process{'es' if n != 1 else ''} did not answer by the run's "
            "deadline and was ended: a read of /proc waits while a process stuck in the kernel "
            "(a driver call that hangs) holds its memory's lock; they count as not inspected")
    return refused, said


def ask_first(r: RunState, idle_check: IdleCheck, idle: IdleConfig,
              families: Sequence[str]) -> tuple[IdleReport, Said]:
    """One reading of every device before the drain, for its process lists and its backends.

    Its load decides nothing (the jobs are still running); a family no
    backend can answer for is vetoed now under ``[idle] on_unknown = veto``,
    since no drain can change that. One whose backend this reading's short
    time left unasked (another, hung, took it all) is not: that backend is
    asked after the drain, in the run's own time.
    """
    config = replace(idle, samples=1, settle_s=0.0)
    first = idle_check(config, families, r.deadline.within(config.command_timeout_s).at_least(0.5))
    if idle.on_unknown != "veto":
        return first, NOTHING
    untried = {family_of(name) for name in first.unasked}
    return first, Said.veto(*(Reason("device-unknown", why, device=family)
                              for family, why in first.unknown if family not in untried))


def uninspected(refused: Sequence[int], first: IdleReport | None,
                families: Sequence[str], hidden: str = "") -> Said:
    """Why processes the scan could not read leave the verdict unknown (its reasons, or a
    warning when they do not).

    Any of them may hold a node. As root that stays a warning only when the
    device's own view answers for every device (``families``: one entry per device found),
    process lists included, and
    names none of them. No view answers for nodes given only in ``[devices] nodes``
    (family "extra"), and none at all when the device was not read (``first`` None).
    ``hidden``: this /proc's ``hidepid=`` where it hides other users' processes from a
    caller who is not root, which no view answers for either.
    """
    n = len(refused)
    some = f"{n} process{'es' if n != 1 else ''}"
    if os.geteuid() != 0 and (refused or hidden):
        what = [f"{some} could not be inspected"] if refused else []
        if hidden:
            what.append(f"/proc is mounted with hidepid={hidden}, which hides other users' "
                        "processes from this user")
        return Said.veto(Reason("uninspected", f"run as root: {'; '.join(what)} (any of them "
                                "may hold an accelerator node)"))
    if not refused:
        return NOTHING
    pids = pid_list(refused)
    # Nodes given only in [devices] nodes (family "extra") have no vendor
    # query: no device view answers for them, nor any when none was read.
    wanted = list(dict.fromkeys(families))
    found = Counter(families)
    views = {f: first.process_view(f, found[f]) if first is not None and f in FAMILIES else ""
             for f in wanted}
    named = {p.pid for p in first.processes()} & set(refused) if first is not None else set()
    if views and all(views.values()) and not named:
        return Said.warn(f"{some} could not be inspected as root (pids {pids}); the devices' "
                         f"own view ({', '.join(dict.fromkeys(views.values()))}) answers for "
                         "every device and reports no process the guard did not see")
    unanswered = [f if f in FAMILIES else "[devices] nodes, which no device view covers"
                  for f in wanted if not views[f]]
    why = (f"the device reports {len(named)} of them" if named else
           "no device view answers for every device, process lists included"
           + (f" ({', '.join(dict.fromkeys(unanswered))})" if unanswered else
              " (no idle backend for these nodes)"))
    return Said.veto(Reason("uninspected", f"{some} could not be inspected as root (pids "
                            f"{pids}), and {why}: any of them may hold an accelerator node"))


def stuck_children(stuck: Sequence[Abandoned], now: float) -> Said:
    """A certain veto (device-busy) for each of the guard's own children killed at its timeout
    that is still there (system/runner.py ``abandoned``; ``now``: time.monotonic()).

    SIGKILL ends a process once it leaves the kernel: one still there is in a driver call that
    does not return, on a device that is not idle then (its query hung), and a freezer that
    cannot freeze it fails the suspend, or a driver's suspend runs beside the call. A
    veto, not unknown: the guard knows it is there; device-busy, since a later try may find the
    call returned and the child gone (``[notify] retry`` asks again for it).
    """
    return Said.veto(*(Reason(
        "device-busy", f"the guard's own {a.command} (pid {a.pid}) did not exit after SIGKILL "
        f"({max(0.0, now - a.since):.0f} s ago): stuck in the driver, in a call that does not "
        f"return; suspend once it has exited (ps -o stat= -p {a.pid} reads D while it is stuck)",
        pid=a.pid) for a in stuck))


def by_its_nodes(d: Decision) -> bool:
    """Whether the scan's holder was left alone only for the nodes it held: a graphics
    client kept, or management nodes only; never an operator's rule or a vouched
    daemon or probe, whose own reasons stand whatever the device lists."""
    return d.action == "keep" or (d.action == "ignore" and d.rule == MANAGEMENT_ONLY)


def _reused(pid: int, starts: Collection[int], proc: ProcFS) -> bool:
    """Whether another process than the run's own (``starts``: its start times) has ``pid``
    now; one gone, or that cannot be read, is not said to be another."""
    try:
        st = proc.stat(pid)
    except ProcAccessError:
        return False
    return st is not None and st.start_time not in starts


def device_holders(r: RunState, idle: IdleReport,
                   known: Collection[int] = ()) -> tuple[list[Decision], Said]:
    """Processes the device reports that the scan did not see, as decided holders.

    A holder left alone for its nodes alone (kept as a graphics client, or
    ignored for holding management nodes only) that the device lists as a
    compute process is decided again, as the device reports it: its nodes
    said "no compute work" (no CUDA: a compute API without UVM; a compute
    node the scan did not know), the device says otherwise. One
    the device lists as a graphics process alone is a graphics client
    wherever it runs: named in a warning, never signalled, never a veto.
    """
    # A pid the run handled names the process it handled only while its start time is the
    # same: one that exited and whose pid another took is someone the run never saw.
    recorded: dict[int, set[int]] = {}
    for pid, start in r.results:
        recorded.setdefault(pid, set()).add(start)
    known_pids = set(known) | {pid for pid, starts in recorded.items()
                               if not _reused(pid, starts, r.options.proc)}
    kept = {pid: hr.decision.holder for (pid, start), hr in r.results.items()
            if by_its_nodes(hr.decision) and not _reused(pid, {start}, r.options.proc)}
    # When each pid was first listed, by any device: the earliest sample that named it.
    listed: dict[int, float] = {}
    for p in idle.processes():
        if p.listed_at:
            listed[p.pid] = min(listed.get(p.pid, p.listed_at), p.listed_at)
    extra: list[Holder] = []
    said = NOTHING
    for p in idle.processes():
        pid = int(p.pid)
        if pid in kept and p.kind == "compute":
            extra.append(replace(kept.pop(pid), source=str(p.source)))
            continue
        if pid in known_pids or pid <= 0:
            continue
        known_pids.add(pid)
        if p.kind == "graphics":
            said += Said.warn(f"the device ({p.source}) reports pid {pid} {p.name or ''}".rstrip()
                              + " as a graphics process, which the scan did not see: kept, not "
                              "signalled")
            continue
        try:
            holder = describe_process(pid, [], r.options.proc, source=str(p.source))
        except ProcAccessError:
            holder = None
        if holder is not None and pid in listed and holder.start_time > listed[pid] * HZ + 1:
            holder = None  # started after the device listed it: the pid is another's now
        if holder is None:
            said += Said.veto(Reason(
                "device-hidden-holder", f"the device ({p.source}) reports pid {pid} "
                f"{p.name or ''}".rstrip() + ", which is not visible here (another PID "
                "namespace, a VM, or a container the guard cannot enter; or it ended just as "
                "the device was read: check again): the guard cannot ask it to stop",
                pid=pid, comm=p.name or None, device=str(p.device) or None))
            continue
        extra.append(holder)
    return r.decide(extra), said

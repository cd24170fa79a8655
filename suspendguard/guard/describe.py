"""A process described as a holder: who runs it, where, how it takes SIGINT, where it logs.

Read by pid, after the scan (or the device) named it; None for a process that
is gone, whose PID another has taken, or that is a kernel thread.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from dataclasses import replace

from suspendguard.model import (
    Disposition,
    HeldNode,
    Holder,
    HolderId,
    NodeKey,
    SignalMasks,
    holder_id,
)
from suspendguard.system.cgroup_path import unit_and_container
from suspendguard.system.procfs import ProcAccessError, ProcFS, Stat, parse_stat, user_name
from suspendguard.system.sigdelivery import Delivery, delivery


def describe_process(
    pid: int, held: list[HeldNode], proc: ProcFS | None = None, source: str = "proc",
    start_time: int | None = None,
) -> Holder | None:
    """The holder record of ``pid``; None when it is gone, or a kernel thread (what a
    device's pid from another PID namespace may name here). ``start_time``: the one the
    scan saw; a process with another one has taken the PID over, and is none of its business.
    """
    proc = proc or ProcFS()
    st = proc.stat(pid)
    status = proc.status(pid)
    if st is None or status is None or _kernel_thread(pid, st.ppid, status.kthread, proc):
        return None
    if start_time is not None and st.start_time != start_time:
        return None
    cgroup = proc.cgroup(pid)
    unit, container = unit_and_container(cgroup)
    thaw = proc.thaw_file(pid, cgroup)
    unique: dict[tuple[NodeKey, str], HeldNode] = {}
    for h in held:
        unique.setdefault((h.node.key, h.via), h)
    return Holder(
        pid=pid,
        start_time=st.start_time,
        ppid=st.ppid,
        uid=status.uid,
        user=user_name(status.uid),
        comm=st.comm,
        exe=proc.link(pid, "exe"),
        cmdline=proc.cmdline(pid),
        unit=unit,
        container=container,
        nspid=status.nspid or (pid,),
        nodes=tuple(unique.values()),
        sigint=sigint_disposition(proc, pid, status.masks, leader_gone=st.state in _EXITED),
        fatal_handlers=status.masks.fatal_handlers(),
        frozen=bool(thaw),
        source=source,
        sig_masks=status.masks,
        thaw=thaw,
        stopped=stopped_state(proc, pid, st),
        cgroup=cgroup,
        # A container's paths are inside its own filesystem, not the host's.
        log_dirs=() if container else log_dirs(proc, pid),
    )


# Where CANN writes a process's host-side logs (plog): the folder itself, and
# the work folder's log/. Set by the job, so the sleep hook, which reads the
# logs after resume, does not have them in its own environment.
_LOG_VARIABLES = ((b"ASCEND_PROCESS_LOG_PATH=", ""), (b"ASCEND_WORK_PATH=", "/log"))


def log_dirs(proc: ProcFS, pid: int) -> tuple[str, ...]:
    """The CANN log folders ``pid``'s environment names (the one it was started with),
    normalised, a relative one from its working folder; none when its environment cannot be
    read."""
    try:
        environ = proc.read(pid, "environ")
    except ProcAccessError:
        return ()
    found = []
    cwd: str | None = None
    for var in (environ or b"").split(b"\0"):
        for prefix, below in _LOG_VARIABLES:
            if var.startswith(prefix) and (path := os.fsdecode(var[len(prefix):])):
                if not path.startswith("/"):
                    cwd = proc.link(pid, "cwd") if cwd is None else cwd
                    if not cwd.startswith("/"):
                        continue  # its working folder unreadable, or not in this namespace
                    path = os.path.join(cwd, path)
                found.append(os.path.normpath(path + below))
    return tuple(dict.fromkeys(found))


def _kernel_thread(pid: int, ppid: int, flagged: bool, proc: ProcFS) -> bool:
    """status's Kthread:, else PF_KTHREAD in stat's flags (read for kthreadd's children)."""
    if flagged or not (ppid == 2 or (pid == 2 and ppid == 0)):
        return flagged
    stat = proc.read(pid, "stat") or b""
    fields = stat.rpartition(b")")[2].split()
    return len(fields) > 6 and fields[6].isdigit() and bool(int(fields[6]) & 0x00200000)


_STOPPED = ("T", "t")  # stopped (SIGSTOP, a job-control stop); stopped by a debugger
_EXITED = ("Z", "X")


def stopped_state(proc: ProcFS, pid: int, st: Stat) -> str:
    """What makes ``pid`` (``st``: its stat) stopped, "T" or "t"; "" when it is not.

    The main thread's state is the process's while it lives. Once it has
    exited (pthread_exit) it reads Z as long as the others run on, and a stop
    shows in theirs alone: the process is stopped when a live thread is.
    """
    if st.state not in _EXITED:
        return st.state if st.state in _STOPPED else ""
    at = proc.open_dir(pid)
    if at is None:
        return ""
    try:
        now = proc.stat(pid, at)
        if now is None or now.start_time != st.start_time:
            return ""  # another process has the PID by now
        states = set()
        for tid in proc.task_ids(at):
            thread = parse_stat(proc.read(pid, f"task/{tid}/stat", at) or b"")
            if thread is not None:
                states.add(thread.state)
    finally:
        os.close(at)
    return next((state for state in _STOPPED if state in states), "")


# What a SIGINT blocked in the main thread comes to, once every thread was looked at.
_BLOCKED_SIGINT: dict[Delivery, Disposition] = {"waited": "waited", "never": "blocked",
                                                "unknown": "unknown"}


def sigint_disposition(proc: ProcFS, pid: int, masks: SignalMasks,
                       leader_gone: bool = False) -> Disposition:
    """How ``pid`` takes SIGINT: its main thread's masks, and every thread's where that one
    blocks it or has exited.

    ``blocked`` means that no thread takes it and none waits for it (sigwait,
    a signalfd): kill -2 can never reach the process. ``leader_gone``: the
    main thread has exited (pthread_exit) while others live on; the kernel
    hands it no signal, so its mask (the one /proc/PID/status shows) says
    nothing of where a SIGINT can go.
    """
    disposition = masks.disposition(signal.SIGINT)
    if disposition != "blocked" and not (leader_gone and disposition != "ignored"):
        return disposition
    found = delivery(proc, pid, signal.SIGINT)
    if found == "deliverable":  # another thread takes it, as the handler says
        return replace(masks, blocked=0).disposition(signal.SIGINT)
    return _BLOCKED_SIGINT[found]


def stopped_since(proc: ProcFS, holders: Iterable[Holder]) -> dict[HolderId, str]:
    """The holders stopped since the scan, by state ("T"; "t": a debugger's stop): a signal
    would stay pending and end the job once continued, its suspend refused."""
    found = {holder_id(h): stopped_now(proc, h.pid, h.start_time) for h in holders}
    return {key: state for key, state in found.items() if state}


def stopped_now(proc: ProcFS, pid: int, start_time: int) -> str:
    """``stopped_state`` of the process ``pid`` started at ``start_time``; "" where it is gone,
    another's by now, or cannot be read."""
    try:
        st = proc.stat(pid)
        return stopped_state(proc, pid, st) if st is not None and st.start_time == start_time \
            else ""
    except ProcAccessError:
        return ""

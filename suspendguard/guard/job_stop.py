"""The drain's part of a job plan (guard/jobs.py): who is signalled, who forwards, who is held,
and the workers whose own veto a plan lifts (they are never signalled)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from suspendguard.guard.handles import Target, send, take
from suspendguard.guard.held import Held
from suspendguard.guard.jobs import Launcher, Plan
from suspendguard.guard.policy import stopped_reason
from suspendguard.model import Decision, Holder, HolderId, Outcome, holder_id
from suspendguard.system.boot import ticks_now
from suspendguard.system.procfs import ProcFS


@dataclass(frozen=True, slots=True)
class JobStop:
    """How the jobs behind the holders are stopped (guard/jobs.py's plan, for the drain).

    ``quiet``: holders the guard does not signal, and why they leave all the
    same; ``forward``: launchers that get the signal instead of their ranks
    (the ranks named), which the guard signals itself should the launcher be
    gone; ``hold``: launchers stopped meanwhile through ``held``.
    """

    quiet: Mapping[HolderId, str] = field(default_factory=dict)
    forward: Sequence[tuple[Launcher, Sequence[HolderId]]] = ()
    hold: Sequence[Launcher] = ()
    held: Held | None = None
    # Holders asked to stop their own way instead of a signal (a Jupyter kernel's
    # shutdown_request): each call, given the seconds left of the wait (ASK_MIN_S at least:
    # the ask takes no longer), returns "" once asked, else why not.
    asks: Mapping[HolderId, Callable[[float], str]] = field(default_factory=dict)
    asked_as: str = "a shutdown request"
    # The holders signalled that must leave before an ask is sent: a kernel's shutdown
    # SIGTERMs its process group's children at once, in their save (docs/ai-frameworks.md).
    after: Mapping[HolderId, frozenset[HolderId]] = field(default_factory=dict)
    # Holders an earlier attempt sent the signal and left running, quiet now: by attempt.
    earlier: Mapping[HolderId, int] = field(default_factory=dict)
    # Ranks an earlier round's forward reached (started before it), and launchers this run
    # sent the signal to forward (``forwarded``): quiet, never signalled.
    reached: Collection[HolderId] = ()
    # Launchers an earlier round sent the signal to forward that hold a node since.
    forwarded: Collection[HolderId] = ()

    def due(self, key: HolderId, running: Collection[HolderId]) -> bool:
        """Whether the ask of ``key`` may go now: none it waits for is ``running``."""
        return not self.after.get(key, frozenset()) & set(running)


NO_JOBS = JobStop()

# What an ask needs of the wait at least (a child started, the kernel's answer waited for): with
# less left it is not sent, since it would hold the wait past its end; its holder is not asked.
ASK_MIN_S = 1.0


# The vetoes of a holder the drain signal cannot end: none where it is a worker, never signalled.
SIGNAL_VETOES = frozenset({"veto-sigint-ignored", "veto-sigint-blocked"})


def still_saving(decisions: Sequence[Decision],
                 earlier: Collection[HolderId]) -> list[Decision]:
    """``decisions``, each holder vetoed for ignoring or blocking the signal drained instead
    where an earlier attempt of this boot reached it with the signal (``earlier``): its
    handler set the signal aside for its save. It gets none again, and is waited for."""
    return [replace(d, kind="drain", reason="")
            if d.kind in SIGNAL_VETOES and holder_id(d.holder) in earlier else d
            for d in decisions]


def launcher_stopped(decisions: Sequence[Decision],
                     plan_of: Callable[[Sequence[Decision]], Plan]) -> list[Decision]:
    """``decisions``, each rank whose launcher is stopped (SIGSTOP, a debugger) vetoed before
    anyone is signalled, where that makes the veto certain: a forwarding launcher's signal
    would stay pending and end the job when it continues; mpirun's ranks would save and
    then wait for it in MPI_Finalize."""
    plan = plan_of(decisions)
    out = []
    for d in decisions:
        found = plan.role(d.holder)
        launcher = found[1].launcher if found and found[0] in ("forwarded", "ranks") else None
        if launcher is None or not launcher.stopped:
            out.append(d)
        elif found and found[0] == "forwarded":
            out.append(replace(d, kind="veto-stopped", reason=stopped_reason(
                f"pid {d.holder.pid} {d.holder.comm} is a rank of {launcher.label}, which",
                launcher.pid, launcher.stopped)))
        elif launcher.kind.name == "mpirun":  # its ranks would save, then wait for it
            out.append(replace(d, kind="veto-stopped", reason=(
                f"pid {d.holder.pid} {d.holder.comm} is a rank of {launcher.label}, which is "
                f"stopped (state {launcher.stopped}): signalled, its ranks would save and then "
                "wait for it in MPI_Finalize, the job ended for a suspend refused all the same; "
                f"continue it (kill -CONT {launcher.pid}) or stop the job yourself, then "
                "suspend again")))
        else:
            out.append(d)
    return out


def spare_workers(decisions: Sequence[Decision],
                  plan_of: Callable[[Sequence[Decision]], Plan]) -> list[Decision]:
    """``decisions``, each holder vetoed for ignoring or blocking the signal drained instead
    where it is a worker of a job that is signalled: a DataLoader or pool worker set to
    ignore SIGINT (so that Ctrl-C reaches the main process alone) is never signalled, and
    leaves with its parent. Its veto stands where it is a job's root, or its root's is."""
    spared = {holder_id(d.holder) for d in decisions if d.kind in SIGNAL_VETOES}
    if not spared:
        return list(decisions)
    trial = [replace(d, kind="drain", reason="") if holder_id(d.holder) in spared else d
             for d in decisions]
    ways = plan_of(trial)
    kept = set()
    for key in spared:
        found = ways.role(next(d.holder for d in trial if holder_id(d.holder) == key))
        if found and found[0] == "worker" and not {holder_id(r) for r in found[1].roots} & spared:
            kept.add(key)
    return [t if holder_id(t.holder) in kept else d for d, t in zip(decisions, trial, strict=True)]


def forward(jobs: JobStop, targets: dict[int, Target], signame: str, proc: ProcFS,
            opener: Callable[[int], int], log: Callable[[str], None]
            ) -> tuple[frozenset[HolderId], dict[HolderId, int]]:
    """The signal to each forwarding launcher: the ranks that get it from the guard instead
    (their launcher could not be signalled), and the tick (ticks_now) before each launcher
    took it."""
    signum = int(signal.Signals[signame])
    by_id = {holder_id(t.holder): t for t in targets.values()}
    unforwarded: set[HolderId] = set()
    at: dict[HolderId, int] = {}
    for launcher, ranks in jobs.forward:
        now = ticks_now()  # a rank started in an earlier tick is one it forwards to
        own = by_id.get(launcher.id)
        if own is not None:
            # The launcher holds a node too: this is its one signal as a holder as well.
            refused = send(own, signum)
            own.sent = own.reached = refused is None
        else:
            stand_in = Holder(launcher.pid, launcher.start_time, 0, launcher.uid, "",
                              launcher.comm, "", (), None, None, (), (), launcher.sigint)
            taken = take(stand_in, signame, proc, opener)
            refused = taken if isinstance(taken, Outcome) else send(taken, signum)
            if isinstance(taken, Target):
                taken.close()
        if refused is None:
            at[launcher.id] = now
            log(f"sent {signame} to {launcher.label}, which forwards it to its "
                f"{len(ranks)} rank(s)")
            for rank in ranks:
                if rank in by_id:
                    by_id[rank].reached = True
            continue
        log(f"{launcher.label} could not be signalled ({refused.why}): its ranks get "
            f"{signame} from the guard")
        for rank in ranks:
            if rank in by_id:
                by_id[rank].quiet = ""
                unforwarded.add(rank)
    return frozenset(unforwarded), at

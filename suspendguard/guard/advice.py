"""What the guard says of a holder: what the drain did or would do, what it took before, what now.

The words of check's predictions and of the veto reasons a drain ends in,
by the shape of the job (guard/jobs.py's plan): a rank of a launcher that
forwards the signal is told apart from a plain process, a worker from its
parent. Pure functions of what the run knows; nothing here signals.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from suspendguard.guard import jobs
from suspendguard.guard.job_stop import JobStop
from suspendguard.guard.launchers import AGENT_KILL_S, AGENTS
from suspendguard.guard.ledger import Earlier
from suspendguard.guard.policy import drain_disposition
from suspendguard.model import Decision, Holder, HolderId, Outcome, Owner, holder_id
from suspendguard.system.procfs import ProcFS
from suspendguard.verdict import Reason


def unsignalled(decision: Decision) -> Outcome:
    """The outcome of a holder the decision leaves unsignalled."""
    signame = decision.signal
    why = {
        "leave": decision.rule,
        "protect": "protected",
        "veto-frozen": "frozen cgroup",
        "veto-stopped": "stopped",
        "veto-sigint-ignored": f"ignores {signame}",
        "veto-sigint-blocked": f"{signame} blocked in every thread",
        "veto-supervised": "its supervisor would start it again",
        "veto-unconfirmed": "not on the list that was confirmed",
        "veto-jupyter": "a Jupyter kernel: SIGINT would only interrupt its cell",
        "veto-never": decision.rule,
        "jupyter-shutdown": "a Jupyter kernel",
    }[decision.kind]
    return Outcome("not-signalled", why=why)


def predicted(decision: Decision) -> Outcome:
    """What a dry run says the drain signal would do to a holder it would signal."""
    signame = decision.signal
    never = "escalation follows" if decision.kind == "escalate" else "it stays pending"
    why = {
        "default": f"{signame} ends it (default action)",
        "caught": f"has a {signame} handler",
        "blocked": f"{signame} blocked in every thread and nothing waits for it; {never}",
        "waited": f"a thread waits for {signame} (sigwait or a signalfd)",
        "ignored": f"ignores {signame}; escalation follows",
        "unknown": f"{signame} disposition unknown",
    }[drain_disposition(decision.holder, signame)]
    return Outcome("would-signal", why=why)


def took_before(times: Sequence[float], wait: float) -> str:
    """"it took 4.2 s to exit after its signal before (the longest of 3 drains)", or ""."""
    if not times:
        return ""
    longest = max(times)
    over = f", more than its wait of {wait:g} s" if longest > wait else ""
    if len(times) == 1:
        return f"it took {longest:.1f} s to exit after its signal the last time{over}"
    return (f"it took up to {longest:.1f} s to exit after its signal in its last "
            f"{len(times)} drains{over}")


def prediction(d: Decision, plan: jobs.Plan, took: str, earlier: Earlier | None = None
               ) -> Outcome:
    """What the drain would do to ``d``'s holder, its job weighed, and what it took before;
    ``earlier``: the attempt that signalled it already (a worker it never reached)."""
    outcome = _prediction(d, plan)
    if earlier is not None and not outcome.why.startswith("not signalled"):
        outcome = Outcome("would-signal", why=(
            f"not signalled again: attempt {earlier.attempt_id} sent it {d.signal}; waited "
            "for, and a veto if it still runs at the end of the wait"))
    return replace(outcome, why=f"{outcome.why}; {took}") if took else outcome


def _prediction(d: Decision, plan: jobs.Plan) -> Outcome:
    if d.kind == "jupyter-shutdown":
        return Outcome("would-signal", why="a Jupyter kernel: would be asked to shut down "
                                           "on its control channel, never signalled")
    found = plan.role(d.holder)
    if found is None:
        return predicted(d)
    what, job = found
    if what == "worker":
        return Outcome("would-signal", why=f"not signalled: leaves with its parent, pid "
                                           f"{d.holder.ppid}")
    assert job.launcher is not None
    if what == "launcher" and job.held:
        return Outcome("would-signal", why=f"stopped (SIGSTOP) while its ranks leave, then sent "
                                           f"{d.signal} and continued")
    if what == "launcher":
        return Outcome("would-signal", why="not signalled: the launcher of its ranks, which the "
                                           "guard signals itself; it leaves once they left")
    if what == "forwarded" and job.launcher.sigint not in ("ignored", "blocked"):
        return Outcome("would-signal", why=f"gets {d.signal} from {job.launcher.label}, "
                                           "which the guard signals")
    why = predicted(d).why
    if what == "beyond" and job.launcher.sigint not in ("ignored", "blocked"):
        return Outcome("would-signal", why=f"{why}; {job.launcher.label} gets its own, which "
                                           "it forwards to its ranks alone")
    return Outcome("would-signal", why=f"{why}; {job.launcher.label} is stopped meanwhile"
                   if what == "held" else f"{why}; {job.launcher.label} is never signalled")


def timeout_remedy(d: Decision, plan: jobs.Plan, stop: JobStop,
                   running: Collection[HolderId] = (),
                   unforwarded: Collection[HolderId] = (), waited: float | None = None) -> str:
    """What to do about a holder still running at the timeout, by the shape of its job.

    ``running``: the holders this drain left running (a worker's parent among them);
    ``unforwarded``: ranks signalled by the guard because their launcher could not be;
    ``waited``: the wait the drain made (its holders' own, or less where it was cut).
    """
    h, signame = d.holder, d.signal
    if cells := sorted(k[0] for k in stop.after.get(holder_id(h), frozenset()) & set(running)):
        return (f"the Jupyter kernel was not asked to shut down: the processes its cells "
                f"started (pid {', '.join(map(str, cells))}) did not leave, and its shutdown "
                "would SIGTERM them; stop them, or shut the kernel down from its notebook, "
                "then suspend again")
    if holder_id(h) in stop.asks:  # one not asked for want of time left is no timeout (drain.py)
        return ("the Jupyter kernel took the shutdown request but had not exited by the end of "
                "the wait: a kernel busy in a cell exits only once the cell ends; interrupt or "
                "finish the cell from its notebook, then suspend again")
    if said := _settled(d, plan, stop, running):
        return said
    found = plan.role(h)
    raise_it = ("or give this job a longer wait ([[policy.drain]] with its uid and exe, and "
                "timeout_s)")
    if found is None:
        return f"stop it yourself (kill -TERM {h.pid}), or raise [drain] timeout_s"
    what, job = found
    if what == "launcher":
        return (f"the launcher of ranks the guard signalled, still running after them: stop it "
                f"yourself (kill -TERM {h.pid}) once they have saved, then suspend again")
    launcher = job.launcher
    assert launcher is not None
    if what == "forwarded" and holder_id(h) in unforwarded:
        return (f"{launcher.label} could not be signalled, so the guard sent {signame} to "
                f"this rank itself; the rank is still saving or stuck, and the launcher still "
                f"runs; {_stop_job(launcher, signame)}")
    if what == "forwarded" and holder_id(h) in stop.quiet:
        if launcher.kind in AGENTS and (d.wait_s if waited is None else waited) >= AGENT_KILL_S:
            return (f"{launcher.label} forwarded {signame} and SIGKILLs its ranks "
                    f"{AGENT_KILL_S:g} s later, so a longer wait cannot save this rank: make "
                    "its checkpoint shorter, or stop the job before suspending")
        if launcher.kind in AGENTS:
            return (f"{launcher.label} forwarded {signame}; the rank is still saving or "
                    f"stuck, and the launcher SIGKILLs it {AGENT_KILL_S:g} s after forwarding: "
                    f"a wait of {AGENT_KILL_S:g} s at most can still save it ([[policy.drain]] "
                    "with its uid and exe, and timeout_s), or stop the job yourself before "
                    "suspending")
        return (f"{launcher.label} forwarded {signame}; the rank is still saving or "
                f"stuck (in a collective, a rank that left first); {raise_it}, or stop "
                "the job yourself before suspending")
    if what == "held":  # continued at the drain's end, this rank or not
        now = ("stopped by its user: once continued" if launcher.stopped else
               "was stopped while its ranks left and is continued now:")
        return (f"a rank of {launcher.label}, which {now} it {launcher.kind.restarts}, so this "
                f"rank may not finish its save; {raise_it}, or stop the job yourself before "
                "suspending")
    return (f"a rank of {launcher.label}; the rank is still saving or stuck (in a "
            f"collective with a rank that left first); {raise_it}, or stop the job "
            "yourself before suspending")


def unsignalled_remedy(d: Decision, plan: jobs.Plan, stop: JobStop,
                       running: Collection[HolderId] = (),
                       forwarded: Collection[HolderId] = ()) -> str:
    """What to do about a holder the drain could not signal (no time was left, a refusal), by
    the shape of its job: the signal the drain would have sent, where it would have sent it,
    and none to one that had it already.

    ``running``: the holders this drain left running (a worker's parent among them);
    ``forwarded``: the launchers that took the signal to forward in this drain.
    """
    h, signame = d.holder, d.signal
    if said := _settled(d, plan, stop, running):
        return said
    kill = f"kill -{signame.removeprefix('SIG')}"
    if holder_id(h) in stop.reached:  # an earlier round's forward, or the launcher's own
        return (f"it had its {signame} earlier in this run, and none is sent again: wait for "
                "it to exit, or stop it yourself, then suspend again")
    found = plan.role(h)
    if found is None:
        return f"stop it yourself ({kill} {h.pid}), then suspend again"
    what, job = found
    launcher = job.launcher
    assert launcher is not None
    if what == "launcher":
        return (f"the launcher of ranks the guard signals itself, never signalled: stop its "
                f"ranks first, then it (kill -TERM {h.pid}) once they have saved, then suspend "
                "again")
    if what == "forwarded" and launcher.id in forwarded:
        return (f"{launcher.label} took {signame} to forward to its ranks, and none is sent "
                "again: wait for it to exit, or stop it yourself, then suspend again")
    if what == "forwarded" and launcher.sigint not in ("ignored", "blocked"):
        return (f"a rank of {launcher.label}, which forwards {signame} to each rank, this one "
                f"never signalled beside it: {_stop_job(launcher, signame)}")
    if what == "held":
        return (f"a rank of {launcher.label}, which {launcher.kind.restarts}: stop the job "
                f"yourself, the launcher stopped meanwhile (kill -STOP {launcher.pid}, {kill} "
                f"to each rank, kill -CONT {launcher.pid} once they left), then suspend again")
    # Those the guard signals itself, the launcher left alone: mpirun's, or out of reach of
    # the launcher's forward.
    whose = (f"below a rank of {launcher.label}, out of reach of the signal it forwards"
             if what == "beyond" else f"a rank of {launcher.label}, which "
             + (launcher.kind.restarts if what == "ranks" else f"{launcher.sigint} {signame}"))
    return f"{whose}: stop this rank yourself ({kill} {h.pid}), then suspend again"


def _settled(d: Decision, plan: jobs.Plan, stop: JobStop, running: Collection[HolderId]) -> str:
    """The advice for a holder that a signal of its own would not help, timed out or never
    signalled: one an earlier attempt signalled, a worker; "" for any other."""
    h = d.holder
    if (attempt := stop.earlier.get(holder_id(h))) is not None:
        return (f"attempt {attempt} sent it {d.signal}, and none is sent again: it is still "
                "saving or stuck; wait for it to exit, or stop it yourself, then suspend again")
    found = plan.role(h)
    if found is None or found[0] != "worker":
        return ""
    job = found[1]
    parent = next((p for p in (*job.roots, *job.workers) if p.pid == h.ppid), None)
    if parent is not None and holder_id(parent) in running:
        return (f"it is a worker of pid {h.ppid} {parent.comm}, which is still running "
                "too: it leaves with its parent, never signalled; see the parent's reason")
    return (f"it is a worker of pid {h.ppid} and did not leave with it: its parent "
            f"left it behind; stop it yourself (kill -TERM {h.pid})")


def _stop_job(launcher: jobs.Launcher, signame: str) -> str:
    """The job stopped through its launcher, which passes the signal on to its ranks."""
    return (f"stop the job yourself (kill -{signame.removeprefix('SIG')} {launcher.pid}), "
            "then suspend again")


def killed_by_agent(decisions: Sequence[Decision], plan: jobs.Plan,
                    outcomes: Mapping[HolderId, Outcome], stop: JobStop,
                    unforwarded: Collection[HolderId] = ()) -> list[str]:
    """A warning for each rank of an elastic agent that left only when the agent SIGKILLs
    its ranks, after it forwarded the signal: its save was likely cut short, though the
    exit lets the suspend go on. Only a rank whose signal was that forward (in ``stop.quiet``,
    not ``unforwarded``, nor an earlier attempt's)."""
    out = []
    for d in decisions:
        key = holder_id(d.holder)
        if key not in stop.quiet or key in unforwarded or key in stop.earlier:
            continue
        o = outcomes.get(key)
        found = plan.role(d.holder)
        if (o is None or o.kind != "exited" or o.seconds is None or found is None
                or found[0] != "forwarded" or found[1].launcher is None
                or found[1].launcher.kind not in AGENTS or o.seconds < AGENT_KILL_S - 0.5):
            continue
        out.append(f"pid {d.holder.pid} {d.holder.comm} left {o.seconds:.1f} s after "
                   f"{found[1].launcher.label} forwarded {d.signal}, when it SIGKILLs its ranks: "
                   "its save was likely cut short")
    return out


def still_launching(launcher: jobs.Launcher) -> Reason:
    """Why a launcher held while its ranks left, and still running once continued, vetoes."""
    return Reason("launcher-running", (
        f"{launcher.label} still ran after its ranks had left and it was continued: it may "
        "start them again (an elastic launcher restarts its ranks), after the guard looked; "
        f"stop the job yourself (kill -INT {launcher.pid}), then suspend again"),
        launcher.pid, launcher.comm)


def left_reason(h: Holder, respawned: bool, rounds: int, proc: ProcFS, *,
                held_before: bool = False) -> str:
    """Why a job still there after the last round vetoes: who restarted it, what to do.

    ``held_before``: the guard had seen it before, holding no compute node then.
    """
    if held_before:
        return (f"pid {h.pid} {h.comm} took a compute node after {rounds} drain round(s), "
                f"having held none when the guard looked: {h.command}; stop it, or suspend "
                "again later")
    head = (f"pid {h.pid} {h.comm} {'respawned' if respawned else 'appeared'} after "
            f"{rounds} drain round(s): {h.command}")
    if not respawned:
        return head + "; it started while the guard waited: stop it, or suspend again later"
    # A session scope is no supervisor: stopping it ends the whole login.
    if h.unit and not h.unit.endswith(".scope"):
        return (f"{head}; restarted by its supervisor, unit {h.unit}: stop the unit "
                f"(systemctl stop {h.unit}) before suspending")
    parent = proc.stat(h.ppid) if h.ppid > 1 else None
    name = f"pid {h.ppid} {parent.comm}" if parent is not None else f"pid {h.ppid}"
    return (f"{head}; restarted by its supervisor, parent {name}: stop the supervisor "
            "before suspending")


def via(owner: Owner) -> str:
    """Who keeps ``owner`` from starting its job again: its manager, or its engine."""
    if owner.kind == "user-service":
        return f"the manager of uid {owner.uid}"
    return {"docker": "the Docker engine", "podman": "Podman"}.get(owner.kind, "systemd")

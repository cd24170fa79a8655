"""The state of one guard run: its drain rounds, respawn rescans, owners kept down, reasons, warnings.

The drain goes in rounds: signal the holders, wait for their exits, rescan
for respawned jobs. A supervisor may restart a drained job, or a new job
may start while the guard waits: after each round the nodes are scanned
again, and whatever appeared goes through the policy and into the next
round, up to ``[drain] rounds``. What each holder came to, and every veto reason and
warning found on the way, is kept here for the report. What the run was
asked to do, and with what, is its :class:`RunOptions` (pipeline.run's keywords).
"""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from suspendguard.config import Config, IdleConfig
from suspendguard.guard import jobs, jupyter
from suspendguard.guard.drain import UNSIGNALLABLE, JobStop, drain
from suspendguard.guard.held import Held
from suspendguard.guard.identity import Token, vouch
from suspendguard.guard.owner import OwnerControl, owner_of_cgroup
from suspendguard.guard.policy import decide, predicted, rule_matches, unsignalled
from suspendguard.guard.scan import scan_holders
from suspendguard.idle.base import IdleReport
from suspendguard.model import (
    CONTAINER_KINDS,
    Decision,
    Holder,
    HolderId,
    Inventory,
    Outcome,
    Owner,
    holder_id,
)
from suspendguard.record import HolderRecord, Stop
from suspendguard.system import runner
from suspendguard.system.deadline import Cancel
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

# How long an unknown supervisor (a live parent) gets to restart a drained job
# before the rescan; a known one gets its own restart delay.
RESPAWN_GRACE_S = 0.5
# A supervisor's restart delay is waited for up to this long, plus a margin
# for the restarted job to open its nodes.
MAX_RESTART_WAIT_S = 5.0
RESTART_MARGIN_S = 0.2

# How long a Jupyter kernel gets to acknowledge its shutdown_request.
SHUTDOWN_ASK_S = 5.0

# The device asked: (its section, the families, when it must answer by) -> its report.
IdleCheck = Callable[[IdleConfig, Sequence[str], float], IdleReport]

# A holder's tag in the report ("respawned"), by holder; most have none.
Tags = Mapping[HolderId, str]
NO_TAGS: Tags = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What one guard run is asked to do, and the collaborators it does it with.

    pipeline.run's keywords, bundled once (``proc`` and ``log`` resolved)
    for the run and its state.
    """

    dry_run: bool
    action: str | None  # the sleep action guarded; None from a shell
    origin: str  # who ran it: "unit", "cli", "status", ...
    proc: ProcFS
    idle_check: IdleCheck | None  # None: no device is asked
    log: Logger
    cancel: Cancel | None
    record: bool  # into the history
    skip_frozen: bool
    can_veto: bool
    clock: Callable[[], float]
    # How owners are read and stopped (None: cgroups only, every holder signalled directly).
    supervisors: OwnerControl | None
    # The holders ``drain`` showed and had confirmed; None: no such list (the unit, --yes).
    confirmed: frozenset[HolderId] | None


class RunState:
    """One guard run's state: what each holder came to, the owners kept down (``stops``),
    every veto reason and warning found so far; and the drain that changes them."""

    def __init__(self, config: Config, options: RunOptions, *, never: frozenset[int],
                 deadline: float, token: Token | None = None) -> None:
        self.config = config
        self.options = options
        # This run's open guard.lock: another run's probe is its child only if
        # its parent holds the same file (guard/identity.py).
        self.token = token
        self.never = never
        self.deadline = deadline
        self.signame = config.drain.signal
        self.reasons: list[str] = []
        self.warnings: list[str] = []
        self.results: dict[HolderId, HolderRecord] = {}
        # Called with the holders about to be signalled, before the signal
        # (the pipeline writes them to the history).
        self.before_signal: Callable[[Sequence[Decision], int], None] = lambda _d, _r: None
        # Called with the stops about to be asked of the supervisors, before
        # they are, and with the supervisors' answers (the pipeline writes
        # them ahead to the history, then completes them).
        self.before_stop: Callable[[Sequence[Stop]], None] = lambda _s: None
        self.after_stop: Callable[[Sequence[Stop], Mapping[str, str]], None] = \
            lambda _s, _a: None
        self.owners: dict[HolderId, Owner] = {}
        self.stops: list[Stop] = []  # owners kept down for the drain, in order
        self._through: set[HolderId] = set()
        self._unreached: set[str] = set()  # containers whose engine did not answer, warned once
        self.kernels: dict[HolderId, jupyter.JupyterKernel | None] = {}
        self._plans: dict[frozenset[HolderId], jobs.Plan] = {}
        # The same job's earlier drain times, newest first (the history's; none without one).
        self.drain_times: Callable[[Holder], tuple[float, ...]] = lambda _h: ()

    @property
    def cancelled(self) -> bool:
        return self.options.cancel is not None and self.options.cancel.cancelled

    @property
    def cancel_reason(self) -> str:
        return self.options.cancel.reason if self.options.cancel else ""

    def owner(self, holder: Holder) -> Owner:
        key = holder_id(holder)
        if key not in self.owners:
            control = self.options.supervisors
            self.owners[key] = (control.owner(holder) if control is not None
                                else owner_of_cgroup(holder.cgroup))
        return self.owners[key]

    def decide(self, holders: Iterable[Holder], respawned: Collection[HolderId] = ()) -> list[Decision]:
        holders = list(holders)
        decisions = decide(holders, self.config.policy, self.config.drain, never_pids=self.never,
                           skip_frozen=self.options.skip_frozen, respawned=respawned,
                           vouched=vouch(holders, self.options.proc, self.token))
        decisions = [self._jupyter(self._confirmed(self._pod(d))) for d in decisions]
        plan = self.plan(decisions)
        return [replace(d, notes=(*d.notes, note)) if (note := plan.note(d.holder)) else d
                for d in decisions]

    def timeout_for(self, holder: Holder) -> float:
        """The wait after the signal this holder is given: its [[policy.drain]] rule's, or
        [drain] timeout_s."""
        for rule in self.config.policy.drain:
            if rule_matches(rule.match, holder):
                return rule.timeout_s
        return self.config.drain.timeout_s

    def kernel(self, holder: Holder) -> jupyter.JupyterKernel | None:
        key = holder_id(holder)
        if key not in self.kernels:
            self.kernels[key] = jupyter.kernel_of(holder, self.options.proc)
        return self.kernels[key]

    def _jupyter(self, d: Decision) -> Decision:
        """A Jupyter kernel is never sent SIGINT: veto naming it, or ask it to shut down.

        An idle kernel ignores SIGINT by design: it is a kernel, not a job
        started wrong, and the advice is the kernel's.
        """
        if not (d.signals or d.kind in ("veto-sigint-ignored", "veto-sigint-blocked")):
            return d
        kernel = self.kernel(d.holder)
        if kernel is None:
            return d
        if self.config.drain.jupyter == "shutdown":
            return replace(d, kind="jupyter-shutdown", notes=(*d.notes, (
                "a Jupyter kernel: asked to shut down on its own control channel "
                "([drain] jupyter = \"shutdown\"), never signalled")))
        return replace(d, kind="veto-jupyter", reason=jupyter.describe(kernel))

    def plan(self, decisions: Sequence[Decision]) -> jobs.Plan:
        """The jobs behind the holders these decisions signal (guard/jobs.py).

        Made once per batch: the decision, the dry run's word and the drain
        read the same plan, and the walk up /proc is not made again.
        """
        holders = [d.holder for d in decisions if d.signals and d.kind != "jupyter-shutdown"]
        key = frozenset(holder_id(h) for h in holders)
        if key not in self._plans:
            self._plans[key] = jobs.plan(holders, self.options.proc, self.config.drain.launchers,
                                         never=self.never, signum=signal.Signals[self.signame])
        return self._plans[key]

    def job_stop(self, plan: jobs.Plan, held: Held | None,
                 kernels: Sequence[Holder] = ()) -> JobStop:
        """The drain's part of ``plan``: who is not signalled, who forwards, who is stopped."""
        quiet: dict[HolderId, str] = {}
        forward = []
        hold = []
        for job in plan.jobs:
            for w in job.workers:
                quiet[holder_id(w)] = f"left with its parent, pid {w.ppid}"
            launcher = job.launcher
            if launcher is None:
                continue
            if job.forwarded and launcher.sigint not in ("ignored", "blocked"):
                forward.append((launcher, [holder_id(r) for r in job.roots]))
                for r in job.roots:
                    quiet[holder_id(r)] = f"after the {self.signame} {launcher.label} forwarded"
            elif job.forwarded:
                self.warnings.append(
                    f"{launcher.label} {launcher.sigint} {self.signame}: its ranks get it from "
                    "the guard instead, and the launcher may act on them as they leave")
            elif job.held and held is not None:
                hold.append(launcher)
        asks = {holder_id(h): self._shutdown(kernel) for h in kernels
                if (kernel := self.kernel(h)) is not None}
        return JobStop(quiet, forward, hold, held, asks, "a Jupyter shutdown_request")

    def _shutdown(self, kernel: jupyter.JupyterKernel) -> Callable[[], str]:
        def ask() -> str:
            return jupyter.request_shutdown(kernel, SHUTDOWN_ASK_S) or ""
        return ask

    def _confirmed(self, d: Decision) -> Decision:
        """From a shell, only the holders the operator was shown and confirmed are signalled."""
        confirmed = self.options.confirmed
        if not d.signals or confirmed is None or holder_id(d.holder) in confirmed:
            return d
        h = d.holder
        return replace(d, kind="veto-unconfirmed", reason=(
            f"pid {h.pid} {h.comm} appeared after the list was confirmed: not signalled "
            "(run drain again to be asked about it)"))

    def _pod(self, d: Decision) -> Decision:
        """Owners the guard cannot bring back after resume: veto, unless told otherwise.

        A pod's container comes back whatever the node does; a transient
        user unit is gone once its job ended, and (unlike a system one) is
        not made again. Said before anyone is signalled.
        """
        owner = self.owner(d.holder)
        if not d.signals:
            return d
        if owner.kind == "kubernetes" and self.config.policy.kubernetes == "veto":
            return replace(d, kind="veto-supervised", reason=(
                f"pid {d.holder.pid} {d.holder.comm} is held by a Kubernetes pod (uid "
                f"{owner.name}): cordon and drain this node before suspending"))
        if owner.kind == "user-service" and owner.transient and \
                self.config.restore.transient == "veto":
            return replace(d, kind="veto-supervised", reason=(
                f"pid {d.holder.pid} {d.holder.comm} runs in {owner.describe()}, a transient "
                "unit that cannot be made again after resume: stop it yourself, or set "
                '[restore] transient = "drain"'))
        return d

    def record(self, d: Decision, outcome: Outcome, round_no: int, tags: Tags = NO_TAGS) -> None:
        self.results[holder_id(d.holder)] = HolderRecord(d, outcome, round_no,
                                                         tags.get(holder_id(d.holder), ""),
                                                         self.owner(d.holder))

    def settle(self, decisions: Sequence[Decision], round_no: int, tags: Tags = NO_TAGS) -> list[Decision]:
        """Record the holders not to signal, with their reasons; return those to signal."""
        to_signal = []
        for d in decisions:
            if d.signals:
                to_signal.append(d)
                continue
            if d.vetoes:
                self.reasons.append(d.reason)
            elif d.reason:
                self.warnings.append(d.reason)
            self.record(d, unsignalled(d, self.signame), round_no, tags)
        return to_signal

    def admit(self, decisions: Sequence[Decision], vetoed: bool = False) -> list[Decision]:
        """Settle a batch found outside the rounds (the scan, the device); return those to signal now.

        When the batch holds a veto (or ``vetoed``: one is already certain),
        or in a dry run, nobody is signalled: each holder that would have
        been says why not, or what the signal would do.
        """
        to_signal = self.settle(decisions, 1)
        vetoed = vetoed or any(d.vetoes for d in decisions)
        if not (vetoed or self.options.dry_run):
            return to_signal
        plan = self.plan(to_signal)
        for d in to_signal:
            self.record(d, Outcome("not-signalled", why="veto anyway: nobody is signalled")
                        if vetoed else self._predicted(d, plan), 1)
        return []

    def _predicted(self, d: Decision, plan: jobs.Plan) -> Outcome:
        """What the drain would do to ``d``'s holder, its job weighed, and what it took before."""
        outcome = self._predicted_now(d, plan)
        took = self.took_before(d.holder)
        return replace(outcome, why=f"{outcome.why}; {took}") if took else outcome

    def took_before(self, h: Holder) -> str:
        """"it took 4.2 s to exit after its signal before (the longest of 3 drains)", or ""."""
        times = self.drain_times(h)
        if not times:
            return ""
        wait = self.timeout_for(h)
        longest = max(times)
        over = f", more than its wait of {wait:g} s" if longest > wait else ""
        if len(times) == 1:
            return f"it took {longest:.1f} s to exit after its signal the last time{over}"
        return (f"it took up to {longest:.1f} s to exit after its signal in its last "
                f"{len(times)} drains{over}")

    def _predicted_now(self, d: Decision, plan: jobs.Plan) -> Outcome:
        if d.kind == "jupyter-shutdown":
            return Outcome("would-signal", why="a Jupyter kernel: would be asked to shut down "
                                               "on its control channel, never signalled")
        found = plan.role(d.holder)
        if found is None:
            return predicted(d, self.signame)
        what, job = found
        if what == "worker":
            return Outcome("would-signal", why=f"not signalled: leaves with its parent, pid "
                                               f"{d.holder.ppid}")
        assert job.launcher is not None
        if what == "forwarded" and job.launcher.sigint not in ("ignored", "blocked"):
            return Outcome("would-signal", why=f"gets {self.signame} from {job.launcher.label}, "
                                               "which the guard signals")
        why = predicted(d, self.signame).why
        return Outcome("would-signal", why=f"{why}; {job.launcher.label} is stopped meanwhile"
                       if what == "held" else f"{why}; {job.launcher.label} is never signalled")

    def signal(self, decisions: Sequence[Decision], reserve: float, round_no: int = 1,
               tags: Tags = NO_TAGS) -> bool:
        """Signal these holders and wait for them, leaving ``reserve`` seconds of the deadline.

        True when none of them is still running.
        """
        until = max(self.options.clock() + 0.5, self.deadline - reserve)
        cfg = self.config.drain
        self.before_signal(decisions, round_no)
        opts = self.options
        plan = self.plan(decisions)
        stop = self.job_stop(plan, Held(self.config.state.dir, opts.proc),
                             [d.holder for d in decisions if d.kind == "jupyter-shutdown"])
        timeout_s = max(self.timeout_for(d.holder) for d in decisions)
        result = drain([d.holder for d in decisions], self.signame, timeout_s, until,
                       cfg.escalate, proc=opts.proc, cancel=opts.cancel, log=opts.log.info,
                       clock=opts.clock, keep=self._keep_down if opts.supervisors else None,
                       jobs=stop)
        if stop.held is not None:
            self.warnings.extend(stop.held.warnings)
        if result.shortened:
            self.warnings.append(
                f"the drain wait was cut to {result.wait_s:.1f} s (of [drain] timeout_s = "
                f"{timeout_s:g}) to end within [drain] deadline_s = {cfg.deadline_s:g}")
        for d in decisions:
            outcome = result.outcomes[holder_id(d.holder)]
            self.record(d, outcome, round_no, tags)
            if outcome.kind == "not-signalled" and outcome.why.startswith(UNSIGNALLABLE):
                h = d.holder
                self.reasons.append(f"pid {h.pid} {h.comm} {outcome.why}: it still holds "
                                    f"the device; stop it yourself (kill -INT {h.pid})")
            elif outcome.kind == "timeout":
                h = d.holder
                by = f" (reported by {h.source})" if h.source != "proc" else ""
                if holder_id(h) in self._through:
                    o = self.owner(h)
                    by += f" ({o.name[:12] if o.kind != 'systemd-service' else o.name}, " \
                          f"kept from restarting by {_via(o)})"
                cut = " (the wait was cut short by the deadline)" if result.shortened else ""
                took = self.took_before(h)
                self.reasons.append(f"pid {h.pid} {h.comm}{by} {outcome.why}{cut}"
                                    + (f" ({took})" if took else "") + ": "
                                    + self._timeout_remedy(h, plan, stop))
        return not any(o.kind == "timeout" or o.why.startswith(UNSIGNALLABLE)
                       for o in result.outcomes.values())

    def _timeout_remedy(self, h: Holder, plan: jobs.Plan, stop: JobStop) -> str:
        """What to do about a holder still running at the timeout, by the shape of its job."""
        if holder_id(h) in stop.asks:
            return ("the Jupyter kernel took the shutdown request but is still busy in a cell: "
                    "it exits once the cell ends; interrupt or finish the cell from its "
                    "notebook, then suspend again")
        found = plan.role(h)
        raise_it = ("or give this job a longer wait ([[policy.drain]] with its uid and exe, and "
                    "timeout_s)")
        if found is None:
            return f"stop it yourself (kill -TERM {h.pid}), or raise [drain] timeout_s"
        what, job = found
        if what == "worker":
            return (f"it is a worker of pid {h.ppid} and did not leave with it: its parent "
                    f"left it behind; stop it yourself (kill -TERM {h.pid})")
        launcher = job.launcher
        assert launcher is not None
        if what == "forwarded" and holder_id(h) in stop.quiet:
            if launcher.kind.name == "torchrun" and self.timeout_for(h) >= 30:
                return (f"{launcher.label} forwarded {self.signame} and SIGKILLs its ranks "
                        "30 s later, so a longer wait cannot save this rank: make its "
                        "checkpoint shorter, or stop the job before suspending")
            return (f"{launcher.label} forwarded {self.signame}; the rank is still saving or "
                    f"stuck (in a collective, a rank that left first); {raise_it}, or stop "
                    "the job yourself before suspending")
        return (f"a rank of {launcher.label}; the rank is still saving or stuck (in a "
                f"collective with a rank that left first); {raise_it}, or stop the job "
                "yourself before suspending")

    def _keep_down(self, holders: Sequence[Holder]) -> None:
        """Before the signal: ask each holder's supervisor not to start it again.

        The guard signals every holder itself; the supervisor is asked only
        to keep the job down until restore (and is then asked to start it).
        """
        control = self.options.supervisors
        assert control is not None
        owners = {}
        for h in holders:
            o = self.owner(h)
            if (o.kind in ("systemd-service", "user-service")
                    and o.activity in ("active", "activating", "reloading")) \
                    or (o.kind in ("docker", "podman") and o.activity == "running"):
                owners[o.key] = o
            elif o.kind in ("docker", "podman") and not o.activity and o.key not in self._unreached:
                self._unreached.add(o.key)
                self.warnings.append(
                    f"{o.describe()}: the container engine could not be reached ({o.note}); "
                    "its processes were signalled directly, and the container's restart policy "
                    "may bring it back")
        if not owners:
            return
        planned = {o.key: Stop(o, len(self.stops) + i, time.time())
                   for i, o in enumerate(owners.values(), 1)}
        self.before_stop(list(planned.values()))
        answers = control.stop(list(owners.values()), self.signame, self.config.drain.timeout_s)
        self.after_stop(list(planned.values()), answers)
        ok = set()
        for key, why in answers.items():
            o = owners[key]
            if why:
                self.warnings.append(f"{o.name}: could not keep it from restarting through "
                                     f"{_via(o)} ({why}); its processes were signalled "
                                     "directly all the same")
                continue
            ok.add(key)
            self.stops.append(planned[key])
            raised = "" if o.kind in CONTAINER_KINDS or not (
                0 < o.timeout_stop_s < self.config.drain.timeout_s) else \
                f" (its TimeoutStopSec={o.timeout_stop_s:g}s raised to [drain] timeout_s)"
            self.options.log.info(f"keeping {o.describe()} down through {_via(o)} until restore"
                          f"{raised}; its holders get {self.signame} from the guard")
        self._through |= {holder_id(h) for h in holders if self.owner(h).key in ok}

    def drain(self, first: list[Decision], seen: set[HolderId], inventory: Inventory,
              reserve: float) -> None:
        """Drain ``first``, then whatever appears in its place, round after round."""
        pending = first
        round_no = 1
        tags: Tags = NO_TAGS
        parents = {d.holder.ppid for d in first if d.holder.ppid > 1}
        units = {d.holder.unit for d in first if d.holder.unit}
        while pending:
            if self.cancelled:
                for d in pending:
                    self.record(d, Outcome("not-signalled", why=self.cancel_reason), round_no)
                return
            if not self.signal(pending, reserve, round_no, tags) or self.cancelled:
                return
            self.respawn_grace(pending)
            control = self.options.supervisors
            if self.stops and control is not None:
                back = control.settle(self.stops, self.deadline)
                self.warnings.extend(control.take_warnings())
                if back:
                    self.reasons.extend(back)
                    return
            # Rescan: a supervisor may have restarted the job, or a new one started.
            # fds only: a restarted job opens its nodes first; a mapping
            # without an fd comes later in a job's life. This keeps the step
            # between the last exit and the verdict short.
            rescan = scan_holders(inventory, self.options.proc, exclude=runner.active_children(), maps=False)
            new = [h for h in rescan.holders if holder_id(h) not in seen]
            seen.update(holder_id(h) for h in new)
            tags = {
                holder_id(h): "respawned" for h in new
                if (h.ppid > 1 and h.ppid in parents) or (h.unit and h.unit in units)
            }
            parents |= {h.ppid for h in new if h.ppid > 1}
            units |= {h.unit for h in new if h.unit}
            round_no += 1
            decisions = self.decide(new, respawned=tags)
            pending = self.settle(decisions, round_no, tags)
            for d in pending:
                self.record(d, Outcome("not-signalled", why="appeared during the drain"),
                            round_no, tags)
            if any(d.vetoes for d in decisions):
                return  # certain veto now: signal nobody else
            if pending and round_no > self.config.drain.rounds:
                for d in pending:
                    self.reasons.append(self.left_reason(d.holder, holder_id(d.holder) in tags))
                return

    def left_reason(self, h: Holder, respawned: bool) -> str:
        """Why a job still there after the last round vetoes: who restarted it, what to do."""
        head = (f"pid {h.pid} {h.comm} {'respawned' if respawned else 'appeared'} after "
                f"{self.config.drain.rounds} drain round(s): {h.command}")
        if not respawned:
            return head + "; it started while the guard waited: stop it, or suspend again later"
        # A session scope is no supervisor: stopping it ends the whole login.
        if h.unit and not h.unit.endswith(".scope"):
            return (f"{head}; restarted by its supervisor, unit {h.unit}: stop the unit "
                    f"(systemctl stop {h.unit}) before suspending")
        parent = self.options.proc.stat(h.ppid) if h.ppid > 1 else None
        name = f"pid {h.ppid} {parent.comm}" if parent is not None else f"pid {h.ppid}"
        return (f"{head}; restarted by its supervisor, parent {name}: stop the supervisor "
                "before suspending")

    def respawn_grace(self, drained: Sequence[Decision]) -> None:
        """Give a supervisor a moment to restart what it supervised before the rescan.

        A job signalled around a supervisor that restarts it (a service
        whose stop through systemd failed, a container with a restart
        policy) gets that supervisor's own restart delay; a job whose parent
        is still there and could restart it (not init, not the guard itself,
        whose children are supervised by nobody else) gets RESPAWN_GRACE_S.
        A job whose supervisor keeps it down is not restarted by it; what
        else may bring it back is looked at afterwards (ManagersAndEngines.settle).
        A container with a restart policy, set aside through its engine, gets
        its restart delay all the same: an engine that starts it again
        anyway (or a watcher beside it) is caught by the look that follows.
        """
        wait = 0.0
        for d in drained:
            owner = self.owner(d.holder)
            through = holder_id(d.holder) in self._through
            if not owner.restarts or (through and owner.kind not in CONTAINER_KINDS):
                continue
            wait = max(wait, min(MAX_RESTART_WAIT_S, owner.restart_delay_s) + RESTART_MARGIN_S)
        parents = {d.holder.ppid for d in drained
                   if holder_id(d.holder) not in self._through} - self.never - {0, 1}
        if any(self.options.proc.exists(p) for p in parents):
            wait = max(wait, RESPAWN_GRACE_S)
        if wait <= 0:
            return
        wait = min(wait, max(0.0, self.deadline - self.options.clock()))
        if self.options.cancel is not None:
            select.select([self.options.cancel.fd], [], [], wait)
        else:
            time.sleep(wait)


def _via(owner: Owner) -> str:
    if owner.kind == "user-service":
        return f"the manager of uid {owner.uid}"
    return {"docker": "the Docker engine", "podman": "Podman"}.get(owner.kind, "systemd")

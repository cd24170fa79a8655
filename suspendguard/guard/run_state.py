"""The state of one guard run: what each holder came to, and the owners kept down.

Every holder found goes through :meth:`RunState.decide` (the policy, then what only
the run can tell: a pod, a transient unit, a Jupyter kernel, a list the operator
confirmed), then :meth:`RunState.settle` (those not to signal are recorded, their reasons
returned) and :meth:`RunState.signal`, called by the rounds (guard/rounds.py) and the
pipeline; what the run found goes out as :class:`Said` values, never through lists
another module appends to. What the run was asked to do is :class:`RunOptions`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from suspendguard.config import DrainConfig, IdleConfig, PolicyConfig
from suspendguard.guard import advice, jobs, jupyter, jupyter_ask
from suspendguard.guard.describe import stopped_since
from suspendguard.guard.drain import MIN_WAIT_S, VETO_ANYWAY, drain
from suspendguard.guard.handles import UNSIGNALLABLE
from suspendguard.guard.held import Held
from suspendguard.guard.identity import Token, vouch
from suspendguard.guard.job_stop import SIGNAL_VETOES, JobStop, launcher_stopped, spare_workers, still_saving
from suspendguard.guard.ledger import NO_LEDGER, Earlier, Ledger
from suspendguard.guard.left_running import left_running, stopped_veto
from suspendguard.guard.policy import decide
from suspendguard.guard.said import NOTHING, Said
from suspendguard.idle.base import IdleReport
from suspendguard.model import Decision, Holder, HolderId, Outcome, Owner, holder_id
from suspendguard.record import HolderRecord, Stop
from suspendguard.supervise.owner import OwnerControl, owner_of_cgroup
from suspendguard.system.deadline import Deadline
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

# How long a Jupyter kernel gets to acknowledge its shutdown_request.
SHUTDOWN_ASK_S = 5.0

# The device asked: (its section, the families, the deadline it answers by) -> its report.
IdleCheck = Callable[[IdleConfig, Sequence[str], Deadline], IdleReport]

# A holder's tag in the report ("respawned"), by holder; most have none.
Tags = Mapping[HolderId, str]
NO_TAGS: Tags = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What one guard run is asked to do, and the collaborators it does it with:
    pipeline.run's keywords, bundled once (``proc`` and ``log`` resolved)."""

    dry_run: bool
    action: str | None  # the sleep action guarded; None from a shell
    origin: str  # who ran it: "unit", "cli", "status", ...
    proc: ProcFS
    idle_check: IdleCheck | None  # None: no device is asked
    log: Logger
    record: bool  # into the history
    # How owners are read and stopped (None: cgroups only, every holder signalled directly).
    supervisors: OwnerControl | None
    # The holders ``drain`` showed and had confirmed; None: no such list (the unit, --yes).
    confirmed: frozenset[HolderId] | None


class RunState:
    """One guard run's state: what each holder came to and the owners kept down (``stops``);
    and the signal that changes them. What each step finds (veto reasons, warnings) it returns
    as a :class:`Said`; the state holds none.

    It holds the sections it decides and drains by, and no other: ``policy``, ``drain``,
    ``[restore] transient`` and the state folder (where a stopped launcher is written down).
    ``deadline``: the run's one clock, its end and the guard's own cancel. ``ledger``: the
    history the run writes ahead in and reads earlier drain times and signals from.
    """

    def __init__(self, policy: PolicyConfig, drain: DrainConfig, options: RunOptions, *,
                 transient: str, state_dir: str, never: frozenset[int],
                 deadline: Deadline, token: Token | None = None,
                 ledger: Ledger = NO_LEDGER) -> None:
        self.policy = policy
        self.drain = drain
        self.transient = transient
        self.state_dir = state_dir
        self.options = options
        self.token = token  # the open guard.lock a probe's parent holds (guard/identity.py)
        self.never = never
        self.deadline = deadline
        self.ledger = ledger
        self.results: dict[HolderId, HolderRecord] = {}
        self.owners: dict[HolderId, Owner] = {}
        self.stops: list[Stop] = []  # owners kept down for the drain, in order
        self.through: set[HolderId] = set()  # holders whose supervisor keeps them down
        self._kernels: dict[HolderId, jupyter.JupyterKernel | None] = {}
        self._plans: dict[frozenset[HolderId], jobs.Plan] = {}
        self._forwarded: set[HolderId] = set()  # launchers given the signal: once a run
        self._forwarded_at: dict[HolderId, int] = {}  # when each took it (a start time's ticks)
        self.earlier: dict[HolderId, Earlier] = {}  # signalled before, still saving: never again

    @property
    def cancelled(self) -> bool:
        return self.deadline.cancelled

    def owner(self, holder: Holder) -> Owner:
        key = holder_id(holder)
        if key not in self.owners:
            control = self.options.supervisors
            self.owners[key] = (control.owner(holder) if control is not None
                                else owner_of_cgroup(holder.cgroup))
        return self.owners[key]

    def decide(self, holders: Iterable[Holder], respawned: Collection[HolderId] = ()) -> list[Decision]:
        holders = list(holders)
        decisions = decide(holders, self.policy, self.drain, never_pids=self.never,
                           respawned=respawned, vouched=vouch(holders, self.options.proc,
                                                               self.token))
        decisions = [self._by_run(d) for d in decisions]
        self.earlier.update(self.ledger.signalled_before(
            [d.holder for d in decisions if d.signals or d.kind in SIGNAL_VETOES]))
        decisions = spare_workers(still_saving(decisions, self.earlier.keys()
                                               | self._forwarded_at.keys()), self.plan)
        decisions = jupyter_ask.busy_cells(launcher_stopped(decisions, self.plan), self.plan,
                                           self.kernel, self.options.proc)
        plan = self.plan(decisions)
        return [replace(d, notes=(*d.notes, *notes)) if (notes := self._notes(d, plan)) else d
                for d in decisions]

    def _by_run(self, d: Decision) -> Decision:
        """What only the run can tell of one decision, in this order. The owner first: a
        pod's veto names the pod, not the kernel in it. Then a Jupyter kernel, which may turn
        a veto (an idle kernel ignores SIGINT) into a shutdown request that acts: the owner
        is asked again of that one. The confirmed list last, so that nothing that acts,
        however it acts, passes without the operator's yes."""
        return self._confirmed(self._pod(self._jupyter(self._pod(d))))

    def _notes(self, d: Decision, plan: jobs.Plan) -> list[str]:
        """The notes the job's plan, and an earlier attempt's signal, add to ``d`` (a worker
        was never sent one)."""
        role = plan.role(d.holder)
        earlier = (self.earlier.get(holder_id(d.holder))
                   if d.signals and (role is None or role[0] != "worker") else None)
        return [n for n in (plan.note(d.holder), earlier and earlier.note(d.signal)) if n]

    def took_before(self, d: Decision) -> str:
        return advice.took_before(self.ledger.drain_times(d.holder), d.wait_s)

    def kernel(self, holder: Holder) -> jupyter.JupyterKernel | None:
        key = holder_id(holder)
        if key not in self._kernels:
            self._kernels[key] = jupyter.kernel_of(holder, self.options.proc)
        return self._kernels[key]

    def _jupyter(self, d: Decision) -> Decision:
        """A Jupyter kernel is never sent SIGINT: veto naming it, or ask it to shut down; a veto
        too, before anyone is signalled, where the ask is certain to fail. An idle kernel
        ignores SIGINT by design: a kernel, not a job started wrong; the advice is its own."""
        if not (d.signals or d.kind in ("veto-sigint-ignored", "veto-sigint-blocked")):
            return d
        if (kernel := self.kernel(d.holder)) is None:
            unread = jupyter.unread_kernel(d.holder, self.options.proc)
            return replace(d, kind="veto-jupyter", reason=unread) if unread else d
        cannot = jupyter_ask.cannot_ask(kernel) if self.drain.jupyter == "shutdown" else None
        if cannot == "":
            return replace(d, kind="jupyter-shutdown", notes=(*d.notes, (
                "a Jupyter kernel: asked to shut down on its own control channel "
                "([drain] jupyter = \"shutdown\"), never signalled")))
        return replace(d, kind="veto-jupyter", reason=jupyter.describe(kernel, cannot or ""))

    def plan(self, decisions: Sequence[Decision]) -> jobs.Plan:
        """The jobs behind the holders these decisions signal (guard/jobs.py). Made once per
        batch: the decision, the dry run's word and the drain read the same plan, and the walk
        up /proc is not made again."""
        holders = [d.holder for d in decisions if d.signals]
        # A kernel asked to shut down is no rank of a launcher, but its forked
        # children are its workers: they leave with it.
        asked = frozenset(holder_id(d.holder) for d in decisions
                          if d.signals and d.kind == "jupyter-shutdown")
        key = frozenset(holder_id(h) for h in holders)
        if key not in self._plans:
            self._plans[key] = jobs.plan(holders, self.options.proc, self.drain.launchers,
                                         never=self.never, signum=signal.Signals[self.drain.signal],
                                         asked=asked)
        return self._plans[key]

    def job_stop(self, plan: jobs.Plan, held: Held | None,
                 kernels: Sequence[Holder] = ()) -> tuple[JobStop, Said]:
        """The drain's part of ``plan``: who is not signalled, who forwards, who is stopped;
        and a warning for each launcher that would forward the signal but does not take it."""
        signame = self.drain.signal
        quiet: dict[HolderId, str] = {}
        forward = []
        hold = []
        reached: list[HolderId] = []
        said = NOTHING
        for job in plan.jobs:
            for w in job.workers:
                quiet[holder_id(w)] = f"left with its parent, pid {w.ppid}"
            launcher = job.launcher
            if launcher is None:
                continue
            if job.forwarded and launcher.stopped:
                continue  # by its user: its ranks veto (launcher_stopped), it gets nothing
            if job.forwarded and (launcher.id in self._forwarded
                                  or any(key in self.earlier for key in job.reached)):
                # A rank started before it forwarded (an earlier attempt's: that attempt began)
                # had the forward; one started since gets the guard's own signal.
                at = self._forwarded_at.get(launcher.id, min(
                    (self.earlier[key].ticks() for key in job.reached if key in self.earlier),
                    default=-1))
                before = [key for key in job.reached if key[1] < at]  # key: (pid, start)
                reached += before
                quiet.update({key: f"after the {signame} {launcher.label} forwarded"
                              for key in before})
                continue
            if job.forwarded and launcher.sigint not in ("ignored", "blocked"):
                forward.append((launcher, job.reached))
                self._forwarded.add(launcher.id)
                for key in job.reached:
                    quiet[key] = f"after the {signame} {launcher.label} forwarded"
            elif job.forwarded:
                said += Said.warn(
                    f"{launcher.label} {launcher.sigint} {signame}: its ranks get it from "
                    "the guard instead, and the launcher may act on them as they leave")
            else:  # one holding a node itself (mpirun; one stopped) leaves after its ranks
                hold += [launcher] if job.held and held is not None else []
                quiet[launcher.id] = plan.note_of(launcher.id)
        # A launcher this run sent the signal to forward that holds a node since (a device
        # query while it shuts down): that was its one signal; it is waited for.
        again_held = self._forwarded_at.keys() & {holder_id(r) for j in plan.jobs for r in j.roots}
        for key in again_held - quiet.keys():
            quiet[key] = f"sent {signame} earlier in this run, to forward: none is sent again"
            reached.append(key)
        again = {key: e for key, e in self.earlier.items() if key not in quiet}  # no worker
        quiet.update({key: e.note(signame) for key, e in again.items()})
        asks = {holder_id(h): _shutdown(kernel) for h in kernels
                if (kernel := self.kernel(h)) is not None}
        roots = [r for job in plan.jobs for r in job.roots]
        after = {holder_id(h): jupyter.started_by(h, roots, self.options.proc) for h in kernels}
        return JobStop(quiet, forward, hold, held, asks, "a Jupyter shutdown_request", after,
                       {key: e.attempt_id for key, e in self.earlier.items()}, reached,
                       frozenset(again_held)), said

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
        if owner.kind == "kubernetes" and self.policy.kubernetes == "veto":
            return replace(d, kind="veto-supervised", reason=(
                f"pid {d.holder.pid} {d.holder.comm} is held by a Kubernetes pod (uid "
                f"{owner.name}): cordon and drain this node before suspending"))
        if owner.kind == "user-service" and owner.transient and self.transient == "veto":
            return replace(d, kind="veto-supervised", reason=(
                f"pid {d.holder.pid} {d.holder.comm} runs in {owner.describe()}, a transient "
                "unit that cannot be made again after resume: stop it yourself, or set "
                '[restore] transient = "drain"'))
        return d

    def record(self, d: Decision, outcome: Outcome, round_no: int, tags: Tags = NO_TAGS) -> None:
        self.results[holder_id(d.holder)] = HolderRecord(d, outcome, round_no,
                                                         tags.get(holder_id(d.holder), ""),
                                                         self.owner(d.holder))

    def settle(self, decisions: Sequence[Decision], round_no: int,
               tags: Tags = NO_TAGS) -> tuple[list[Decision], Said]:
        """Record the holders not to signal; return those to signal, and the vetoes and
        warnings of the others."""
        to_signal = []
        said = NOTHING
        for d in decisions:
            if d.signals:
                to_signal.append(d)
                continue
            if d.vetoes:
                said += Said.veto(d.veto(self.owner(d.holder).key))
            elif d.reason:
                said += Said.warn(d.reason)
            self.record(d, advice.unsignalled(d), round_no, tags)
        return to_signal, said

    def admit(self, decisions: Sequence[Decision],
              refused: str = "") -> tuple[list[Decision], Said]:
        """Settle a batch found outside the rounds (the scan, the device); return those to
        signal now, and what settling the others said.

        When the batch holds a veto (or ``refused``, "veto" or "unknown": the suspend is
        refused already, whatever the drain does), or in a dry run, nobody is signalled:
        each holder that would have been says why not, or what the signal would do.
        """
        to_signal, said = self.settle(decisions, 1)
        refused = "veto" if any(d.vetoes for d in decisions) else refused
        if not (refused or self.options.dry_run):
            return to_signal, said
        plan = self.plan(to_signal)
        why = (VETO_ANYWAY if refused == "veto" else
               "the verdict is unknown anyway: nobody is signalled")
        for d in to_signal:
            self.record(d, Outcome("not-signalled", why=why) if refused else advice.prediction(
                d, plan, self.took_before(d), self.earlier.get(holder_id(d.holder))), 1)
        return [], said

    def signal(self, decisions: Sequence[Decision], reserve: float, round_no: int = 1,
               tags: Tags = NO_TAGS, keep: Callable[[Sequence[Holder]], Said] | None = None
               ) -> tuple[bool, Said]:
        """Signal these holders and wait for them, leaving ``reserve`` seconds of the deadline.

        ``keep``: asks the holders' supervisors to keep them down (guard/rounds.py).
        True when none of them is still running; and what the drain found. One stopped
        since the scan makes the veto certain, as the policy's does: nobody is signalled.
        """
        if stopped := stopped_since(self.options.proc, [d.holder for d in decisions]):
            return False, self._refuse_stopped(decisions, stopped, round_no, tags)
        clock = self.deadline.clock
        floor = min(clock() + MIN_WAIT_S, self.deadline.at)  # a wait, not past the run's end
        until = Deadline(max(floor, self.deadline.at - reserve), self.deadline.cancel, clock)
        cfg = self.drain
        said = Said.warn(self.ledger.signalling([
            HolderRecord(d, Outcome("signalled", why=(
                f"not yet sent {d.signal} when this was written; the guard ended before it "
                "recorded the outcome")), round_no, owner=self.owner(d.holder))
            for d in decisions]))
        opts = self.options
        plan = self.plan(decisions)
        stop, stopping = self.job_stop(plan, Held(self.state_dir, opts.proc),
                                       [d.holder for d in decisions if d.kind == "jupyter-shutdown"])
        said += stopping
        kept = NOTHING  # what the supervisors said, asked at the drain's own moment

        def keep_down(holders: Sequence[Holder]) -> None:
            nonlocal kept
            if keep is not None:
                kept = keep(holders)

        timeout_s = max(d.wait_s for d in decisions)
        result = drain([d.holder for d in decisions], cfg.signal, timeout_s, until,
                       cfg.escalate, proc=opts.proc, log=opts.log.info,
                       keep=keep_down if keep is not None else None, jobs=stop,
                       reached=self.ledger.reached)
        said += kept + Said.warn(*result.warnings)
        self._forwarded_at.update(result.forwarded_at)
        if stop.held is not None:
            said += Said.warn(*stop.held.warnings)
        if result.shortened:
            said += Said.warn(
                f"the drain wait was cut to {result.wait_s:.1f} s (of [drain] timeout_s = "
                f"{timeout_s:g}) to end within [drain] deadline_s = {cfg.deadline_s:g}")
        for d in decisions:
            self.record(d, result.outcomes[holder_id(d.holder)], round_no, tags)
            said += Said.veto(*left_running(d, result, plan, stop, self.owner(d.holder),
                                            holder_id(d.holder) in self.through,
                                            self.took_before(d)))
        said += Said.veto(*map(advice.still_launching, result.lingering))
        said += Said.warn(*advice.killed_by_agent(decisions, plan, result.outcomes, stop,
                                                   result.unforwarded))
        return not any(o.kind == "timeout" or o.why.startswith(UNSIGNALLABLE)
                       for o in result.outcomes.values()), said

    def _refuse_stopped(self, decisions: Sequence[Decision], stopped: Mapping[HolderId, str],
                        round_no: int, tags: Tags) -> Said:
        said = NOTHING
        for d in decisions:
            if state := stopped.get(holder_id(d.holder), ""):
                said += Said.veto(stopped_veto(d, state, self.owner(d.holder)))
            self.record(d, Outcome("not-signalled", why=f"stopped (state {state}) since the scan"
                                   if state else VETO_ANYWAY), round_no, tags)
        return said


def _shutdown(kernel: jupyter.JupyterKernel) -> Callable[[float], str]:
    def ask(left_s: float) -> str:  # what is left of the wait: the ask is bounded by it too
        return jupyter_ask.request_shutdown(kernel, min(SHUTDOWN_ASK_S, left_s)) or ""
    return ask

"""The guard's pipeline: inventory -> scan -> policy -> drain -> idle -> verdict.

Plain Python over plain data; collaborators (the /proc root, the idle
check, the logger, the clock) are arguments so tests hand it real or fake
ones. The same function serves the dry run, the veto unit and the sleep
hook's fallback; only its arguments differ.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from suspendguard.config import FAMILIES, Config, IdleConfig
from suspendguard.errors import HistoryError
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.policy import ancestors, decide
from suspendguard.guard.scan import describe_process, scan_holders
from suspendguard.model import Decision, Holder, HolderId, Inventory, Outcome, Verdict, holder_id
from suspendguard.system import children
from suspendguard.system.cancel import Cancel
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

# How long a supervisor gets to restart a drained job before the rescan.
RESPAWN_GRACE_S = 0.5



if TYPE_CHECKING:
    from typing import Any, Protocol

    from suspendguard.store.history import History, HolderRow

    class IdleResult(Protocol):
        @property
        def state(self) -> str: ...

        @property
        def veto_reasons(self) -> tuple[str, ...]: ...

        @property
        def warnings(self) -> tuple[str, ...]: ...

        def processes(self) -> Sequence[Any]: ...

        def to_json(self) -> dict[str, Any]: ...

    IdleCheck = Callable[[IdleConfig, Sequence[str], float], IdleResult]


def default_idle_check(config: IdleConfig, families: Sequence[str], deadline: float) -> IdleResult:
    return _default_idle_check()(config, families, deadline)


def _default_idle_check() -> IdleCheck:
    from suspendguard.idle.sampler import check_idle

    def check(config: IdleConfig, families: Sequence[str], deadline: float) -> IdleResult:
        result: IdleResult = check_idle(config, families, deadline)
        return result

    return check


@dataclass(frozen=True, slots=True)
class HolderResult:
    decision: Decision
    outcome: Outcome
    round: int = 1
    respawned: str = ""

    def to_json(self) -> dict[str, Any]:
        h = self.decision.holder
        return {
            "pid": h.pid,
            "start_time": h.start_time,
            "ppid": h.ppid,
            "comm": h.comm,
            "exe": h.exe,
            "cmdline": list(h.cmdline),
            "user": h.user,
            "uid": h.uid,
            "unit": h.unit,
            "container": h.container,
            "nspid": list(h.nspid),
            "nodes": [
                {"path": n.node.path, "seen_as": n.seen_as, "role": n.node.role, "via": n.via}
                for n in h.nodes
            ],
            "sigint": h.sigint,
            "frozen": h.frozen,
            "source": h.source,
            "action": self.decision.action,
            "rule": self.decision.rule,
            "notes": list(self.decision.notes),
            "outcome": {"kind": self.outcome.kind, "seconds": self.outcome.seconds,
                        "why": self.outcome.why},
            "round": self.round,
            "respawned": self.respawned or None,
        }

    def row(self) -> HolderRow:
        from suspendguard.store.history import HolderRow

        h = self.decision.holder
        return HolderRow(
            pid=h.pid, start_time=h.start_time, user=h.user, unit=h.unit, comm=h.comm,
            cmdline=h.command, action=self.decision.action, rule=self.decision.rule,
            outcome=self.outcome.kind, seconds=self.outcome.seconds,
            why=self.outcome.why or self.respawned, source=h.source, round=self.round,
        )


@dataclass(frozen=True, slots=True)
class Report:
    verdict: Verdict
    dry_run: bool
    action: str | None
    origin: str
    inventory: Inventory
    holders: tuple[HolderResult, ...]
    unreadable: int
    idle: IdleResult | None
    started: float
    duration_s: float
    attempt_id: int | None = None
    history_note: str = ""
    can_veto: bool = True
    idle_skipped: str = ""  # why the idle step did not run, when it did not
    unreadable_pids: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.kind,
            "dry_run": self.dry_run,
            "action": self.action,
            "origin": self.origin,
            "reasons": list(self.verdict.reasons),
            "warnings": list(self.verdict.warnings),
            "devices": [n.to_json() for n in self.inventory.nodes],
            "holders": [h.to_json() for h in self.holders],
            "unreadable": self.unreadable,
            "idle": self.idle.to_json() if self.idle is not None else {
                "state": "none" if not self.idle_skipped.startswith("skipped") else "skipped",
                "devices": [], "backends": [], "reason": self.idle_skipped,
            },
            "attempt_id": self.attempt_id,
            "history": self.history_note or "recorded",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "duration_s": round(self.duration_s, 3),
            "can_veto": self.can_veto,
        }


def sigint_ignored_reason(h: Holder, signame: str = "SIGINT") -> str:
    return (
        f"pid {h.pid} {h.comm} ignores {signame} (SIG_IGN inherited, e.g. started with & from a "
        f"script or under nohup): kill -{int(signal.Signals[signame])} cannot stop it"
    )


class _State:
    """What a run has found so far: reasons, warnings, each holder's result."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.warnings: list[str] = []
        self.results: dict[HolderId, HolderResult] = {}


class _Run:
    def __init__(self, config: Config, dry_run: bool, proc: ProcFS, log: Logger,
                 cancel: Cancel | None, skip_frozen: bool, can_veto: bool,
                 clock: Callable[[], float]) -> None:
        self.config = config
        self.dry_run = dry_run
        self.proc = proc
        self.log = log
        self.cancel = cancel
        self.skip_frozen = skip_frozen
        self.can_veto = can_veto
        self.clock = clock
        self.signame = config.drain.signal
        self.signum = int(signal.Signals[self.signame])
        self.state = _State()
        self.never = ancestors(os.getpid(), proc) | {os.getpid()}

    # -- deciding before signalling -------------------------------------------

    def sort(self, decisions: Sequence[Decision], round_no: int,
             respawn: dict[HolderId, str]) -> list[Decision]:
        """Record outcomes for holders not to drain; return those to drain."""
        st = self.state
        drain_mode = self.config.drain.on_sigint_ignored
        to_drain: list[Decision] = []
        for d in decisions:
            h = d.holder
            key = holder_id(h)
            tag = respawn.get(key, "")
            label = f"pid {h.pid} {h.comm}" + (f" ({tag})" if tag else "")
            if d.action == "protect":
                st.reasons.append(f"{label} is protected by {d.rule}: the suspend waits for it")
                outcome = Outcome("not-signalled", why="protected")
            elif d.action in ("ignore", "never"):
                outcome = Outcome("not-signalled", why=d.rule)
            elif h.frozen and self.skip_frozen:
                st.warnings.append(f"{label} is in a frozen cgroup: skipped (a signal would stay "
                                   "pending until it is thawed)")
                outcome = Outcome("not-signalled", why="frozen cgroup")
            elif h.frozen:
                st.reasons.append(f"{label} is in a frozen cgroup: it cannot exit until thawed")
                outcome = Outcome("not-signalled", why="frozen cgroup")
            elif h.disposition(self.signum) == "ignored" and drain_mode == "veto":
                st.reasons.append(sigint_ignored_reason(h, self.signame))
                outcome = Outcome("not-signalled", why=f"ignores {self.signame}")
            elif (h.disposition(self.signum) == "ignored" and drain_mode == "escalate"
                  and not self.config.drain.escalate):
                st.reasons.append(sigint_ignored_reason(h, self.signame)
                                  + " and [drain] escalate is empty")
                outcome = Outcome("not-signalled", why=f"ignores {self.signame}")
            else:
                to_drain.append(d)
                continue
            st.results[key] = HolderResult(d, outcome, round_no, tag)
        return to_drain

    def predicted(self, d: Decision) -> Outcome:
        disp = d.holder.disposition(self.signum)
        why = {
            "default": f"{self.signame} ends it (default action)",
            "caught": f"has a {self.signame} handler",
            "blocked": f"{self.signame} blocked until it unblocks",
            "ignored": f"ignores {self.signame}; escalation follows",
            "unknown": f"{self.signame} disposition unknown",
        }[disp]
        return Outcome("would-signal", why=why)

    # -- draining --------------------------------------------------------------

    def drain_rounds(self, first: list[Decision], seen: set[HolderId], deadline: float,
                     idle_reserve: float, inventory: Inventory) -> None:
        st = self.state
        pending = first
        round_no = 1
        parents = {d.holder.ppid for d in first if d.holder.ppid > 1}
        units = {d.holder.unit for d in first if d.holder.unit}
        while pending:
            if self.cancelled():
                for d in pending:
                    st.results[holder_id(d.holder)] = HolderResult(
                        d, Outcome("not-signalled", why=self.cancel_reason()), round_no)
                return
            until = max(self.clock() + 0.5, deadline - idle_reserve)
            from suspendguard.guard.drain import drain

            result = drain(
                [d.holder for d in pending], self.signame, self.config.drain.timeout_s, until,
                self.config.drain.escalate, proc=self.proc, cancel=self.cancel,
                log=self.log.info, clock=self.clock,
            )
            for d in pending:
                key = holder_id(d.holder)
                prev = st.results.get(key)
                tag = prev.respawned if prev else ""
                st.results[key] = HolderResult(d, result.outcomes[key], round_no, tag)
                outcome = result.outcomes[key]
                if outcome.kind == "timeout":
                    st.reasons.append(f"pid {d.holder.pid} {d.holder.comm} {outcome.why}")
            if any(o.kind == "timeout" for o in result.outcomes.values()) or self.cancelled():
                return
            self.respawn_grace(pending, deadline)
            # Rescan: a supervisor may have restarted the job, or a new one started.
            # fds only: a restarted job opens its nodes first; a mapping
            # without an fd comes later in a job's life. This keeps the step
            # between the last exit and the verdict short.
            rescan = scan_holders(inventory, self.proc, exclude=children.active(),
                                  maps=False)
            new = [h for h in rescan.holders if holder_id(h) not in seen]
            seen.update(holder_id(h) for h in new)
            decisions = decide(new, self.config.policy, self.never)
            respawn = {
                holder_id(h): "respawned" for h in new
                if (h.ppid > 1 and h.ppid in parents) or (h.unit and h.unit in units)
            }
            parents |= {h.ppid for h in new if h.ppid > 1}
            units |= {h.unit for h in new if h.unit}
            round_no += 1
            before = len(st.reasons)
            pending = self.sort(decisions, round_no, respawn)
            for d in pending:
                st.results[holder_id(d.holder)] = HolderResult(
                    d, Outcome("not-signalled", why="appeared during the drain"), round_no,
                    respawn.get(holder_id(d.holder), ""))
            if len(st.reasons) > before:
                return  # certain veto now: signal nobody else
            if pending and round_no > self.config.drain.rounds:
                for d in pending:
                    tag = respawn.get(holder_id(d.holder), "")
                    what = "respawned" if tag else "appeared"
                    st.reasons.append(
                        f"pid {d.holder.pid} {d.holder.comm} {what} after {self.config.drain.rounds}"
                        f" drain round(s): {d.holder.command}")
                return

    def respawn_grace(self, drained: Sequence[Decision], deadline: float) -> None:
        """Give a supervisor a moment to restart what it supervised before the rescan.

        Only when a drained job's parent is still there and could restart it:
        not init, not the guard itself (its own children are supervised by
        nobody else).
        """
        parents = {d.holder.ppid for d in drained} - self.never - {0, 1}
        if not any(os.path.exists(self.proc.path(p)) for p in parents):
            return
        wait = min(RESPAWN_GRACE_S, max(0.0, deadline - self.clock()))
        if self.cancel is not None:
            select.select([self.cancel.fd], [], [], wait)
        else:
            time.sleep(wait)

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.cancelled

    def cancel_reason(self) -> str:
        return self.cancel.reason if self.cancel else ""


def run(
    config: Config,
    *,
    dry_run: bool,
    action: str | None = None,
    origin: str = "cli",
    proc: ProcFS | None = None,
    idle_check: IdleCheck | None = default_idle_check,
    log: Logger | None = None,
    cancel: Cancel | None = None,
    record: bool = True,
    skip_frozen: bool = False,
    can_veto: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> Report:
    proc = proc or ProcFS()
    log = log or Logger()
    started_wall = time.time()
    start = clock()
    # Leave time to record and answer before systemd's TimeoutStartSec.
    deadline = start + config.drain.deadline_s - 2.0
    r = _Run(config, dry_run, proc, log, cancel, skip_frozen, can_veto, clock)
    st = r.state

    history: History | None = None
    attempt_id: int | None = None
    history_note = ""
    if record:
        from suspendguard.store.history import History

        try:
            history = History.open(config.state.dir, proc=proc)
            st.warnings.extend(history.warnings)
            attempt_id = history.begin(action, origin, dry_run, config.digest, started_wall)
        except HistoryError as exc:
            history_note = f"not recorded: {exc}"
            if not dry_run:
                st.warnings.append(f"history not recorded: {exc}")
            if history is not None:
                history.close()
                history = None
    else:
        history_note = "not recorded"

    inventory = take_inventory(config.devices)
    st.warnings.extend(inventory.notes)
    # Only the built-in families have idle backends. Resolve the check (and
    # its imports) now, so none of that cost lands between the last exit
    # and the verdict.
    if idle_check is default_idle_check:
        idle_check = _default_idle_check() if set(inventory.families()) & set(FAMILIES) else None
    scan = scan_holders(inventory, proc, exclude=children.active())
    # PID 1 is never signalled whatever it holds; some containers refuse
    # reading it even to root, which is worth counting but not a warning.
    refused = [p for p in scan.unreadable_pids if p != 1]
    if refused:
        pids = ", ".join(str(p) for p in refused[:10])
        st.warnings.append(f"{len(refused)} process(es) could not be inspected "
                           f"(permission denied{'' if os.geteuid() == 0 else '; not root'}): {pids}")
    decisions = decide(scan.holders, config.policy, r.never)
    seen = {holder_id(h) for h in scan.holders}
    to_drain = r.sort(decisions, 1, {})
    certain_veto = bool(st.reasons)

    if certain_veto and to_drain:
        for d in to_drain:
            st.results[holder_id(d.holder)] = HolderResult(
                d, Outcome("not-signalled", why="veto anyway: nobody is signalled"))
        to_drain = []
    if dry_run:
        for d in to_drain:
            st.results[holder_id(d.holder)] = HolderResult(d, r.predicted(d))
    elif to_drain:
        idle_reserve = config.idle.settle_s + config.idle.command_timeout_s + 1.0
        r.drain_rounds(to_drain, seen, deadline, idle_reserve, inventory)

    idle: IdleResult | None = None
    idle_skipped = ""
    if not inventory.nodes:
        idle_skipped = "no accelerator nodes found"
    elif idle_check is None:
        idle_skipped = "no idle backend for the nodes found (" + \
            ", ".join(inventory.families()) + ")"
    elif certain_veto and not dry_run:
        idle_skipped = "skipped: the verdict was already veto"
    elif r.cancelled():
        idle_skipped = "skipped: the guard was stopped"
    else:
        idle = idle_check(config.idle, inventory.families(), max(deadline, clock() + 0.5))
        idle = _fold_idle(r, idle, bool(to_drain) and dry_run, deadline, idle_check,
                          inventory.families())

    if r.cancelled():
        st.reasons.append(f"the guard was stopped ({r.cancel_reason()}) before it finished")
    verdict = Verdict("veto" if st.reasons else "allow", tuple(st.reasons), tuple(st.warnings))
    order = {holder_id(h): i for i, h in enumerate(scan.holders)}
    holders = tuple(sorted(st.results.values(),
                           key=lambda hr: (hr.round, order.get(holder_id(hr.decision.holder), 1 << 30))))
    duration = clock() - start
    report = Report(verdict, dry_run, action, origin, inventory, holders, scan.unreadable, idle,
                    started_wall, duration, attempt_id, history_note, can_veto, idle_skipped,
                    scan.unreadable_pids)
    # The verdict line first: it is what the operator and the journal wait
    # for; recording it (a commit, and SQLite's checkpoint on close) follows.
    log_verdict(report, log)
    if history is not None and attempt_id is not None:
        try:
            history.finish(attempt_id, verdict.kind, verdict.reasons, verdict.warnings,
                           [h.row() for h in holders])
        except HistoryError as exc:
            log.warning(f"history not recorded: {exc}")
            report = replace(report, history_note=f"not recorded: {exc}", verdict=replace(
                verdict, warnings=(*verdict.warnings, f"history not recorded: {exc}")))
        finally:
            history.close()
    return report


def _device_holders(r: _Run, idle: IdleResult) -> list[Decision]:
    """Processes the device reports that the scan did not see, as decided holders."""
    st = r.state
    known_pids = {k[0] for k in st.results}
    extra: list[Holder] = []
    for p in idle.processes():
        pid = int(p.pid)
        if pid in known_pids or pid <= 0:
            continue
        known_pids.add(pid)
        holder = describe_process(pid, [], r.proc, source=str(p.source))
        if holder is None:
            st.reasons.append(f"the device ({p.source}) reports pid {pid} {p.name or ''}".rstrip()
                              + ", which is not visible here (another PID namespace?)")
            continue
        extra.append(holder)
    return decide(extra, r.config.policy, r.never)


def _fold_idle(r: _Run, idle: IdleResult, drain_pending: bool, deadline: float,
               idle_check: IdleCheck, families: Sequence[str]) -> IdleResult:
    """Fold the device's own view into the verdict, device-reported pids included.

    A process the device reports but the scan missed (a container the guard
    could not read) goes through the same policy and drain; the device is
    then asked again.
    """
    st = r.state
    decisions = _device_holders(r, idle)
    before = len(st.reasons)
    to_drain = r.sort(decisions, 1, {})
    if r.dry_run or len(st.reasons) > before:
        for d in to_drain:
            st.results[holder_id(d.holder)] = HolderResult(
                d, r.predicted(d) if r.dry_run else Outcome(
                    "not-signalled", why="veto anyway: nobody is signalled"))
    elif to_drain:
        from suspendguard.guard.drain import drain

        result = drain([d.holder for d in to_drain], r.signame, r.config.drain.timeout_s,
                       max(r.clock() + 0.5, deadline - r.config.idle.settle_s - 1.0),
                       r.config.drain.escalate, proc=r.proc, cancel=r.cancel,
                       log=r.log.info, clock=r.clock)
        for d in to_drain:
            outcome = result.outcomes[holder_id(d.holder)]
            st.results[holder_id(d.holder)] = HolderResult(d, outcome, 1)
            if outcome.kind == "timeout":
                st.reasons.append(f"pid {d.holder.pid} {d.holder.comm} (reported by "
                                  f"{d.holder.source}) {outcome.why}")
        if not r.cancelled():
            idle = idle_check(r.config.idle, families, max(deadline, r.clock() + 0.5))
    pending = drain_pending or (r.dry_run and any(
        hr.decision.action == "drain" for hr in st.results.values()))
    if pending:
        st.warnings.extend(f"(expected before the drain) {w}" for w in idle.veto_reasons)
    else:
        st.reasons.extend(idle.veto_reasons)
    st.warnings.extend(idle.warnings)
    return idle


def log_verdict(report: Report, log: Logger) -> None:
    if report.dry_run and log.quiet:
        return  # an interactive dry run: the report itself says it
    what = report.action or ("dry run" if report.dry_run else "check")
    attempt = f"attempt {report.attempt_id} " if report.attempt_id else ""
    would = "would " if report.dry_run else ""
    if report.verdict.kind == "veto":
        tail = "; ".join(report.verdict.reasons)
        if report.can_veto:
            log.error(f"{attempt}({what}): {would}veto: {tail}")
        else:
            log.error(f"{attempt}({what}): would veto, but a sleep hook cannot stop the "
                      f"suspend: {tail}")
    else:
        count = sum(1 for h in report.holders
                    if h.outcome.kind == ("would-signal" if report.dry_run else "exited"))
        done = f"{count} holder(s) would be drained" if report.dry_run else \
            f"{count} holder(s) drained"
        log.info(f"{attempt}({what}): {would}allow: {done}"
                 + (f"; warnings: {'; '.join(report.verdict.warnings)}"
                    if report.verdict.warnings else ""))

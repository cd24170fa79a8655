"""The guard's pipeline: inventory -> scan -> policy -> drain -> idle -> verdict.

Plain Python over plain data, in steps that take values and return values
(:class:`Opening`, :class:`Look`, the :class:`~suspendguard.guard.run_state.Said`
of each step); collaborators (the /proc root, the idle check, the logger,
the supervisors, the history) are arguments so tests hand it real or fake
ones. The history (SQLite) and the supervisors (D-Bus, the engines' HTTP)
come from the caller, so that a dry run, which records nothing and mostly
asks no supervisor, loads neither. The same function serves the dry run,
the veto unit and ``drain``; only its arguments differ. One
:class:`~suspendguard.system.deadline.Deadline` (one clock, the guard's
own cancel) bounds every wait of the run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Protocol

from suspendguard.config import FAMILIES, Config, DevicesConfig, IdleConfig, RestoreConfig
from suspendguard.errors import HistoryError
from suspendguard.guard import device_view, rounds
from suspendguard.guard.held import continue_left
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.ledger import Ledger
from suspendguard.guard.policy import ancestors, forgeable_rule_warnings
from suspendguard.guard.render import log_verdict
from suspendguard.guard.report import RECORDED, IdleSkipped, Report
from suspendguard.guard.restore import restore
from suspendguard.guard.run_state import NOTHING, IdleCheck, RunOptions, RunState, Said
from suspendguard.guard.scan import scan_holders
from suspendguard.idle.base import IdleReport
from suspendguard.idle.sampler import check_idle
from suspendguard.model import Decision, HolderId, Inventory, ScanResult, Unavailable, holder_id
from suspendguard.record import Attempt, Stop
from suspendguard.store import lock as guard_lock
from suspendguard.supervise.owner import OwnerControl
from suspendguard.system import runner
from suspendguard.system.deadline import (
    ANSWER_MARGIN_S,
    RESTORE_AFTER_VETO_S,
    Cancel,
    Deadline,
    bounded,
    idle_reserve_s,
    nap,
)
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS
from suspendguard.verdict import Reason, Verdict

if TYPE_CHECKING:
    from suspendguard.store.history import History


class HistoryOpener(Protocol):
    """How the pipeline opens the history it records in (``History.open``)."""

    def __call__(self, state_dir: str, readonly: bool = False, *, proc: ProcFS | None = None,
                 deadline: Deadline | None = None) -> History: ...


def default_idle_check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
    # Its pauses between readings end at SIGTERM too (system/deadline.py).
    return check_idle(config, families, deadline, sleep=nap)


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
    supervisors: OwnerControl | None = None,
    confirmed: Collection[HolderId] | None = None,
    history: HistoryOpener | None = None,
) -> Report:
    """One guard run, holding the state folder's guard lock while it may signal.

    ``supervisors``: how owners are read and stopped (None: cgroups only,
    every holder signalled directly). ``history``: where a run with
    ``record`` is recorded (``History.open``; needed then). ``confirmed``: the only holders that
    may be signalled (those ``drain`` showed and the operator confirmed);
    any other that would be vetoes, unsignalled. A dry run signals nobody:
    it takes no lock, and only says so when another run is draining as it
    looks.
    """
    if record and history is None:
        raise ValueError("a run that records needs a history to record in")
    options = RunOptions(
        dry_run=dry_run, action=action, origin=origin, proc=proc or ProcFS(),
        idle_check=idle_check, log=log or Logger(), record=record, skip_frozen=skip_frozen,
        can_veto=can_veto, supervisors=supervisors,
        confirmed=frozenset(confirmed) if confirmed is not None else None)
    # Leave time to record and answer before systemd's TimeoutStartSec.
    deadline = Deadline(time.monotonic() + config.drain.deadline_s - ANSWER_MARGIN_S, cancel)
    opening = _open(config, options, deadline, history)
    try:
        return _run(config, options, deadline, opening)
    finally:
        opening.close()


@dataclass
class Opening:
    """The run's start: the guard lock, the history it records in (if any), what they said."""

    lock: guard_lock.GuardLock
    started: float  # wall clock
    begun: float  # the same moment on the deadline's clock
    history: History | None = None
    attempt_id: int | None = None
    digest: str = ""  # the config's fingerprint, as the history records it
    recorded: Literal["recorded"] | Unavailable = RECORDED
    past: History | None = None  # a dry run's read-only history, for earlier drain times
    said: Said = NOTHING

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.history, self.attempt_id, self.history or self.past)

    def close(self) -> None:
        """The history closed, then the lock released: the last thing a run does."""
        self.close_history()
        self.lock.release()

    def close_history(self) -> None:
        for h in (self.history, self.past):
            if h is not None:
                h.close()
        self.history = self.past = None


def _open(config: Config, options: RunOptions, deadline: Deadline,
          open_history: HistoryOpener | None) -> Opening:
    """The guard lock taken (a dry run only looks), and the history opened: the attempt
    begun in it, or why not."""
    state_dir = config.state.dir
    if options.dry_run:
        lock = guard_lock.peek(state_dir)
    else:
        lock = guard_lock.take(state_dir, min(guard_lock.LOCK_WAIT_S,
                                              max(0.0, config.drain.deadline_s / 3)))
    opening = Opening(lock, time.time(), deadline.clock(), said=(
        Said.warn(*forgeable_rule_warnings(config.policy))
        + (Said.veto(Reason("guard-busy", lock.refused)) if lock.refused
           else Said.warn(lock.unusable or lock.busy))))
    if open_history is None:
        return opening
    if not options.record:
        opening.recorded = Unavailable("a dry run records nothing" if options.dry_run
                                       else "not asked to")
        # A job's earlier drain times, for check's word: read without writing.
        if options.dry_run and os.path.exists(os.path.join(state_dir, "history.db")):
            with contextlib.suppress(HistoryError):
                opening.past = open_history(state_dir, True, proc=options.proc)
        return opening
    try:
        # The lock wait too ends inside the deadline.
        opening.history = open_history(state_dir, proc=options.proc, deadline=deadline)
        opening.said += Said.warn(*opening.history.warnings)
        opening.digest = opening.history.digest(config)
        opening.attempt_id = opening.history.begin(options.action, options.origin,
                                                   options.dry_run, opening.digest,
                                                   opening.started)
    except HistoryError as exc:
        opening.recorded = Unavailable(str(exc))
        if not options.dry_run:
            opening.said += Said.warn(f"history not recorded: {exc}")
        opening.close_history()
    return opening


@dataclass(frozen=True, slots=True)
class Look:
    """What the run found before anyone is signalled."""

    inventory: Inventory
    scan: ScanResult
    decisions: list[Decision]
    first: IdleReport | None  # the device's view before the drain, when asked
    idle_check: IdleCheck | None  # None when no backend answers for the nodes found
    said: Said  # what the look found; its reasons are certain vetoes
    unknown: Said  # why the verdict cannot be known (processes the scan could not read)


def _run(config: Config, options: RunOptions, deadline: Deadline, opening: Opening) -> Report:
    lock = opening.lock
    r = RunState(config.policy, config.drain, options, transient=config.restore.transient,
                 state_dir=config.state.dir, never=ancestors(os.getpid()), deadline=deadline,
                 token=lock.token(), ledger=opening.ledger)
    with bounded(deadline):  # every wait before the verdict ends by then (or at SIGTERM)
        said = opening.said + _first_aid(config.state.dir, options, lock)
        look = _look(config.devices, config.idle, r, lock)
        said += look.said
        to_drain = r.admit(look.decisions, vetoed=bool(said.reasons or r.vetoed))
        certain_veto = bool(said.reasons or r.vetoed)
        if to_drain:
            _drain(r, look, to_drain, config.idle, config.restore)
        idle, idle_said = _idle(r, look, certain_veto, config.idle)
        said += r.said + idle_said
        if r.cancelled:
            said += Said.veto(Reason("guard-stopped", f"the guard was stopped "
                                     f"({deadline.cancel.reason if deadline.cancel else ''}) "
                                     "before it finished"))
        verdict = _verdict(r, said, look.unknown)
        attempt = _attempt(r, opening, look, verdict)
    report = Report(attempt, look.inventory, look.scan.unreadable, idle, opening.recorded,
                    options.can_veto, look.scan.unreadable_pids)
    # The verdict line first: it is what the operator and the journal wait
    # for; recording it (a commit, and SQLite's checkpoint on close) follows.
    log_verdict(report, options.log)
    return _record(config.restore, options, opening, report)


def _first_aid(state_dir: str, options: RunOptions, lock: guard_lock.GuardLock) -> Said:
    """What a killed run left goes first: it would outlive this run otherwise."""
    if options.dry_run or lock.refused:
        return NOTHING
    # A launcher a killed run left stopped goes on before anything else.
    lines = continue_left(state_dir, options.proc)
    if options.supervisors is not None:
        # Drain drop-ins, restart policies set aside.
        lines += options.supervisors.clean_leftovers()
    for line in lines:
        options.log.warning(line)
    return Said.warn(*lines)


def _look(devices: DevicesConfig, idle: IdleConfig, r: RunState,
          lock: guard_lock.GuardLock) -> Look:
    """The nodes, their holders, the decisions on them, and the device's own view first."""
    inventory = take_inventory(devices)
    idle_check = r.options.idle_check
    # Only the built-in families have idle backends.
    if idle_check is default_idle_check and not set(inventory.families()) & set(FAMILIES):
        idle_check = None
    # Locked out: another run is draining these very holders; look at none.
    scan = (ScanResult((), 0, (), 0) if lock.refused else
            scan_holders(inventory, r.options.proc, exclude=runner.active_children()))
    refused, said = device_view.refused_pids(scan)
    said = Said.warn(*inventory.notes) + said
    decisions = r.decide(scan.holders)
    # The device's own view before anyone is signalled: what it reports and
    # this host cannot see, or a device nobody can answer for, is a certain
    # veto, and every job the drain would stop first is spared. Only worth a
    # query when someone would be signalled, or the scan could not read all.
    first: IdleReport | None = None
    if (idle_check is not None and inventory.nodes and not lock.refused
            and (refused or any(d.signals for d in decisions))):
        first, asked = device_view.ask_first(r, idle_check, idle, inventory.families())
        extra, hidden = device_view.device_holders(r, first, {h.pid for h in scan.holders})
        decisions += extra
        said += asked + hidden
    unknown = device_view.uninspected(refused, first, inventory.families())
    return Look(inventory, scan, decisions, first, idle_check,
                Said((*said.reasons,), (*said.warnings, *unknown.warnings)),
                Said(unknown.reasons))


def _drain(r: RunState, look: Look, to_drain: list[Decision], idle: IdleConfig,
           restore_config: RestoreConfig) -> None:
    """The drain in rounds; a drain that fails half-way puts the owners back first."""
    # Time for the idle check only when one will run (system/deadline.py).
    reserve = (idle_reserve_s(idle.settle_s, idle.command_timeout_s)
               if look.idle_check is not None and look.inventory.nodes else 0.0)
    seen = {holder_id(h) for h in look.scan.holders}
    try:
        rounds.drain_rounds(r, to_drain, seen, look.inventory, reserve)
    except BaseException:
        # Nothing may stay Restart=no (or a container's policy no) because
        # the guard broke; the error itself goes on to the caller.
        if r.stops and r.options.supervisors is not None:
            restore(r.stops, r.options.supervisors, restore_config,
                    enabled=restore_config.after_veto, record=lambda _s, _r, _w: None,
                    log=r.options.log.info, journal=r.options.log.journal)
        raise


def _idle(r: RunState, look: Look, certain_veto: bool,
          config: IdleConfig) -> tuple[IdleReport | IdleSkipped, Said]:
    """The device asked once the drain is over, or why it was not."""
    families = look.inventory.families()
    if not look.inventory.nodes:
        return IdleSkipped("none", "no accelerator nodes found"), NOTHING
    if look.idle_check is None:
        return IdleSkipped("none", "no idle backend for the nodes found ("
                           + ", ".join(families) + ")"), NOTHING
    if certain_veto and look.first is not None:
        return look.first, NOTHING  # what the device said before the drain, and why it vetoed
    if certain_veto and not r.options.dry_run:
        return IdleSkipped("skipped", "the verdict was already veto"), NOTHING
    if r.cancelled:
        return IdleSkipped("skipped", "the guard was stopped"), NOTHING
    idle = look.idle_check(config, families, r.deadline.at_least(0.5))
    return _fold_idle(r, idle, look.idle_check, families, config)


def _fold_idle(r: RunState, idle: IdleReport, idle_check: IdleCheck,
               families: Sequence[str], config: IdleConfig) -> tuple[IdleReport, Said]:
    """Fold the device's own view into the verdict, device-reported pids included.

    A process the device reports but the scan missed (a container the guard
    could not read) goes through the same policy and drain; the device is
    then asked again.
    """
    extra, said = device_view.device_holders(r, idle)
    to_drain = r.admit(extra)
    if to_drain:
        rounds.signal(r, to_drain, reserve=config.settle_s + 1.0)
        if not r.cancelled:
            idle = idle_check(config, families, r.deadline.at_least(0.5))
    # A dry run's device is still busy with the jobs a real run would drain first.
    if r.options.dry_run and any(hr.decision.action == "drain" for hr in r.results.values()):
        said += Said.warn(*(f"(expected before the drain) {w}" for w in idle.veto_reasons))
    else:
        unknown = {why: family for family, why in idle.unknown}
        said += Said.veto(*(Reason("device-unknown", why, device=unknown[why]) if why in unknown
                            else Reason("device-busy", why) for why in idle.veto_reasons))
    return idle, said + Said.warn(*idle.warnings)


def _verdict(r: RunState, said: Said, unknown: Said) -> Verdict:
    """Veto when any reason is certain, whatever the uninspected processes hold; else unknown
    when the guard cannot tell; else allow."""
    warnings = said.warnings
    if (said.reasons or unknown.reasons) and not r.options.dry_run:  # the suspend is refused
        warnings += tuple(
            f"pid {hr.decision.holder.pid} {hr.decision.holder.comm} was drained as a plain "
            "process: nothing can start it again"
            for hr in r.results.values()
            if hr.outcome.kind == "exited" and hr.owner.kind == "plain")
    warnings = tuple(dict.fromkeys(warnings))  # the device is asked before and after the drain
    if said.reasons:
        return Verdict("veto", said.reasons, (*(u.text for u in unknown.reasons), *warnings))
    if unknown.reasons:
        return Verdict("unknown", unknown.reasons, warnings)
    return Verdict("allow", (), warnings)


def _attempt(r: RunState, opening: Opening, look: Look, verdict: Verdict) -> Attempt:
    order = {holder_id(h): i for i, h in enumerate(look.scan.holders)}
    holders = tuple(sorted(r.results.values(), key=lambda hr: (
        hr.round, order.get(holder_id(hr.decision.holder), 1 << 30))))
    attempt_id = opening.attempt_id or 0
    took = r.deadline.clock() - opening.begun
    return Attempt(attempt_id, opening.started, opening.started + took, r.options.action,
                   r.options.origin, r.options.dry_run, verdict, opening.digest, holders,
                   stops=tuple(replace(s, attempt_id=attempt_id) for s in r.stops))


def _record(restore_config: RestoreConfig, options: RunOptions, opening: Opening,
            report: Report) -> Report:
    """The attempt into the history; a refused one (veto or unknown) then leaves the host
    as it found it, its stopped jobs started again."""
    history, attempt = opening.history, report.attempt
    log = options.log
    stops: Sequence[Stop] = attempt.stops
    if history is not None and opening.attempt_id is not None:
        try:
            # Stops written ahead are in already; the others (their row failed) go in now.
            history.finish(attempt)
            stops = history.pending_stops(opening.attempt_id)
        except HistoryError as exc:
            log.warning(f"history not recorded: {exc}")
            verdict = replace(attempt.verdict,
                              warnings=(*attempt.verdict.warnings, f"history not recorded: {exc}"))
            report = replace(report, history=Unavailable(str(exc)),
                             attempt=replace(attempt, verdict=verdict))
    if stops and report.verdict.kind != "allow" and options.supervisors is not None:
        def note(stop: Stop, result: str, why: str) -> None:
            if history is not None and stop.id:
                try:
                    history.record_restore(stop.id, result, why)
                except HistoryError as exc:
                    log.warning(f"history not recorded: {exc}")

        # Inside the unit's TimeoutStartSec (deadline_s + 20 s): the verdict
        # came by deadline_s - ANSWER_MARGIN_S.
        with bounded(Deadline(time.monotonic() + RESTORE_AFTER_VETO_S)):
            restore(stops, options.supervisors, restore_config, enabled=restore_config.after_veto,
                    record=note, log=log.info, journal=log.journal)
    return report

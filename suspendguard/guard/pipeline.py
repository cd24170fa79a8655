"""The guard's pipeline: inventory -> scan -> policy -> drain -> idle -> verdict.

Plain Python over plain data; collaborators (the /proc root, the idle
check, the logger, the clock, the supervisors, the history) are arguments
so tests hand it real or fake ones. The history (SQLite) and the
supervisors (D-Bus, the engines' HTTP) come from the caller, so that a dry
run, which records nothing and mostly asks no supervisor, loads neither.
The same function serves the dry run, the veto unit and ``drain``;
only its arguments differ. ``run`` bundles them into one
:class:`~suspendguard.guard.run_state.RunOptions`, which the run and its
state (:class:`~suspendguard.guard.run_state.RunState`) read.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal, Protocol

from suspendguard.config import FAMILIES, Config, IdleConfig
from suspendguard.errors import HistoryError
from suspendguard.guard import device_view
from suspendguard.guard.held import continue_left
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.owner import OwnerControl
from suspendguard.guard.policy import ancestors, forgeable_rule_warnings
from suspendguard.guard.render import log_verdict
from suspendguard.guard.report import RECORDED, IdleSkipped, Report
from suspendguard.guard.restore import restore
from suspendguard.guard.run_state import IdleCheck, RunOptions, RunState
from suspendguard.guard.scan import scan_holders
from suspendguard.idle.base import IdleReport
from suspendguard.idle.sampler import check_idle
from suspendguard.model import (
    Decision,
    HolderId,
    Outcome,
    ScanResult,
    Unavailable,
    Verdict,
    holder_id,
)
from suspendguard.record import Attempt, HolderRecord, Stop
from suspendguard.store import lock as guard_lock
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

if TYPE_CHECKING:
    from suspendguard.store.history import History


class HistoryOpener(Protocol):
    """How the pipeline opens the history it records in (``History.open``)."""

    def __call__(self, state_dir: str, readonly: bool = False, *, proc: ProcFS | None = None,
                 deadline: float | None = None) -> History: ...


def default_idle_check(config: IdleConfig, families: Sequence[str], deadline: float) -> IdleReport:
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
    clock: Callable[[], float] = time.monotonic,
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
    if dry_run:
        lock = guard_lock.peek(config.state.dir)
    else:
        wait = min(guard_lock.LOCK_WAIT_S, max(0.0, config.drain.deadline_s / 3))
        lock = guard_lock.take(config.state.dir, wait)
    # The keywords once, for _run and the run's state (guard/run_state.py).
    options = RunOptions(
        dry_run=dry_run, action=action, origin=origin, proc=proc or ProcFS(),
        idle_check=idle_check, log=log or Logger(), cancel=cancel, record=record,
        skip_frozen=skip_frozen, can_veto=can_veto, clock=clock, supervisors=supervisors,
        confirmed=frozenset(confirmed) if confirmed is not None else None)
    clocked = contextlib.ExitStack()
    try:
        return _run(config, options, lock, clocked, history)
    finally:
        clocked.close()
        lock.release()


def _run(config: Config, options: RunOptions, lock: guard_lock.GuardLock,
         clocked: contextlib.ExitStack, open_history: HistoryOpener | None) -> Report:
    log, clock = options.log, options.clock
    idle_check = options.idle_check  # None below when no backend answers for the nodes
    started_wall = time.time()
    start = clock()
    # Leave time to record and answer before systemd's TimeoutStartSec.
    deadline = start + config.drain.deadline_s - ANSWER_MARGIN_S
    # Every wait before the verdict, in every client below, ends by then (or at SIGTERM).
    clocked.enter_context(bounded(Deadline(deadline, options.cancel, clock)))
    r = RunState(config, options, never=ancestors(os.getpid()), deadline=deadline,
                 token=lock.token())
    r.warnings.extend(forgeable_rule_warnings(config.policy))
    if lock.refused:
        r.reasons.append(lock.refused)
    elif lock.unusable:
        r.warnings.append(lock.unusable)
    elif lock.busy_pid is not None:
        r.warnings.append(guard_lock.busy_reason(lock.busy_pid or None).split(":")[0]
                          + " now: what this dry run shows may change as it does")

    history: History | None = None
    attempt_id: int | None = None
    digest = ""  # the config's fingerprint, as the history records it
    recorded: Literal["recorded"] | Unavailable = RECORDED
    if options.record and open_history is not None:
        try:
            # The lock wait too ends inside the deadline (History wants a monotonic time).
            history = open_history(config.state.dir, proc=options.proc,
                                   deadline=time.monotonic() + (deadline - start))
            r.warnings.extend(history.warnings)
            digest = history.digest(config)
            attempt_id = history.begin(options.action, options.origin, options.dry_run,
                                       digest, started_wall)
        except HistoryError as exc:
            recorded = Unavailable(str(exc))
            if not options.dry_run:
                r.warnings.append(f"history not recorded: {exc}")
            if history is not None:
                history.close()
                history = None
    else:
        recorded = Unavailable("a dry run records nothing" if options.dry_run else "not asked to")

    # A job's earlier drain times, for check's word and the timeout's reason:
    # a dry run reads them from the history without writing it.
    past: History | None = history
    if past is None and options.dry_run and open_history is not None \
            and os.path.exists(os.path.join(config.state.dir, "history.db")):
        with contextlib.suppress(HistoryError):
            past = open_history(config.state.dir, True, proc=options.proc)
            clocked.callback(past.close)
    if past is not None:
        r.drain_times = past.drain_times
    if history is not None and attempt_id is not None:
        r.before_signal = _write_down(history, attempt_id, r)
        r.before_stop, r.after_stop = _write_ahead(history, attempt_id, r)
    if not options.dry_run and not lock.refused:
        # A launcher a killed run left stopped goes on before anything else.
        for line in continue_left(config.state.dir, options.proc):
            log.warning(line)
            r.warnings.append(line)
    if not options.dry_run and not lock.refused and options.supervisors is not None:
        # What a killed run left (drain drop-ins, restart policies set aside)
        # goes first: it would outlive this run otherwise.
        for line in options.supervisors.clean_leftovers():
            log.warning(line)
            r.warnings.append(line)

    inventory = take_inventory(config.devices)
    r.warnings.extend(inventory.notes)
    # Only the built-in families have idle backends.
    if idle_check is default_idle_check and not set(inventory.families()) & set(FAMILIES):
        idle_check = None
    # Locked out: another run is draining these very holders; look at none.
    scan = ScanResult((), 0, (), 0) if lock.refused else \
        scan_holders(inventory, options.proc, exclude=runner.active_children())
    refused = device_view.refused_pids(r, scan)
    decisions = r.decide(scan.holders)
    # The device's own view before anyone is signalled: what it reports and
    # this host cannot see, or a device nobody can answer for, is a certain
    # veto, and every job the drain would stop first is spared. Only worth a
    # query when someone would be signalled, or the scan could not read all.
    first: IdleReport | None = None
    if idle_check is not None and inventory.nodes and not lock.refused \
            and (refused or any(d.signals for d in decisions)):
        first = device_view.ask_first(r, idle_check, inventory.families(), deadline)
        decisions += device_view.device_holders(r, first, {h.pid for h in scan.holders})
    unknown = device_view.uninspected(r, refused, first, inventory.families())
    seen = {holder_id(h) for h in scan.holders}
    to_drain = r.admit(decisions, vetoed=bool(r.reasons))
    certain_veto = bool(r.reasons)
    if to_drain:
        # Time for the idle check only when one will run (system/deadline.py).
        idle_reserve = idle_reserve_s(config.idle.settle_s, config.idle.command_timeout_s) \
            if idle_check is not None and inventory.nodes else 0.0
        try:
            r.drain(to_drain, seen, inventory, idle_reserve)
        except BaseException:
            _put_back(r, config, log)
            raise

    idle: IdleReport | IdleSkipped
    if not inventory.nodes:
        idle = IdleSkipped("none", "no accelerator nodes found")
    elif idle_check is None:
        idle = IdleSkipped("none", "no idle backend for the nodes found ("
                           + ", ".join(inventory.families()) + ")")
    elif certain_veto and first is not None:
        idle = first  # what the device said before the drain, and why it vetoed
    elif certain_veto and not options.dry_run:
        idle = IdleSkipped("skipped", "the verdict was already veto")
    elif r.cancelled:
        idle = IdleSkipped("skipped", "the guard was stopped")
    else:
        idle = idle_check(config.idle, inventory.families(), max(deadline, clock() + 0.5))
        idle = _fold_idle(r, idle, idle_check, inventory.families())

    if r.cancelled:
        r.reasons.append(f"the guard was stopped ({r.cancel_reason}) before it finished")
    if (r.reasons or unknown) and not options.dry_run:  # the suspend is refused
        r.warnings.extend(
            f"pid {hr.decision.holder.pid} {hr.decision.holder.comm} was drained as a plain "
            "process: nothing can start it again"
            for hr in r.results.values()
            if hr.outcome.kind == "exited" and hr.owner.kind == "plain")
    if r.reasons:  # a veto is certain whatever the uninspected processes hold
        verdict = Verdict("veto", tuple(r.reasons), (*unknown, *r.warnings))
    elif unknown:
        verdict = Verdict("unknown", tuple(unknown), tuple(r.warnings))
    else:
        verdict = Verdict("allow", (), tuple(r.warnings))
    order = {holder_id(h): i for i, h in enumerate(scan.holders)}
    holders = tuple(sorted(r.results.values(),
                           key=lambda hr: (hr.round, order.get(holder_id(hr.decision.holder), 1 << 30))))
    attempt = Attempt(attempt_id or 0, started_wall, started_wall + (clock() - start),
                      options.action, options.origin, options.dry_run, verdict.kind,
                      verdict.reasons, verdict.warnings, digest, holders,
                      stops=tuple(replace(s, attempt_id=attempt_id or 0) for s in r.stops))
    report = Report(attempt, inventory, scan.unreadable, idle, recorded, options.can_veto,
                    scan.unreadable_pids)
    # The verdict line first: it is what the operator and the journal wait
    # for; recording it (a commit, and SQLite's checkpoint on close) follows.
    log_verdict(report, log)
    clocked.close()  # the verdict is given: the restore below has a budget of its own
    stops: Sequence[Stop] = r.stops
    if history is not None and attempt_id is not None:
        try:
            # Stops written ahead are in already; the others (their row failed) go in now.
            history.finish(attempt)
            stops = history.pending_stops(attempt_id)
        except HistoryError as exc:
            log.warning(f"history not recorded: {exc}")
            report = replace(report, history=Unavailable(str(exc)), attempt=replace(
                attempt, warnings=(*attempt.warnings, f"history not recorded: {exc}")))
    if stops and verdict.kind != "allow" and options.supervisors is not None:
        # A refused attempt (veto or unknown) leaves the host as it found it.
        def note(stop: Stop, result: str, why: str) -> None:
            if history is not None and stop.id:
                try:
                    history.record_restore(stop.id, result, why)
                except HistoryError as exc:
                    log.warning(f"history not recorded: {exc}")

        # Inside the unit's TimeoutStartSec (deadline_s + 20 s): the verdict
        # came by deadline_s - ANSWER_MARGIN_S.
        with bounded(Deadline(time.monotonic() + RESTORE_AFTER_VETO_S)):
            restore(stops, options.supervisors, config.restore, enabled=config.restore.after_veto,
                    record=note, log=log.info)
    if history is not None:
        history.close()
    return report


def _put_back(r: RunState, config: Config, log: Logger) -> None:
    """A drain that failed half-way: the owners kept down get their settings back, and their jobs.

    Nothing may stay ``Restart=no`` (or a container's policy ``no``) because
    the guard broke; the error itself goes on to the caller.
    """
    if r.stops and r.options.supervisors is not None:
        restore(r.stops, r.options.supervisors, config.restore,
                enabled=config.restore.after_veto, record=lambda _s, _r, _w: None, log=log.info)


def _write_down(history: History, attempt_id: int,
                r: RunState) -> Callable[[Sequence[Decision], int], None]:
    """Who is about to get the signal, into the history before it is sent.

    A guard killed mid-drain leaves these rows (an interrupted attempt
    still says whom it signalled); the verdict's own rows replace them.
    """
    def write(decisions: Sequence[Decision], round_no: int) -> None:
        why = (f"was being sent {r.signame} when this was written; "
               "the guard ended before it recorded the outcome")
        rows = [HolderRecord(d, Outcome("signalled", why=why), round_no, owner=r.owner(d.holder))
                for d in decisions]
        try:
            history.signalling(attempt_id, rows)
        except HistoryError as exc:
            r.warnings.append(f"history: the holders about to be signalled were not "
                              f"recorded: {exc}")
    return write


def _write_ahead(history: History, attempt_id: int, r: RunState
                 ) -> tuple[Callable[[Sequence[Stop]], None],
                            Callable[[Sequence[Stop], Mapping[str, str]], None]]:
    """The stops into the history before the supervisors are asked, then completed.

    A guard killed after a stop job was queued or an engine's stop sent
    (TimeoutStartSec, an OOM kill, an operator's SIGKILL) leaves a row that
    ``restore`` and ``status`` act on; a stop the supervisor refused never
    happened and its row goes.
    """
    ids: dict[int, int] = {}  # seq -> row id

    def before(stops: Sequence[Stop]) -> None:
        try:
            written = history.stopping(attempt_id, stops)
        except HistoryError as exc:
            r.warnings.append(f"history: the jobs about to be stopped were not recorded "
                              f"first: {exc}")
            return
        ids.update(zip((s.seq for s in stops), written, strict=True))

    def after(stops: Sequence[Stop], answers: Mapping[str, str]) -> None:
        taken = [ids[s.seq] for s in stops if s.seq in ids and not answers.get(s.owner.key)]
        refused = [ids[s.seq] for s in stops if s.seq in ids and answers.get(s.owner.key)]
        try:
            history.stop_issued(taken, refused)
        except HistoryError as exc:
            r.warnings.append(f"history: the stops were not completed: {exc}")
    return before, after


def _fold_idle(r: RunState, idle: IdleReport, idle_check: IdleCheck,
               families: Sequence[str]) -> IdleReport:
    """Fold the device's own view into the verdict, device-reported pids included.

    A process the device reports but the scan missed (a container the guard
    could not read) goes through the same policy and drain; the device is
    then asked again.
    """
    to_drain = r.admit(device_view.device_holders(r, idle))
    if to_drain:
        r.signal(to_drain, reserve=r.config.idle.settle_s + 1.0)
        if not r.cancelled:
            idle = idle_check(r.config.idle, families, max(r.deadline, r.options.clock() + 0.5))
    # A dry run's device is still busy with the jobs a real run would drain first.
    if r.options.dry_run and any(hr.decision.action == "drain" for hr in r.results.values()):
        r.warnings.extend(f"(expected before the drain) {w}" for w in idle.veto_reasons)
    else:
        r.reasons.extend(idle.veto_reasons)
    r.warnings.extend(idle.warnings)
    return idle

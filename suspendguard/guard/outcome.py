"""A guard run's end: its verdict, the attempt that holds it, and the attempt recorded.

Veto when any reason is certain, whatever the uninspected processes hold;
else unknown when the guard cannot tell; else allow. A refused suspend
(veto or unknown) then leaves the host as it found it: the jobs the drain
stopped are started again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from suspendguard.config import RestoreConfig
from suspendguard.errors import HistoryError
from suspendguard.guard.look import Look
from suspendguard.guard.opening import Opening
from suspendguard.guard.report import Report
from suspendguard.guard.restore import STILL_DRAINING, Restored, earlier_boot, restore
from suspendguard.guard.run_state import RunOptions, RunState
from suspendguard.guard.said import Said
from suspendguard.idle.base import IdleReport
from suspendguard.model import Unavailable, holder_id
from suspendguard.record import Attempt, Stop
from suspendguard.store import lock as guard_lock
from suspendguard.system.boot import boot_ids
from suspendguard.system.deadline import RESTORE_AFTER_VETO_S, Deadline, bounded
from suspendguard.system.log import Logger
from suspendguard.verdict import Verdict

if TYPE_CHECKING:
    from suspendguard.store.history import History
    from suspendguard.supervise.owner import OwnerControl


def attempt(r: RunState, opening: Opening, look: Look, said: Said, unknown_said: Said) -> Attempt:
    """The run as it ended: its verdict, and each holder in the order it was dealt with.

    ``unknown_said``: why the verdict cannot be known (the look's, and the drain's rescans').
    """
    warnings = said.warnings
    unknown = unknown_said.reasons
    if (said.reasons or unknown) and not r.options.dry_run:  # the suspend is refused
        warnings += tuple(
            f"pid {hr.decision.holder.pid} {hr.decision.holder.comm} was drained as a plain "
            "process: nothing can start it again"
            for hr in r.results.values()
            if hr.outcome.kind == "exited" and hr.owner.kind == "plain")
    warnings = tuple(dict.fromkeys(warnings))  # the device is asked before and after the drain
    if said.reasons:
        verdict = Verdict("veto", said.reasons, (*(u.text for u in unknown), *warnings))
    elif unknown:
        verdict = Verdict("unknown", unknown, warnings)
    else:
        verdict = Verdict("allow", (), warnings)
    order = {holder_id(h): i for i, h in enumerate(look.scan.holders)}
    holders = tuple(sorted(r.results.values(), key=lambda hr: (
        hr.round, order.get(holder_id(hr.decision.holder), 1 << 30))))
    attempt_id = opening.attempt_id or 0
    took = r.deadline.clock() - opening.begun
    # Each stop with the row written ahead for it: a history that cannot finish the
    # attempt still gets the results of the restore after a veto there.
    return Attempt(attempt_id, opening.started, opening.started + took, r.options.action,
                   r.options.origin, r.options.dry_run, verdict, opening.digest, holders,
                   stops=tuple(replace(s, attempt_id=attempt_id, id=r.ledger.row(s))
                               for s in r.stops))


def record(restore_config: RestoreConfig, options: RunOptions, opening: Opening,
           report: Report) -> Report:
    """The attempt into the history; a refused one (veto or unknown) then leaves the host
    as it found it, its stopped jobs started again: only under the guard lock."""
    history, attempt = opening.history, report.attempt
    log = options.log
    stops: Sequence[Stop] = attempt.stops
    if history is not None and opening.attempt_id is not None:
        try:
            # Stops written ahead are in already; the others (their row failed) go in now.
            history.finish(attempt)
            stops = history.pending_stops(opening.attempt_id)
            # Kept for the check after resume: only a suspend that goes ahead has one (an
            # allow, or any look of the veto unit in observe mode, which refuses nothing).
            goes_ahead = (options.origin == "unit" if options.dry_run
                          else attempt.verdict.kind == "allow")
            if isinstance(report.idle, IdleReport) and goes_ahead:
                history.record_health_before(opening.attempt_id, [
                    (d.id, d.family, d.health) for d in report.idle.devices])
        except HistoryError as exc:
            log.warning(f"history not recorded: {exc}")
            verdict = replace(attempt.verdict,
                              warnings=(*attempt.verdict.warnings, f"history not recorded: {exc}"))
            report = replace(report, history=Unavailable(str(exc)),
                             attempt=replace(attempt, verdict=verdict))
    if ((stops or history is not None) and report.verdict.kind != "allow"
            and options.supervisors is not None and not options.dry_run
            and not opening.lock.refused):
        # Inside the unit's TimeoutStartSec (deadline_s + 20 s): the verdict
        # came by deadline_s - ANSWER_MARGIN_S. A run refused the guard lock stopped
        # nothing, and the stops an earlier restore left pending are the lock holder's
        # (a drain, or the resume unit's restore acting on them now).
        restore_at_once(stops, options.supervisors, restore_config, history, log)
    return report


def restore_at_once(stops: Sequence[Stop], supervisors: OwnerControl, config: RestoreConfig,
                    history: History | None, log: Logger) -> list[Restored]:
    """Start again the jobs a run stopped through their supervisors when no sleep follows (a
    veto; a Slurm node that did not sleep after all), each result into the history; and,
    before them, those an earlier restore of this boot left pending while their job still
    drained (:data:`STILL_DRAINING`). A unit whose job still drains is not started: its stop
    stays pending."""
    def note(stop: Stop, result: str, why: str) -> None:
        if history is not None and stop.id:
            try:
                history.record_restore(stop.id, result, why)
            except HistoryError as exc:
                log.warning(f"history not recorded: {exc}")

    if history is not None and config.after_veto:  # else it would record them skipped
        stops = [*_left_draining(history, stops, log), *stops]
    with bounded(Deadline(time.monotonic() + RESTORE_AFTER_VETO_S)):
        return restore(stops, supervisors, config, enabled=config.after_veto, record=note,
                       log=log.info, warn=log.warning, journal=log.journal,
                       draining=history.still_draining if history is not None else None)


def restore_attempt(state_dir: str, attempt: int, supervisors: OwnerControl,
                    config: RestoreConfig, log: Logger) -> list[Restored] | None:
    """The jobs attempt ``attempt`` stopped through their supervisors, started again as after
    a veto (a Slurm node that did not sleep after all), under the guard lock: a drain or a
    restore in progress owns the stops meanwhile. None when the lock was refused or the
    history could not say (a warning names why)."""
    from suspendguard.store.history import History
    lock = guard_lock.take(state_dir, guard_lock.LOCK_WAIT_S)
    if lock.refused:
        log.warning(f"the jobs attempt {attempt} stopped were not started again: {lock.refused}")
        return None
    if lock.warning:
        log.warning(lock.warning)
    try:
        with History.open(state_dir) as history:
            return restore_at_once(history.pending_stops(attempt), supervisors, config,
                                   history, log)
    except HistoryError as exc:
        log.warning(f"the jobs attempt {attempt} stopped were not started again: {exc}")
        return None
    finally:
        lock.release()


def _left_draining(history: History, stops: Sequence[Stop], log: Logger) -> list[Stop]:
    """The stops of this boot, but ``stops``, that an earlier restore left pending because
    their job still drained (a veto's, or the resume unit's after a killed attempt)."""
    ours = {s.id for s in stops}
    this = boot_ids(history.proc)
    try:
        pending = history.pending_stops()
    except HistoryError as exc:
        log.warning(f"history: the jobs left pending while they drained were not read: {exc}")
        return []
    return [s for s in pending if s.id not in ours and s.result is None
            and s.why == STILL_DRAINING and not earlier_boot(s, this)]

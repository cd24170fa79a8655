"""The guard's pipeline: open -> look -> drain -> confirm -> outcome, each step in its own module.

Plain Python over plain data, in steps that take values and return values
(:class:`~suspendguard.guard.opening.Opening`, :class:`~suspendguard.guard.look.Look`,
the :class:`~suspendguard.guard.run_state.Said` of each step); collaborators
(the /proc root, the idle check, the logger, the supervisors, the history)
are arguments so tests hand it real or fake ones. The history (SQLite) and
the supervisors (D-Bus, the engines' HTTP) come from the caller, so that a
dry run, which records nothing and mostly asks no supervisor, loads neither.
The same function serves the dry run, the veto unit and ``drain``; only its
arguments differ. One :class:`~suspendguard.system.deadline.Deadline` (one
clock, the guard's own cancel) bounds every wait of the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Sequence

from suspendguard.config import Config
from suspendguard.guard import outcome, rounds
from suspendguard.guard.confirm import confirm_idle
from suspendguard.guard.device_view import default_idle_check, uninspected
from suspendguard.guard.look import Look, look
from suspendguard.guard.opening import HistoryOpener, open_run
from suspendguard.guard.policy import ancestors
from suspendguard.guard.render import log_verdict
from suspendguard.guard.report import IdleSkipped, Report
from suspendguard.guard.run_state import IdleCheck, RunOptions, RunState
from suspendguard.guard.said import Said
from suspendguard.idle.base import IdleReport
from suspendguard.model import HolderId
from suspendguard.supervise.owner import OwnerControl
from suspendguard.system.deadline import ANSWER_MARGIN_S, Cancel, Deadline, bounded, idle_reserve_s
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS
from suspendguard.verdict import Reason

__all__ = ["HistoryOpener", "default_idle_check", "run"]


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
        idle_check=idle_check, log=log or Logger(), record=record, supervisors=supervisors,
        confirmed=frozenset(confirmed) if confirmed is not None else None)
    # Leave time to record and answer before systemd's TimeoutStartSec.
    deadline = Deadline(time.monotonic() + config.drain.deadline_s - ANSWER_MARGIN_S, cancel)
    opening = open_run(config, options, deadline, history)
    try:
        r = RunState(config.policy, config.drain, options, transient=config.restore.transient,
                     state_dir=config.state.dir, never=ancestors(os.getpid()), deadline=deadline,
                     token=opening.lock.token(), ledger=opening.ledger)
        with bounded(deadline):  # every wait before the verdict ends by then (or at SIGTERM)
            found = look(config.devices, config.idle, r, opening.lock)
            said = opening.said + found.said
            # A suspend refused whatever the drain does (a veto, an unknown) stops no job.
            to_drain, admitted = r.admit(found.decisions, refused=_refused(said, found.unknown))
            said += admitted
            certain_veto = bool(said.reasons)
            unreadable: list[int] = []  # by the rescans between the drain's rounds
            if to_drain:
                # Time for the idle check only when one will run (system/deadline.py).
                reserve = (idle_reserve_s(config.idle.settle_s, config.idle.command_timeout_s)
                           if found.idle_check is not None and found.inventory.nodes else 0.0)
                drained, unreadable = rounds.drain(r, to_drain, found.scan,
                                                   found.inventory, reserve, config.restore)
                said += drained
            idle, idle_said = confirm_idle(r, found, certain_veto, config.idle,
                                           _refused(said, found.unknown))
            said += idle_said
            late = _late_unknown(unreadable, found, idle)
            said += Said.warn(*late.warnings)
            if r.cancelled:
                said += Said.veto(Reason("guard-stopped", f"the guard was stopped "
                                         f"({deadline.cancel.reason if deadline.cancel else ''}) "
                                         "before it finished"))
            attempt = outcome.attempt(r, opening, found, said, found.unknown + Said(late.reasons))
        report = Report(attempt, found.inventory, found.scan.unreadable, idle, opening.recorded,
                        found.scan.unreadable_pids,
                        {key: e.attempt_id for key, e in r.earlier.items()})
        # The verdict line first: it is what the operator and the journal wait
        # for; recording it (a commit, and SQLite's checkpoint on close) follows.
        log_verdict(report, options.log)
        return outcome.record(config.restore, options, opening, report)
    except Exception as exc:
        opening.failed(exc)
        raise
    finally:
        opening.close()


def _refused(said: Said, unknown: Said) -> str:
    """Why the suspend is refused already, whatever happens next: "veto", "unknown" or ""."""
    return "veto" if said.reasons else "unknown" if unknown.reasons else ""


def _late_unknown(unreadable: Sequence[int], found: Look, idle: IdleReport | IdleSkipped) -> Said:
    """A process the drain's rescans could not read (a job started meanwhile) is as unknown
    as one the look could not read, unless the device's view after the drain answers."""
    return uninspected(sorted(set(unreadable) - set(found.scan.unreadable_pids)),
                       idle if isinstance(idle, IdleReport) else None,
                       found.devices)

"""A guard run's start: the guard lock, the history it records in, and what a killed run left.

A dry run only looks at the lock and records nothing (it may read the
history for a job's earlier drain times); a run that may signal takes the
lock, begins its attempt in the history, and first continues what a killed
run left stopped or set aside, which would outlive this run otherwise.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from suspendguard.config import Config
from suspendguard.errors import HistoryError, SuspendGuardError
from suspendguard.guard.held import continue_left
from suspendguard.guard.ledger import Ledger
from suspendguard.guard.policy import forgeable_rule_warnings
from suspendguard.guard.report import RECORDED
from suspendguard.guard.run_state import RunOptions
from suspendguard.guard.said import Said
from suspendguard.model import Unavailable
from suspendguard.store import lock as guard_lock
from suspendguard.system.deadline import Deadline, bounded
from suspendguard.system.procfs import ProcFS
from suspendguard.verdict import Reason

if TYPE_CHECKING:
    from suspendguard.store.history import History


class HistoryOpener(Protocol):
    """How a run opens the history it records in (``History.open``)."""

    def __call__(self, state_dir: str, readonly: bool = False, *, proc: ProcFS | None = None,
                 deadline: Deadline | None = None) -> History: ...


@dataclass
class Opening:
    """The run's start: the guard lock, the history it records in (if any), what they said."""

    lock: guard_lock.GuardLock
    started: float  # wall clock
    begun: float  # the same moment on the deadline's clock
    said: Said
    history: History | None = None
    attempt_id: int | None = None
    digest: str = ""  # the config's fingerprint, as the history records it
    recorded: Literal["recorded"] | Unavailable = RECORDED
    past: History | None = None  # read-only: a dry run's, or a run's that could not write it
    unwritable: str = ""  # why a run that records could not open its history or begin

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.history, self.attempt_id, self.history or self.past, self.unwritable)

    def close(self) -> None:
        """The history closed, then the lock released: the last thing a run does."""
        self.close_history()
        self.lock.release()

    def failed(self, exc: Exception) -> None:
        """The attempt ended with the error that ended the run, not read later as a kill."""
        if self.history is None or self.attempt_id is None:
            return
        with contextlib.suppress(HistoryError):
            self.history.failed(self.attempt_id, failure(exc))

    def close_history(self) -> None:
        for h in (self.history, self.past):
            if h is not None:
                h.close()
        self.history = self.past = None


def _db(state_dir: str) -> str:
    return os.path.join(state_dir, "history.db")


def _read_only(open_history: HistoryOpener, state_dir: str, proc: ProcFS) -> History | None:
    """The history opened to read, without writing: None where there is none or it cannot be."""
    if not os.path.exists(_db(state_dir)):
        return None
    try:
        return open_history(state_dir, True, proc=proc)
    except HistoryError:
        return None


def failure(exc: Exception) -> Reason:
    """Why a run that ended with an error gave no verdict: the error in the operator's words."""
    error = str(exc) if isinstance(exc, SuspendGuardError) else f"{type(exc).__name__}: {exc}"
    return Reason("guard-failed", f"the guard failed before it gave a verdict: {error}")


def open_run(config: Config, options: RunOptions, deadline: Deadline,
             open_history: HistoryOpener | None) -> Opening:
    """The guard lock taken (a dry run only looks), the attempt begun in the history (or why
    not), and what a killed run left put right."""
    state_dir = config.state.dir
    said = Said.warn(*forgeable_rule_warnings(config.policy))
    if options.dry_run:
        lock = guard_lock.peek(state_dir)
    else:
        lock = guard_lock.take(state_dir, min(guard_lock.LOCK_WAIT_S,
                                              max(0.0, config.drain.deadline_s / 3)))
    said += (Said.veto(Reason("guard-busy", lock.refused)) if lock.refused
             else Said.warn(lock.warning))
    opening = Opening(lock, time.time(), deadline.clock(), said)
    if open_history is not None and not options.record:
        opening.recorded = Unavailable("a dry run records nothing" if options.dry_run
                                       else "not asked to")
    elif open_history is not None:
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
            opening.close_history()
            if not options.dry_run:
                opening.said += Said.warn(f"history not recorded: {exc}")
                opening.unwritable = str(exc)
    reads_only = options.dry_run or bool(opening.unwritable)
    if open_history is not None and opening.history is None and reads_only:
        # Read without writing: a job's earlier drain and signal, for check's word; and,
        # for a run that cannot write it (a full disk), whom an earlier attempt signalled,
        # not signalled again.
        opening.past = _read_only(open_history, state_dir, options.proc)
        if opening.past is None and opening.unwritable and os.path.exists(_db(state_dir)):
            opening.said += Said.warn("history unreadable too: a holder an earlier attempt "
                                      "signalled, still saving, gets the signal again")
    if not (options.dry_run or lock.refused):
        # What a killed run left goes first: it would outlive this run otherwise. A
        # launcher left stopped goes on; drain drop-ins and restart policies set aside go.
        try:
            with bounded(deadline):
                lines = continue_left(state_dir, options.proc)
                if options.supervisors is not None:
                    lines += options.supervisors.clean_leftovers()
        except BaseException as exc:
            if isinstance(exc, Exception):
                opening.failed(exc)
            opening.close()
            raise
        for line in lines:
            options.log.warning(line)
        opening.said += Said.warn(*lines)
    return opening

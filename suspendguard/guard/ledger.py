"""What one guard run writes ahead into the history, and what it reads back from it.

Who is about to get the signal, and which jobs are about to be stopped,
go into the history before the signal or the stop: a guard killed
mid-drain (TimeoutStartSec, an OOM kill, an operator's SIGKILL) leaves rows
that an interrupted attempt shows and that ``restore`` and ``status`` act
on; the verdict's own rows replace them. A job's earlier drain times come
from the same history, or, for a dry run or a run that cannot write it (a full
disk), from a copy opened read-only.
A run without a history has the empty ledger: nothing written ahead, no
earlier times. Each write that fails answers with a warning, never an
exception: the history never changes a verdict.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from suspendguard.errors import HistoryError
from suspendguard.model import Holder, HolderId
from suspendguard.record import HolderRecord, Stop
from suspendguard.system.boot import ticks_now

if TYPE_CHECKING:
    from suspendguard.store.history import History


@dataclass(frozen=True, slots=True)
class Earlier:
    """An earlier attempt of this boot whose drain signal reached a holder (the guard's, a
    launcher's forward, an escalation's) and that still ran when its wait ended."""

    attempt_id: int
    began: float  # time.time()
    guard_start: int = 0  # its guard process's start, on the clock below (0: not known)

    def ticks(self) -> int:
        """When the attempt began, on the clock of a process's start time (boot.ticks_now):
        from the wall clock, never before its guard started. A wall clock stepped forward
        since (time synced after boot, an RTC read at resume) would put it earlier, and a
        rank that had the forward would be taken for one started since, and signalled twice."""
        return max(ticks_now(max(0.0, time.time() - self.began)), self.guard_start)

    def note(self, signame: str) -> str:
        ago = max(0.0, time.time() - self.began)
        return (f"attempt {self.attempt_id} (begun {ago:.0f} s ago) sent {signame} already: "
                "none is sent again, a second one cuts a job's save short")


class Ledger:
    """The history of one run: ``history`` to write ahead in (None: a run that records
    nothing), ``past`` to read earlier drain times from (the same, or a read-only copy);
    and the order of the run's stops, which names each stop's row. One per run."""

    def __init__(self, history: History | None = None, attempt_id: int | None = None,
                 past: History | None = None, unwritable: str = "") -> None:
        self.history = history if attempt_id is not None else None
        self.attempt_id = attempt_id or 0
        self.past = past
        self.unwritable = unwritable  # why a run that records could not open its history
        self._ids: dict[int, int] = {}  # a stop's seq -> its row
        self._orders = 0  # the stop order numbers given out in this run

    def orders(self, n: int) -> range:
        """The next ``n`` stop order numbers (``Stop.seq``) of this run, from 1. None is given
        twice in a run, a refused stop's included: a job whose supervisor refused, started
        again and kept down in a later round is a stop of its own, with its own row."""
        first = self._orders + 1
        self._orders += n
        return range(first, first + n)

    def signalling(self, rows: Sequence[HolderRecord]) -> str:
        """Write down who is about to be signalled; "" or the warning that it was not."""
        return self._ahead(lambda h: h.signalling(self.attempt_id, rows),
                           "the holders about to be signalled were not recorded ({})")

    def reached(self, holders: Sequence[Holder]) -> str:
        """Write down that the signal reached ``holders``; "" or the warning that it was not."""
        return self._ahead(lambda h: h.reached(self.attempt_id, holders),
                           "the holders the signal reached were not recorded ({}): an attempt "
                           "after a guard killed now would signal them again")

    def _ahead(self, write: Callable[[History], None], unrecorded: str) -> str:
        if self.history is None:
            # Nothing of this run is written, its verdict neither: no later attempt can tell.
            return (f"history: whom this run signals is not recorded ({self.unwritable}): a "
                    "holder still saving when it ends gets the signal again from the next "
                    "attempt" if self.unwritable else "")
        try:
            write(self.history)
        except HistoryError as exc:
            return "history: " + unrecorded.format(exc)
        return ""

    def stopping(self, stops: Sequence[Stop]) -> str:
        """Write down the stops before the supervisors are asked; "" or why they were not
        (then no supervisor is asked: a stop restore cannot read is a job left down)."""
        if self.history is None:
            return f"the history could not be written ({self.unwritable})" if self.unwritable \
                else ""
        try:
            written = self.history.stopping(self.attempt_id, stops)
        except HistoryError as exc:
            return f"the history could not be written ({exc})"
        self._ids.update(zip((s.seq for s in stops), written, strict=True))
        return ""

    def row(self, stop: Stop) -> int:
        """The history's row written ahead for ``stop``; 0 when none was."""
        return self._ids.get(stop.seq, 0) if self.history is not None else 0

    def restored(self, stop: Stop, result: str, why: str) -> None:
        """A stop's result, once the run itself started the job again (its drain broke)."""
        if self.history is not None and stop.seq in self._ids:
            with contextlib.suppress(HistoryError):  # the run's own error is what is said
                self.history.record_restore(self._ids[stop.seq], result, why)

    def still_draining(self, stop: Stop) -> bool:
        """Whether the job of one of this run's stops still drains after its signal
        (``History.still_draining``); False where nothing was written ahead."""
        return self.history is not None and self.history.still_draining(
            replace(stop, attempt_id=self.attempt_id))

    def stopped(self, stops: Sequence[Stop], answers: Mapping[str, str]) -> str:
        """Complete the stops the supervisors took; those they refused never happened."""
        if self.history is None:
            return ""
        ids = self._ids
        taken = [ids[s.seq] for s in stops if s.seq in ids and not answers.get(s.owner.key)]
        refused = [ids[s.seq] for s in stops if s.seq in ids and answers.get(s.owner.key)]
        try:
            self.history.stop_issued(taken, refused)
        except HistoryError as exc:
            return f"history: the stops were not completed: {exc}"
        return ""

    def signalled_before(self, holders: Sequence[Holder]) -> dict[HolderId, Earlier]:
        """Of ``holders``, those an earlier real attempt of this boot sent the drain signal
        and left running (none without a history, or where it cannot say)."""
        if self.past is None or not holders:
            return {}
        found = self.past.signalled_since(holders, but=self.attempt_id)
        return {key: Earlier(*found[key]) for key in found}

    def drain_times(self, holder: Holder) -> tuple[float, ...]:
        """The same job's earlier drain times, newest first (none without a history)."""
        return self.past.drain_times(holder) if self.past is not None else ()


NO_LEDGER = Ledger()

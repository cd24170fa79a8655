"""The guard's run as the commands start it: its supervisors and its history loaded on demand.

``check``, ``pre-sleep`` (the veto unit), ``drain`` (the real run from a
shell) and ``suspend`` share :func:`run_guard`. A run whose holders are all
plain processes, the usual dry run, imports neither the D-Bus client and
the engines' HTTP client (the supervisors) nor SQLite (the history): each
is imported here the first time a run needs it.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Protocol, TextIO

from suspendguard.config import Config
from suspendguard.errors import OutputLost
from suspendguard.guard.opening import failure
from suspendguard.guard.pipeline import run
from suspendguard.guard.render import render
from suspendguard.guard.report import Report
from suspendguard.model import CONTAINER_KINDS, SYSTEMD_KINDS, Holder, HolderId, Owner, Unavailable
from suspendguard.record import Stop
from suspendguard.supervise.owner import UnitNow, owner_of_cgroup
from suspendguard.system.deadline import RESTORE_AFTER_VETO_S, Cancel, Deadline, bounded
from suspendguard.system.log import Logger
from suspendguard.system.terminal import discard, terminal_width
from suspendguard.verdict import Verdict

if TYPE_CHECKING:
    from suspendguard.store.history import History
    from suspendguard.supervise.managers import ManagersAndEngines
    from suspendguard.system.procfs import ProcFS


class Caller(Protocol):
    """What a command hands the run: its configuration, its environment and where to print."""

    out: TextIO
    err: TextIO

    @property
    def environ(self) -> Mapping[str, str]: ...

    def config(self) -> Config: ...


def open_history(state_dir: str, readonly: bool = False, *, proc: ProcFS | None = None,
                 deadline: Deadline | None = None) -> History:
    """``History.open``, imported (SQLite) only by a run that records or reads it."""
    from suspendguard.store.history import History
    return History.open(state_dir, readonly, proc=proc, deadline=deadline)


class OnDemandOwnerControl:
    """supervise/managers.py's ManagersAndEngines, imported when a run first needs them.

    They bring the D-Bus client (asyncio, dbus-next) and the container
    engines' HTTP client with them: a run whose holders are all plain
    processes (their cgroup names no unit and no container), the usual dry
    run, never loads them. This is the run's side of the lazy-import
    boundary; the pipeline sees an ``OwnerControl`` (supervise/owner.py) like any other.
    """

    def __init__(self, environ: Mapping[str, str], state_dir: str) -> None:
        self.environ = environ
        self.state_dir = state_dir
        self._loaded: ManagersAndEngines | None = None

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def _real(self) -> ManagersAndEngines:
        if self._loaded is None:
            from suspendguard.supervise.managers import ManagersAndEngines
            self._loaded = ManagersAndEngines(environ=self.environ, state_dir=self.state_dir)
        return self._loaded

    def owner(self, holder: Holder) -> Owner:
        found = owner_of_cgroup(holder.cgroup)
        if found.kind not in CONTAINER_KINDS and found.kind not in SYSTEMD_KINDS:
            return found  # what ManagersAndEngines.owner answers too, without a question
        return self._real().owner(holder)

    def stop(self, owners: Sequence[Owner], signame: str,
             timeout_s: float = 10.0) -> dict[str, str]:
        return self._real().stop(owners, signame, timeout_s)

    def settle(self, stops: Sequence[Stop], deadline: Deadline) -> list[str]:
        return self._real().settle(stops, deadline)

    def started_meanwhile(self, owner: Owner) -> bool:
        return self._real().started_meanwhile(owner)

    def remove_dropins(self, owners: Sequence[Owner]) -> list[str]:
        return self._real().remove_dropins(owners)

    def reload(self, owners: Sequence[Owner]) -> Unavailable | None:
        return self._real().reload(owners)

    def unit_now(self, owner: Owner) -> UnitNow | Unavailable:
        return self._real().unit_now(owner)

    def start(self, owner: Owner, wait: bool = True) -> str | Unavailable:
        return self._real().start(owner, wait)

    def start_container(self, owner: Owner, stopped_at: float | None) -> tuple[str, str]:
        return self._real().start_container(owner, stopped_at)

    def recreate(self, owner: Owner) -> str | Unavailable | None:
        return self._real().recreate(owner)

    def take_warnings(self) -> list[str]:
        return self._real().take_warnings() if self._loaded is not None else []

    def clean_leftovers(self) -> list[str]:
        return self._real().clean_leftovers()


@contextmanager
def _sigterm_cancels() -> Iterator[Cancel]:
    """SIGTERM, SIGHUP and SIGINT to the guard end the run as a veto, recorded.

    SIGINT too: the unit can receive it (systemctl kill -s INT, a Ctrl-C
    at a console the guard shares), and it must not end the guard with no
    verdict, as a KeyboardInterrupt (exit 130) would.
    """
    cancel = Cancel()

    def handler(signum: int, _frame: FrameType | None) -> None:
        cancel.cancel(f"guard received {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield cancel
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        cancel.close()


def run_guard(ctx: Caller, dry_run: bool, action: str | None, origin: str, as_json: bool,
              wide: bool = False, observe: bool = False,
              confirmed: Collection[HolderId] | None = None) -> int:
    """The pipeline, recorded unless a dry run; the report printed (fitted to the
    terminal unless ``wide``); its exit status.

    ``observe``: a dry run that logs and records like a real one (the
    observe mode's look at a real suspend). ``confirmed``: the only holders
    that may be signalled.
    """
    config = ctx.config()
    # A dry run's report (text or JSON) already says what the log lines would;
    # a would-be veto is no error of this command, so nothing goes to stderr.
    log = Logger(ctx.err, ctx.environ, quiet=dry_run and not observe)
    begun = time.monotonic()
    try:
        report = guard_report(ctx, log, dry_run, action, origin, observe, confirmed)
    except Exception as exc:
        # The unit fails, so the sleep does not happen: whoever asked for it is told so.
        if not dry_run and origin == "unit":
            tell_refused(config, Verdict("unknown", (failure(exc),)), action or "suspend", log, begun)
        raise
    try:
        print_report(report, ctx, as_json, wide)
    except OutputLost as exc:
        if origin != "unit":
            raise
        # The unit's answer is its exit status, its verdict logged and recorded already:
        # a report the journal's stream did not take changes nothing of it.
        log.warning(f"the report was not written ({exc}); the verdict stands")
        discard(ctx.out)
    if not dry_run and origin == "unit" and report.verdict.kind != "allow":
        # An attempt whose verdict the history did not store reads "interrupted" there:
        # the users are pointed at the journal alone (attempt 0), as for one never begun.
        attempt = 0 if isinstance(report.history, Unavailable) else report.attempt.id
        tell_refused(config, report.verdict, action or "suspend", log, begun, attempt)
    return report.verdict.exit_status


def guard_report(ctx: Caller, log: Logger, dry_run: bool, action: str | None, origin: str,
                 observe: bool = False, confirmed: Collection[HolderId] | None = None) -> Report:
    """One run of the pipeline, recorded unless a dry run, ended early by SIGTERM."""
    config = ctx.config()
    with _sigterm_cancels() as cancel:
        # A dry run changes nothing, the history included.
        return run(config, dry_run=dry_run, action=action, origin=origin, log=log,
                   cancel=cancel, record=not dry_run or observe, history=open_history,
                   confirmed=confirmed,
                   supervisors=OnDemandOwnerControl(ctx.environ, config.state.dir))


def _told_key(action: str, verdict: Verdict) -> str:
    """What makes a refusal the same as one told already: its reasons' identities, not their
    words, whose figures (a busy device's load) change at every ask."""
    return "\n".join((action, *(" ".join(map(str, r.identity)) for r in verdict.reasons)))


def print_report(report: Report, ctx: Caller, as_json: bool, wide: bool) -> None:
    """The run's report on ``ctx.out``, as ``check`` prints it: JSON, or text fitted to the
    terminal (coloured on one, unless $NO_COLOR)."""
    if as_json:
        json.dump(report.to_json(), ctx.out, indent=2)
        ctx.out.write("\n")
    else:
        render(report, ctx.out, colour=ctx.out.isatty() and "NO_COLOR" not in ctx.environ,
               width=None if wide else terminal_width(ctx.environ, ctx.out))
    ctx.out.flush()


def tell_refused(config: Config, verdict: Verdict, action: str, log: Logger,
                 begun: float, attempt: int | None = None) -> None:
    """The refused sleep told to the users (notify/), once its verdict is logged.

    The unit's TimeoutStartSec is [drain] deadline_s + 20 s: the verdict came
    by deadline_s - ANSWER_MARGIN_S and the restore after a veto took at most
    RESTORE_AFTER_VETO_S, so telling by deadline_s + RESTORE_AFTER_VETO_S
    leaves the unit 5 s to end. The run's signal handlers are gone by now:
    a SIGTERM to the guard ends it, and the telling, at once. A refusal told already
    in the state folder (store/told.py) is not told again; one told to nobody is not
    kept as told.

    Never raises: the verdict is the unit's answer whoever was told, so a telling that
    broke (its modules, the D-Bus client among them, that would not import) is one
    warning, and the exit status and the retry offer are the verdict's.
    """
    try:
        _tell_once(config, verdict, action, log, begun, attempt)
    except Exception as exc:
        log.warning(f"notify: not told: {type(exc).__name__}: {exc}")


def _tell_once(config: Config, verdict: Verdict, action: str, log: Logger,
               begun: float, attempt: int | None) -> None:
    # Imported here: the D-Bus client comes with them, and only a refusal needs it.
    from suspendguard.notify.tell import tell
    from suspendguard.store import told
    note = told.first_time(config.state.dir, _told_key(action, verdict))
    if note is None:
        log.info(f"notify: the same refusal of the {action} was told less than "
                 f"{told.AGAIN_S:g} s ago: not told again")
        return
    until = begun + config.drain.deadline_s + RESTORE_AFTER_VETO_S
    with bounded(Deadline(until)):
        if not tell(config.notify, verdict, action, log, until, attempt=attempt):
            told.untold(note)


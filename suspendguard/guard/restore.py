"""Start again what the guard stopped through its owners: after resume, or at once after a veto.

Exactly what was stopped, in the order it was stopped, through the same
owner; each gets a result: started, starting (its start job still ran when
the restore's budget ended), failed (with the reason), skipped (``[restore]
skip``, the unit is gone or masked, it runs already, someone started and
stopped it again since the guard stopped it, or stopped a launcher the drain
left running), or left (stopped in an earlier boot, and ``[restore]
earlier_boot = "leave"``). A stop whose turn comes after the budget ended
gets no result: it stays pending, for the next ``restore`` (but a unit
someone else started since the guard stopped it, which that restore could
no longer tell once the drop-ins went: skipped); so does a
transient unit systemd did not make again, and a unit or container whose
job the drain signalled and did not see exit, and which still runs (its
save outlived ``[drain] timeout_s``, or the guard was killed in its wait):
it is started by the first restore that finds that job gone, never beside it. The budget is the caller's
(system/deadline.py).

Before a restore after resume, the health check asks :class:`Blocker`
who holds a device now: a repair that resets it must not run under a
process the guard did not stop.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from suspendguard.config import Config, RestoreConfig
from suspendguard.guard.identity import vouch
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.scan import scan_holders
from suspendguard.model import Inventory, Owner, Unavailable, holder_id
from suspendguard.record import Stop
from suspendguard.supervise.owner import STOPPED_LATER, NotMade, OwnerControl, UnitNow
from suspendguard.system import deadline, journal_ids, journald
from suspendguard.system.procfs import ProcFS


@dataclass(frozen=True, slots=True)
class Restored:
    stop: Stop
    result: str  # started | starting | failed | skipped | left | pending (untried, or it drains)
    why: str

    def describe(self) -> str:
        return f"{self.stop.owner.name}: {self.result}" + (f" ({self.why})" if self.why else "")


Record = Callable[[Stop, str, str], None]
# Whether a job the stop's attempt signalled, and did not see exit, still runs (its save).
Draining = Callable[[Stop], bool]
# The why of a stop left pending while its job still drains (the history keeps it with no
# result): the next restore, whichever runs it, starts the owner once that job has gone.
STILL_DRAINING = ("still draining after the guard's signal: the next restore starts it once "
                  "its job has stopped")
# Stopped through a systemd manager: the system's, or a user's (user@UID.service).
UNIT_KINDS = ("systemd-service", "user-service")
# How long after the end of a drain a launcher unit it left running may still go down on its
# own once it noticed its job's end (torchrun's --monitor-interval was 5 s by default in older
# PyTorch releases); one that went down later was stopped by someone else.
LAUNCHER_EXIT_S = 30.0
STARTED_AND_STOPPED = "started and stopped again by someone else after the guard stopped it"
# A stop whose turn came after the budget, its unit started by someone else since (its
# marker gone): recorded, not left pending, for its marker went with this restore's drop-ins.
STARTED_MEANWHILE_LATE = ("started by someone else after the guard stopped it, and the restore's "
                          "budget ended before its turn: theirs to run or keep stopped")


def restore(stops: Sequence[Stop], supervisors: OwnerControl, config: RestoreConfig, *,
            enabled: bool, record: Record, log: Callable[[str], None],
            warn: Callable[[str], None], boot_ids: Collection[str] = (),
            journal: bool = False, draining: Draining | None = None) -> list[Restored]:
    """Bring back ``stops`` (in their order); ``enabled`` False only removes the drain drop-ins.

    ``log``: each stop's result; ``warn``: a manager not reloaded once the
    drop-ins went (its units keep the drain's settings until it is).
    ``boot_ids``: the names of this boot (``ProcFS.boot_ids``); a stop made
    in another is left down unless ``[restore] earlier_boot = "start"``.
    ``journal``: under journald, each failed start also goes there as one
    structured entry (:func:`failed_entry`).
    ``draining``: whether a stop's job still drains (``History.still_draining``): such an owner
    is not started, and its stop stays pending (recorded with result ``pending``, which the
    history keeps as none, and :data:`STILL_DRAINING`); None: no job is known to.
    An owner stopped again by a later stop in ``stops`` is brought back by that one.
    """
    if not stops:
        return []
    units = [s.owner for s in stops if s.owner.kind in UNIT_KINDS]
    meanwhile = {o.key for o in units if supervisors.started_meanwhile(o)}
    # The drop-ins go first and each manager reloads once (one reload, not one a unit: a
    # large host's takes seconds, and the restore after a veto has 15 s): the job starts,
    # and is stopped next time by an operator, with its own KillSignal=.
    if supervisors.remove_dropins(units):
        # Half of what is left at most: a hung reload must leave the starts their time (a
        # start needs no reload; the drain's settings then stay until one, which is said).
        bound = deadline.current()
        with deadline.bounded(bound.within(bound.left() / 2)):
            reloaded = supervisors.reload(units)
        if isinstance(reloaded, Unavailable):
            warn(reloaded.reason)
    newest = {s.owner.key: s for s in stops}  # the last stop of each owner decides
    out = []
    for stop in stops:
        later = newest[stop.owner.key]
        if deadline.current().left() <= 0:
            if stop.owner.key in meanwhile:
                # Its marker went with the drop-ins above: a next restore could not tell
                # that someone else started it, and would start it over their stop.
                done = Restored(stop, "skipped", STARTED_MEANWHILE_LATE)
                record(stop, done.result, done.why)
            else:
                done = Restored(stop, "pending", "the restore's budget ended before its turn: "
                                "suspendguard restore starts it")
            log(f"restore: {done.describe()}")
            out.append(done)
            continue
        if earlier_boot(stop, boot_ids) and config.earlier_boot == "leave":
            result, why = "left", ("stopped before a reboot; [restore] earlier_boot = \"leave\": "
                                   "start it yourself if it is still wanted")
        elif later is not stop:
            result, why = "skipped", (f"stopped again by attempt {later.attempt_id}: that stop "
                                      "brings it back")
        elif not enabled and draining is not None and draining(stop):
            result, why = "pending", STILL_DRAINING  # for a restore that is on, once it left
        elif not enabled:
            result, why = "skipped", "[restore] is off for this case"
        else:
            result, why = _one(stop, supervisors, config, stop.owner.key in meanwhile,
                               draining or _never)
        record(stop, result, why)
        done = Restored(stop, result, why)
        log(f"restore: {done.describe()}")
        if journal and result == "failed":
            journald.send(failed_entry(stop, why))
        out.append(done)
    return out


def failed_entry(stop: Stop, why: str) -> dict[str, str]:
    """The journal entry of a stopped job the guard could not start again, with its MESSAGE_ID."""
    o = stop.owner
    what = f"container {o.name}" if o.kind in ("docker", "podman") else o.name
    entry = {"MESSAGE": f"could not start {what} again: {why}",
             "MESSAGE_ID": journal_ids.RESTORE_FAILED, "PRIORITY": "3",
             "SYSLOG_IDENTIFIER": "suspendguard",
             "SUSPENDGUARD_OWNER": o.key, "SUSPENDGUARD_OWNER_KIND": o.kind,
             "SUSPENDGUARD_WHY": why, "SUSPENDGUARD_ATTEMPT": str(stop.attempt_id or "")}
    if o.kind in UNIT_KINDS:
        entry["SUSPENDGUARD_UNIT"] = o.name
        if o.uid is not None:
            entry["SUSPENDGUARD_UID"] = str(o.uid)
    elif o.kind in ("docker", "podman"):
        entry["SUSPENDGUARD_CONTAINER"] = o.name
    return entry


def earlier_boot(stop: Stop, boot_ids: Collection[str]) -> bool:
    """Whether ``stop`` was made in another boot than this one, named by ``boot_ids``:
    none of the names it keeps is this boot's (system/boot.py; unknown either side: no)."""
    names = set(stop.boot_id.split())
    return bool(names and boot_ids and not names & set(boot_ids))


def _never(_stop: Stop) -> bool:
    return False


def _one(stop: Stop, supervisors: OwnerControl, config: RestoreConfig,
         started_meanwhile: bool, draining: Draining) -> tuple[str, str]:
    if any(fnmatch.fnmatchcase(stop.owner.key, glob) for glob in config.skip):
        return "skipped", "matches [restore] skip"
    owner = stop.owner
    if owner.kind in ("docker", "podman"):
        # Asked first: a job that ends its save after the engine saw the container running
        # must not leave it recorded as skipped, and down for good (an on-failure policy does
        # not start a job that exits 0). Its policy goes back all the same.
        saving = draining(stop)
        result, why = supervisors.start_container(owner, stop.stopped)
        if saving and result == "skipped":  # with what became of its policy, where it failed
            return "pending", STILL_DRAINING + "".join(why.partition("; its restart policy")[1:])
        return result, why
    if owner.kind not in UNIT_KINDS:
        return "skipped", f"a {owner.kind} cannot be started again by this version"
    now = supervisors.unit_now(owner)
    if isinstance(now, Unavailable):
        return "failed", now.reason
    if now.load_state == "masked":
        return "skipped", "the unit was masked meanwhile"
    up = now.active_state in ("active", "activating", "reloading")
    if not (up and started_meanwhile) and draining(stop):
        # Its job still saves: whatever the unit's state (active, or inactive with the job
        # left in its cgroup), a start now would run a second job beside it.
        return "pending", STILL_DRAINING
    if started_meanwhile and not up:  # and stopped again, or being stopped, or it ended
        # Before a transient unit that is gone is made again: whoever started it since (a
        # systemd-run of their own) has had it end, and it is theirs to run again.
        return "skipped", STARTED_AND_STOPPED
    if now.load_state in ("not-found", ""):
        return _recreate(owner, supervisors)
    if now.active_state == "active" and not started_meanwhile:
        # Never started again since the drain: its main process (a launcher
        # such as cron) held nothing and outlived the job.
        return "skipped", ("still running since the drain: its main process was not the job, "
                           "or outlived [drain] timeout_s")
    if up:
        return "skipped", f"already {now.active_state} (started meanwhile)"
    if now.active_state == "deactivating" or now.job == "stop":
        # Still stopping (it outlived [drain] timeout_s): systemd starts it
        # once its stop has ended, which may take up to its TimeoutStopSec=.
        queued = supervisors.start(owner, wait=False)
        if isinstance(queued, Unavailable):
            return "failed", queued.reason
        return "started", "queued: it starts once its stop has ended"
    if _stopped_later(stop, now):
        return "skipped", STOPPED_LATER
    return _answered(supervisors.start(owner))


def _stopped_later(stop: Stop, now: UnitNow) -> bool:
    """Whether the end of this stop's drain saw the unit still running (a launcher that
    outlived its job), and it went down later than a launcher noticing its job's end would:
    someone else stopped it (the marker tells a start, not a stop)."""
    if now.up_after_drain is None or stop.stopped is None:
        return False
    stop_time, seen_at = now.up_after_drain
    return stop_time == stop.stopped and now.inactive_since > seen_at + LAUNCHER_EXIT_S


def _recreate(owner: Owner, supervisors: OwnerControl) -> tuple[str, str]:
    """A unit gone since the drain: a transient one (systemd-run) is made again from its record."""
    made = supervisors.recreate(owner)
    if made is None:
        return "skipped", "the unit no longer exists"
    if isinstance(made, NotMade):  # its record kept: systemctl start cannot make it
        return "pending", (f"it could not be made again as a transient unit ({made.reason}): "
                           "its recorded settings are kept, and suspendguard restore tries again")
    return _answered(made, "made again as a transient unit from what was recorded before the "
                     "drain")


def _answered(started: str | Unavailable, how: str = "") -> tuple[str, str]:
    """A start job's answer as the stop's result and why; ``how``: how it was started."""
    said = f"{how}; " if how else ""
    if isinstance(started, Unavailable):
        return "failed", said + started.reason
    if started == "starting":
        return "starting", (f"{said}its start job still ran when the restore's budget ended: "
                            "suspendguard status shows whether it came up")
    if started != "active":
        return "failed", f"{said}the start job ended with the unit {started}"
    return "started", how


class Blocker:
    """What holds a family's device now and is not the driver's own: the guard did not stop it.

    The family's compute nodes and the ``[devices] nodes`` the operator
    added. Only the driver's own daemons, vouched for as the drain's
    built-in rule does (guard/identity.py, such as nvidia-persistenced), and
    this process do not count. A holder a ``[policy] ignore`` rule matches
    counts: the rule keeps the drain's signal from it, and says nothing of
    whether a reload of the driver's module under it is safe.
    """

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, family: str) -> Sequence[str]:
        devices = replace(self.config.devices, families=(family,), management=())
        inventory = take_inventory(devices)
        compute = Inventory(tuple(n for n in inventory.nodes if n.role == "compute"))
        scan = scan_holders(compute)
        vouched = vouch(scan.holders, ProcFS(), None)
        held = [f"pid {h.pid} {h.comm}" for h in scan.holders
                if h.pid != os.getpid() and vouched.daemons.get(holder_id(h)) != ""]
        # A process the scan could not read may hold the device: not known
        # free is not free.
        if scan.unreadable:
            held.append(f"{scan.unreadable} processes that could not be inspected")
        return held

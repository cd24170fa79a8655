"""Keep supervised jobs from restarting while the guard drains them, and start them again afterwards.

Every holder gets the drain signal from the guard itself (guard/drain.py),
whatever runs it: the owner is asked only for what the owner alone can do.
A systemd service first gets a runtime drop-in
(``/run/systemd/system/UNIT.d/zz-suspendguard-drain.conf``, supervise/dropin.py:
``Restart=no``, the drain signal as ``KillSignal=``, ``TimeoutStopSec=``
raised to ``[drain] timeout_s``) and one daemon reload for all units, then
its holders are signalled directly, and the unit sees their exit as any
exit. A stop job is not used: ``KillMode=mixed`` and ``KillMode=process``
send its signal to the main process only, which is a launcher (torchrun, a
shell, cron) more often than the job, and stopping cron would stop the
launcher and leave its job holding the node. A unit whose main process
holds nothing and outlives its job stays running; one whose processes all
exit goes down and stays down, and restore starts it again. The drop-ins
are removed (and the manager reloaded) when the jobs are started again.
Docker and Podman containers go through their engine (supervise/containers.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from suspendguard.model import (
    CONTAINER_KINDS,
    SYSTEMD_KINDS,
    Holder,
    NoAnswer,
    Owner,
    Unavailable,
)
from suspendguard.record import Stop
from suspendguard.supervise import leftovers, usermanager
from suspendguard.supervise.containers import Engines
from suspendguard.supervise.dropin import (
    DROPIN_NAME,
    FORMER_NAMES,
    MARKER_NAME,
    dropin_text,
    stop_timeout,
    unanswered_reload,
)
from suspendguard.supervise.owner import UnitNow, owner_of_cgroup
from suspendguard.supervise.setaside import SetAside, TransientUnits
from suspendguard.supervise.user_services import UserServices, by_uid, inactive_since
from suspendguard.system import deadline
from suspendguard.system.boot import boot_id
from suspendguard.system.dbus import systemd
from suspendguard.system.deadline import Deadline
from suspendguard.system.procfs import ProcFS

DROPIN_ROOT = "/run/systemd/system"
# How long the manager gets to finish stopping a unit once the processes exited
# (ExecStopPost=, cgroup release) before the guard looks whether it came back.
STOP_SETTLE_S = 2.0
# A timer due later than this after the stop is the next sleep's business.
TIMER_WINDOW_S = 5.0
# The units the end of a drain saw still running, their main process not the job, by owner
# key: [the stop's time, when seen (monotonic)]. One that went down later than a launcher noticing its
# job's end would was stopped by someone else, and restore leaves it down.
LEFT_RUNNING_FILE = "units-up-after-drain.json"


class ManagersAndEngines:
    """The owners of holders, and the supervisors' own ways to stop and start them
    (the guard's OwnerControl: supervise/owner.py).

    System services go through the system manager over D-Bus, user services
    (``user@UID.service``) through their user's manager
    (supervise/user_services.py), containers through their engine
    (supervise/containers.py).
    """

    def __init__(self, *, dropin_root: str = DROPIN_ROOT, bus_address: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = deadline.nap,
                 environ: Mapping[str, str] | None = None, state_dir: str | None = None) -> None:
        """``environ``: where the engines' sockets are named (DOCKER_HOST, CONTAINER_HOST);
        ``state_dir``: where restart policies set aside for a drain are kept."""
        self.dropin_root = dropin_root
        self.state_dir = state_dir
        self.engines = Engines(os.environ if environ is None else environ, state_dir)
        self.bus_address = bus_address
        self.clock = clock
        self.sleep = sleep
        self.users = UserServices(clock)
        self.warnings: list[str] = []
        self.transient = TransientUnits(state_dir)
        self.left_running = SetAside(state_dir, LEFT_RUNNING_FILE, "the units left running")
        self.left_running.warnings = self.transient.warnings
        self._owners: dict[str, Owner] = {}

    # -- who ---------------------------------------------------------------

    def owner(self, holder: Holder) -> Owner:
        found = owner_of_cgroup(holder.cgroup)
        if found.kind in CONTAINER_KINDS:
            if found.key not in self._owners:
                self._owners[found.key] = self.engines.owner(found)
            return self._owners[found.key]
        if found.kind not in SYSTEMD_KINDS:
            return found
        if found.key not in self._owners:
            states = (systemd.service_states([found.name], address=self.bus_address)
                      if found.kind == "systemd-service" else self.users.states(found))
            if isinstance(states, Unavailable):
                self._owners[found.key] = found.with_note(states.reason)
            else:
                self._owners[found.key] = _with_state(found, states[found.name])
        return self._owners[found.key]

    # -- stopping ----------------------------------------------------------

    def stop(self, owners: Sequence[Owner], signame: str,
             timeout_s: float = 10.0) -> dict[str, str]:
        """Keep each owner from restarting its job; for each key, "" when kept, else why not.

        Nothing is signalled here: the caller signals the holders once this
        returns. ``timeout_s``: the drain's wait, which no supervisor's own
        stop timeout may cut short.
        """
        units = [o for o in owners if o.kind == "systemd-service"]
        containers = [o for o in owners if o.kind in CONTAINER_KINDS]
        out = {o.key: f"cannot stop a {o.kind} through its supervisor" for o in owners
               if o.kind not in SYSTEMD_KINDS and o.kind not in CONTAINER_KINDS}
        if containers:
            out.update(self.engines.stop(containers, signame, timeout_s))
        out.update(self.users.stop([o for o in owners if o.kind == "user-service"], signame,
                                   timeout_s))
        for o in units:
            if o.transient and (unrecorded := self.transient.record(o, self.bus_address)):
                out[o.key] = unrecorded  # restore after resume could not make it again
                continue
            try:
                self._write_dropin(o.name, signame, stop_timeout(o.timeout_stop_s, timeout_s))
            except OSError as exc:
                out[o.key] = f"cannot write the drain drop-in for {o.name}: {exc.strerror}"
        kept = [o for o in units if o.key not in out]
        if not kept:
            return out
        # The reload has a timeout of its own (a large host's takes seconds),
        # inside the run's deadline; when it fails the drop-ins go again.
        reloaded = systemd.reload_manager(address=self.bus_address)
        if isinstance(reloaded, NoAnswer):
            self.warnings.append(unanswered_reload("", kept, reloaded))
            reloaded = None
        if reloaded is not None:
            self.remove_dropins(kept)
        for o in kept:
            out[o.key] = ("" if reloaded is None else
                          f"the daemon-reload before the drain failed: {reloaded.reason}")
        return out

    def recreate(self, owner: Owner) -> str | Unavailable | None:
        """Make a transient unit recorded before the drain again (supervise/setaside.py)."""
        return self.transient.make_again(owner, self.bus_address)

    def settle(self, stops: Sequence[Stop], deadline: Deadline) -> list[str]:
        """After the exits: wait for the units to finish stopping and for timers due soon; who came back.

        A reason for each unit that is running again, or about to (a start
        job queued).
        """
        back = self.engines.settle(stops)
        return back + self._settle_units(stops, deadline)

    def _settle_units(self, stops: Sequence[Stop], deadline: Deadline) -> list[str]:
        ours = {s.owner.key: s for s in stops if s.owner.kind in SYSTEMD_KINDS}
        units = [s.owner for s in ours.values()]
        if not units:
            return []
        states = self._after_stop(units, deadline.cap(STOP_SETTLE_S))
        if isinstance(states, Unavailable):
            return [f"cannot tell whether {', '.join(o.name for o in units)} stayed stopped: "
                    f"{states.reason}"]
        # A timer (OnUnitInactiveSec=, a calendar event) may start the unit
        # again a moment from now: wait for it, inside the deadline.
        now = time.clock_gettime(time.CLOCK_MONOTONIC)
        due = [t for st in states.values() for t in st.next_elapse.values()
               if now < t < now + TIMER_WINDOW_S]
        if due:
            wait = deadline.cap(max(due) - now + 0.2)
            self.sleep(wait)
            again = self._after_stop(units, 0.0)
            if not isinstance(again, Unavailable):
                states = again
        reasons = []
        for o in units:
            st = states[o.key]
            # Still active and never started again (its marker is there): a
            # launcher whose job was drained, left running as it should be.
            started = st.job == "start" or st.active_state == "activating" or (
                st.active_state in ("active", "reloading") and self.started_meanwhile(o))
            if started:
                by = f" (triggered by {', '.join(st.triggered_by)})" if st.triggered_by else ""
                reasons.append(f"{o.name} was started again during the drain{by}: "
                               "it would hold the accelerator while the machine sleeps")
            elif st.active_state in ("active", "reloading"):  # restore tells a stop after
                # Monotonic, as InactiveEnterTimestampMonotonic: no sleep counted, one boot's.
                self.left_running.put(o.key, [ours[o.key].stopped, time.monotonic(),
                                              boot_id(ProcFS())])
        return reasons

    def _after_stop(self, owners: Sequence[Owner], wait_s: float
                    ) -> dict[str, systemd.AfterStop] | Unavailable:
        """Each owner (by key) once it finished stopping; the triggers as read before the drain."""
        system = [o for o in owners if o.kind == "systemd-service"]
        out: dict[str, systemd.AfterStop] = {}
        if system:
            states = systemd.after_stop({o.name: o.triggered_by for o in system}, wait_s,
                                        address=self.bus_address)
            if isinstance(states, Unavailable):
                return states
            out.update({o.key: states[o.name] for o in system})
        users = self.users.after_stop([o for o in owners if o.kind == "user-service"],
                                      self.clock() + wait_s)
        if isinstance(users, Unavailable):
            return users
        out.update(users)
        return out

    # -- drop-ins ----------------------------------------------------------

    def clean_leftovers(self, warn: Callable[[str], None] | None = None) -> list[str]:
        """Put back what a killed run left (supervise/leftovers.py); a line for each thing put back.

        ``warn``: where a line goes instead whose manager was not reloaded once its drop-ins
        went (its units keep the drain's settings): restore's exit status counts it.

        What keeps down the owner of a stop the history has held, or pending after a
        finished attempt, stays (:func:`leftovers.restores_own`): the next restore puts it
        back, and needs a held unit's marker to tell an operator's start (a restore whose
        budget ended took its own units' markers, and recorded those it told started).
        """
        keep = leftovers.restores_own(self.state_dir)
        notes = self.engines.put_back_policies(keep)
        units = [o for u in leftovers.system_dropins(self.dropin_root)
                 if (o := Owner("systemd-service", u)).key not in keep]
        users = [o for o in leftovers.user_dropins() if o.key not in keep]
        said = len(self.users.warnings)
        removed = {os.path.dirname(p) for p in self.remove_dropins([*units, *users])}
        gone = [o for o in units if os.path.dirname(self._dropin(o.name)) in removed]
        gone += [o for o in users if self.users.folder(o) in removed]
        # Only those removed are said removed: a user's that could not be (its account gone)
        # is said by the users' warning, with why and the file to remove by hand.
        notes += self.users.warnings[said:]
        del self.users.warnings[said:]
        if gone:
            failed = self.reload(gone)
            names = ", ".join(o.name if o.uid is None else f"{o.name} (uid {o.uid})" for o in gone)
            line = (f"removed the drain drop-in a killed guard run left on {names}; "
                    + ("its manager was reloaded" if failed is None else failed.reason))
            if failed is not None and warn is not None:
                warn(line)
            else:
                notes.append(line)
        return notes

    def _dropin(self, unit: str) -> str:
        return os.path.join(self.dropin_root, f"{unit}.d", DROPIN_NAME)

    def _write_dropin(self, unit: str, signame: str, timeout_stop_s: float | None) -> None:
        path = self._dropin(unit)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        marker = os.path.join(os.path.dirname(path), MARKER_NAME)
        with open(marker, "w"):
            pass
        with open(tmp, "w") as f:
            f.write(dropin_text(signame, marker, timeout_stop_s))
        os.replace(tmp, path)

    def started_meanwhile(self, owner: Owner) -> bool:
        """Whether the unit was started since the guard stopped it (its marker is gone)."""
        if owner.kind == "user-service":
            return self.users.started_meanwhile(owner)
        d = os.path.dirname(self._dropin(owner.name))
        return (os.path.exists(os.path.join(d, DROPIN_NAME)) and
                not os.path.exists(os.path.join(d, MARKER_NAME)))

    def remove_dropins(self, owners: Sequence[Owner]) -> list[str]:
        """Remove the drain drop-ins of these units; the paths removed.

        A transient unit someone else started since the drain (its marker gone) loses its
        record with them: restore never makes it again, and once they are gone no later
        restore could tell that it was started.
        """
        removed = self.users.remove_dropins([o for o in owners if o.kind == "user-service"])
        for unit in dict.fromkeys(o.name for o in owners if o.kind == "systemd-service"):
            path = self._dropin(unit)
            folder = os.path.dirname(path)
            if self.started_meanwhile(owner := Owner("systemd-service", unit)):
                self.transient.take(owner.key)
            for name in (DROPIN_NAME, *FORMER_NAMES):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))
                    removed.append(os.path.join(folder, name))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, MARKER_NAME))
            with contextlib.suppress(OSError):  # other drop-ins live there
                os.rmdir(folder)
        return removed

    # -- starting again ----------------------------------------------------

    def unit_now(self, owner: Owner) -> UnitNow | Unavailable:
        if owner.kind == "user-service":
            states = self.users.states(owner)
        else:
            states = systemd.service_states([owner.name], address=self.bus_address)
        if isinstance(states, Unavailable):
            return states
        st = states[owner.name]
        now = UnitNow(st.load_state, st.active_state, st.job)
        seen = self.left_running.get(owner.key)
        if st.active_state not in ("inactive", "failed") or not (
                isinstance(seen, list) and len(seen) == 3 and isinstance(seen[1], (int, float))
                and seen[2] == boot_id(ProcFS())):  # a monotonic time of this boot's
            return now
        address = (self.bus_address if owner.kind == "systemd-service" else
                   usermanager.manager_address(owner.uid) if owner.uid is not None else None)
        since = inactive_since(owner.name, address) if isinstance(address, str | None) else 0.0
        return replace(now, up_after_drain=(seen[0], seen[1]), inactive_since=since)

    def reload(self, owners: Sequence[Owner]) -> Unavailable | None:
        """Reload the managers of these owners (once each), after their drop-ins went.

        When one fails: for each manager not reloaded, which (the system's,
        ``user@UID.service``), its units, what that leaves them with, why, and
        the command that reloads it.
        """
        failed = []
        for uid, group in by_uid([o for o in owners if o.kind == "user-service"]):
            answer = self.users.reload(uid)
            if answer is not None:
                failed.append(_not_reloaded(f"user@{uid}.service's manager", group, answer,
                                            usermanager.systemctl_line(uid, "daemon-reload")))
        system = [o for o in owners if o.kind == "systemd-service"]
        if system:
            answer = systemd.reload_manager(address=self.bus_address)
            if answer is not None:
                failed.append(_not_reloaded("the system manager", system, answer,
                                            "systemctl daemon-reload"))
        return Unavailable("; ".join(failed)) if failed else None

    def start(self, owner: Owner, wait: bool = True) -> str | Unavailable:
        if owner.kind == "user-service":
            return self.users.start(owner, wait)
        return systemd.start_unit(owner.name, address=self.bus_address, wait=wait)

    def start_container(self, owner: Owner, stopped_at: float | None) -> tuple[str, str]:
        return self.engines.start(owner, stopped_at)

    def take_warnings(self) -> list[str]:
        """What went wrong on the way that the verdict should say (once)."""
        out = [*self.warnings, *self.users.warnings, *self.engines.warnings,
               *self.transient.warnings]
        for kept in (self.warnings, self.users.warnings, self.engines.warnings,
                     self.transient.warnings):
            kept.clear()
        return out


def _not_reloaded(manager: str, owners: Sequence[Owner], answer: Unavailable, fix: str) -> str:
    """A manager not reloaded once the drain drop-ins of ``owners`` went: it still holds them."""
    names = ", ".join(dict.fromkeys(o.name for o in owners))
    return (f"{manager} was not reloaded after the drain drop-ins of {names} were removed "
            f"({answer.reason}): until it is, they keep the drain's Restart=no, KillSignal= "
            f"and TimeoutStopSec=, so a job that fails is not restarted; run {fix}")


def _with_state(owner: Owner, st: systemd.ServiceState) -> Owner:
    if st.load_state != "loaded":
        return owner.with_note(f"unit {st.load_state}")
    return replace(owner, restart=st.restart, restart_delay_s=st.restart_delay_s,
                   kill_mode=st.kill_mode, exec_stop=st.exec_stop, activity=st.active_state,
                   triggered_by=st.triggered_by, main_pid=st.main_pid,
                   timeout_stop_s=st.timeout_stop_s, transient=st.transient)


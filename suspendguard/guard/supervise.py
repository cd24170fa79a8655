"""Drain supervised jobs through their supervisor, and start them again afterwards.

A systemd service is stopped with a stop job, never signalled around
systemd: ``Restart=`` never applies to an explicit stop, and ``ExecStop=``
runs. For this stop only, its kill signal is the drain signal: a runtime
drop-in (``/run/systemd/system/UNIT.d/50-suspendguard-drain.conf``,
``KillSignal=``) and one daemon reload before the stop jobs are queued.
``SetUnitProperties`` refuses ``KillSignal`` for units that are not
transient (systemd 252), and a ``KillUnit`` followed by a stop races a
``Restart=`` with a short delay, so neither is used. The drop-ins are
removed (and the manager reloaded) when the jobs are started again.
Docker and Podman containers go through their engine (guard/containers.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from suspendguard.guard.containers import CONTAINER_KINDS, Engines
from suspendguard.guard.owner import Owner, Stop, UnitNow, owner_of_cgroup
from suspendguard.model import Holder, Unavailable
from suspendguard.system.dbus import systemd

DROPIN_ROOT = "/run/systemd/system"
DROPIN_NAME = "50-suspendguard-drain.conf"
# Beside the drop-in (systemd reads only *.conf there): removed by any start
# of the unit while the drop-in is in place, so restore can tell that
# someone started it after the guard stopped it (systemd 252 keeps no
# trace of a run that has ended: its InvocationID and ExecMainPID are reset).
MARKER_NAME = "suspendguard-stopped"
# How long the manager gets to finish a stop job once the processes exited
# (ExecStopPost=, cgroup release) before the guard looks whether it came back.
STOP_SETTLE_S = 2.0
# A timer due later than this after the stop is the next sleep's business.
TIMER_WINDOW_S = 5.0


class Supervisors:
    """The owners of holders, and the supervisors' own ways to stop and start them."""

    def __init__(self, *, dropin_root: str = DROPIN_ROOT, bus_address: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 environ: Mapping[str, str] | None = None, state_dir: str | None = None) -> None:
        """``environ``: where the engines' sockets are named (DOCKER_HOST, CONTAINER_HOST);
        ``state_dir``: where restart policies set aside for a drain are kept."""
        self.dropin_root = dropin_root
        self.engines = Engines(os.environ if environ is None else environ, state_dir, clock)
        self.bus_address = bus_address
        self.clock = clock
        self.sleep = sleep
        self._owners: dict[str, Owner] = {}

    # -- who ---------------------------------------------------------------

    def owner(self, holder: Holder) -> Owner:
        found = owner_of_cgroup(holder.cgroup)
        if found.kind in CONTAINER_KINDS:
            if found.key not in self._owners:
                self._owners[found.key] = self.engines.owner(found)
            return self._owners[found.key]
        if found.kind != "systemd-service":
            return found
        if found.key not in self._owners:
            states = systemd.service_states([found.name], address=self.bus_address)
            if isinstance(states, Unavailable):
                self._owners[found.key] = found.with_note(states.reason)
            else:
                self._owners[found.key] = _with_state(found, states[found.name])
        return self._owners[found.key]

    # -- stopping ----------------------------------------------------------

    def stop(self, owners: Sequence[Owner], signame: str,
             timeout_s: float = 10.0) -> dict[str, str]:
        """Queue the stop of each owner; for each key, "" when its supervisor took it, else why not.

        ``timeout_s``: how long an engine waits for a container before it kills it.
        """
        units = [o for o in owners if o.kind == "systemd-service"]
        containers = [o for o in owners if o.kind in CONTAINER_KINDS]
        out = {o.key: f"cannot stop a {o.kind} through its supervisor" for o in owners
               if o.kind != "systemd-service" and o.kind not in CONTAINER_KINDS}
        if containers:
            out.update(self.engines.stop(containers, signame, timeout_s))
        if not units:
            return out
        for o in units:
            try:
                self._write_dropin(o.name, signame)
            except OSError as exc:
                out[o.key] = f"cannot write the drain drop-in for {o.name}: {exc.strerror}"
        queued = [o for o in units if o.key not in out]
        if not queued:
            return out
        answer = systemd.stop_units([o.name for o in queued], reload=True,
                                    address=self.bus_address)
        for o in queued:
            if isinstance(answer, Unavailable):
                out[o.key] = answer.reason
            else:
                out[o.key] = answer.get(o.name, "no answer")
        return out

    def settle(self, stops: Sequence[Stop], deadline: float) -> list[str]:
        """After the exits: wait for the stop jobs to end and for timers due soon; who came back.

        A reason for each unit that is running again, or about to (a start
        job queued).
        """
        back = self.engines.settle(stops, deadline)
        return back + self._settle_units(stops, deadline)

    def _settle_units(self, stops: Sequence[Stop], deadline: float) -> list[str]:
        units = [s for s in stops if s.owner.kind == "systemd-service"]
        if not units:
            return []
        names = [s.owner.name for s in units]
        until = min(deadline, self.clock() + STOP_SETTLE_S)
        while True:
            states = systemd.service_states(names, address=self.bus_address)
            if isinstance(states, Unavailable):
                return [f"cannot tell whether {', '.join(names)} stayed stopped: "
                                     f"{states.reason}"]
            busy = [n for n in names if states[n].job == "stop"
                    or states[n].active_state == "deactivating"]
            if not busy or self.clock() >= until:
                break
            self.sleep(0.01)
        # A timer (OnUnitInactiveSec=, a calendar event) may start the unit
        # again a moment from now: wait for it, inside the deadline.
        now = time.clock_gettime(time.CLOCK_MONOTONIC)
        due = [t for n in names for t in states[n].next_elapse.values()
               if now < t < now + TIMER_WINDOW_S]
        if due:
            wait = min(max(due) - now + 0.2, max(0.0, deadline - self.clock()))
            self.sleep(wait)
            again = systemd.service_states(names, address=self.bus_address)
            if not isinstance(again, Unavailable):
                states = again
        reasons = []
        for s in units:
            st = states[s.owner.name]
            if st.active_state in ("active", "activating", "reloading") or st.job == "start":
                by = f" (triggered by {', '.join(st.triggered_by)})" if st.triggered_by else ""
                reasons.append(f"{s.owner.name} was started again during the drain{by}: "
                               "it would hold the accelerator while the machine sleeps")
        return reasons

    # -- drop-ins ----------------------------------------------------------

    def _dropin(self, unit: str) -> str:
        return os.path.join(self.dropin_root, f"{unit}.d", DROPIN_NAME)

    def _write_dropin(self, unit: str, signame: str) -> None:
        path = self._dropin(unit)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        marker = os.path.join(os.path.dirname(path), MARKER_NAME)
        with open(marker, "w"):
            pass
        with open(tmp, "w") as f:
            f.write("# Written by suspendguard for one drain; removed when the job is started "
                    f"again.\n[Service]\nKillSignal={signame}\nExecStartPre=-/bin/rm -f {marker}\n")
        os.replace(tmp, path)

    def started_meanwhile(self, unit: str) -> bool:
        """Whether the unit was started since the guard stopped it (its marker is gone)."""
        d = os.path.dirname(self._dropin(unit))
        return os.path.exists(os.path.join(d, DROPIN_NAME)) and \
            not os.path.exists(os.path.join(d, MARKER_NAME))

    def remove_dropins(self, units: Sequence[str]) -> list[str]:
        """Remove the drain drop-ins of these units; the paths removed."""
        removed = []
        for unit in dict.fromkeys(units):
            path = self._dropin(unit)
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            removed.append(path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(os.path.dirname(path), MARKER_NAME))
            with contextlib.suppress(OSError):  # other drop-ins live there
                os.rmdir(os.path.dirname(path))
        return removed

    # -- starting again ----------------------------------------------------

    def state(self, owner: Owner) -> UnitNow | Unavailable:
        states = systemd.service_states([owner.name], address=self.bus_address)
        if isinstance(states, Unavailable):
            return states
        st = states[owner.name]
        return UnitNow(st.load_state, st.active_state, st.job)

    def reload(self) -> Unavailable | None:
        return systemd.reload_manager(address=self.bus_address)

    def start(self, owner: Owner, wait: bool = True) -> str | Unavailable:
        return systemd.start_unit(owner.name, address=self.bus_address, wait=wait)

    def start_container(self, owner: Owner, stopped_at: float) -> tuple[str, str]:
        return self.engines.start(owner, stopped_at)

    def take_warnings(self) -> list[str]:
        """What went wrong on the way that the verdict should say (once)."""
        out, self.engines.warnings[:] = list(self.engines.warnings), []
        return out


def _with_state(owner: Owner, st: systemd.ServiceState) -> Owner:
    if st.load_state != "loaded":
        return owner.with_note(f"unit {st.load_state}")
    return replace(owner, restart=st.restart, restart_delay_s=st.restart_delay_s,
                   kill_mode=st.kill_mode, exec_stop=st.exec_stop, state=st.active_state,
                   triggered_by=st.triggered_by)


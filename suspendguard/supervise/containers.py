"""Docker and Podman containers: kept from restarting while the guard drains them, started again after.

The guard signals a container's holders itself, by their host pids, as any
holder: a ``docker stop --signal`` goes to the container's PID 1, and a PID 1
that is a shell (``sh -c "python job.py"``) or an init (``--init``, tini,
dumb-init) drops it or hands it to its direct child only, so the job never
sees it. Before the signal the container's restart policy is set to ``no``
(``POST /containers/ID/update``, as ``docker update --restart=no``) so that
the job's exit ends the container for good; restore puts the policy back
(kept in the state folder across the sleep) and starts the container again.
A policy the engine refuses to set aside is said in a warning: the holders
are signalled all the same, and a container its policy brings back vetoes.
One that cannot be written down first is not set aside at all: the engine
is not asked, and the container is not kept down by the guard (its holders
are signalled directly, as when the history cannot write the stop ahead).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from suspendguard.model import CONTAINER_KINDS, Owner, Unavailable
from suspendguard.record import Stop
from suspendguard.supervise.owner import STOPPED_LATER
from suspendguard.supervise.setaside import SetAside
from suspendguard.system.boot import slept_s
from suspendguard.system.engine import Container, Engine, Refused, socket_path

# Docker restarts an exited container after 100 ms, doubling each time.
FIRST_RESTART_DELAY_S = 0.1
# Restart policies the guard set to "no" for the drain, by owner key: what
# restore puts back, across the sleep.
POLICIES_FILE = "container-restart-policies.json"
# How long after the end of the drain a PID 1 it left running may still exit on its
# own, once it noticed its job's end; one that exited later was stopped by someone else.
LATE_EXIT_S = 5.0
# The containers the end of a drain saw still running, their PID 1 not the job, by
# owner key: [the stop's time, when seen]. One stopped after that was stopped by someone
# else, and restore leaves it down.
OUTLIVED_FILE = "containers-up-after-drain.json"


class Engines:
    """The container engines of this host, and the restart policies the guard set aside."""

    def __init__(self, environ: Mapping[str, str], state_dir: str | None = None) -> None:
        self.environ = environ
        self._engines: dict[str, Engine | Unavailable] = {}
        self.policies = SetAside(state_dir, POLICIES_FILE, "the containers' restart policies")
        self.warnings = self.policies.warnings
        self.outlived = SetAside(state_dir, OUTLIVED_FILE, "the containers left running")
        self.outlived.warnings = self.warnings

    def engine(self, kind: str) -> Engine | Unavailable:
        if kind not in self._engines:
            path = socket_path(kind, self.environ)
            self._engines[kind] = path if isinstance(path, Unavailable) else Engine(path)
        return self._engines[kind]

    def owner(self, found: Owner) -> Owner:
        """The container's restart policy and state, from its engine."""
        found = replace(found, restart_delay_s=FIRST_RESTART_DELAY_S)
        engine = self.engine(found.kind)
        if isinstance(engine, Unavailable):
            return found.with_note(engine.reason)
        seen = engine.inspect(found.name)
        if isinstance(seen, Unavailable):
            return replace(found, engine=engine.path, note=seen.reason)
        if seen is None:
            return replace(found, engine=engine.path,
                           note=f"the engine at {engine.path} has no such container")
        restart = seen.restart or "no"
        if restart == "on-failure" and seen.restart_max:
            restart = f"on-failure:{seen.restart_max}"
        note = f"name {seen.name}" if seen.name else ""
        return replace(found, restart=restart, activity=seen.status, engine=engine.path, note=note)

    # -- stopping ----------------------------------------------------------

    def stop(self, owners: Sequence[Owner], signame: str, timeout_s: float) -> dict[str, str]:
        """Set each container's restart policy aside; for each key, "" when done, else why not.

        ``signame`` and ``timeout_s`` are the drain's: the guard itself
        signals the holders and waits for them.
        """
        out = {}
        for o in owners:
            engine = self.engine(o.kind)
            if isinstance(engine, Unavailable):
                out[o.key] = engine.reason
                continue
            seen = engine.inspect(o.name)
            if isinstance(seen, Unavailable):
                out[o.key] = seen.reason
                continue
            if seen is None:
                out[o.key] = "the engine has no such container"
                continue
            # Kept as stopped by the guard even when its policy stays: it is
            # looked at for a restart after the drain, and started after resume.
            out[o.key] = ""
            if seen.restart in ("", "no"):
                continue
            # Written ahead, as the stop's row: a guard killed before the engine's
            # answer leaves the policy for restore (and the next run) to put back. One
            # that cannot be written is not set aside: restore after resume would not
            # find it, and the container would stay "no" for good.
            failed = self.policies.put(o.key, [seen.restart, seen.restart_max], ahead=True)
            if failed:
                out[o.key] = f"{failed}; restore could not put its policy back"
                continue
            changed = engine.set_restart(o.name, "no")
            if isinstance(changed, Unavailable) or changed:
                # Kept unless the engine surely did nothing (the container gone, an error
                # answered, never asked): one that did not answer in time may have set it
                # all the same, and putting a policy back that never changed does no harm.
                if changed == "gone" or isinstance(changed, Refused):
                    self.policies.take(o.key)
                why = changed.reason if isinstance(changed, Unavailable) else changed
                self.warnings.append(
                    f"{o.describe()}: its restart policy could not be set aside ({why}); the "
                    "guard signals its processes itself, and the policy may bring it back")
        return out

    def settle(self, stops: Sequence[Stop]) -> list[str]:
        """After the exits: a reason for each container started again since the guard stopped it."""
        reasons = []
        for s in stops:
            if s.owner.kind not in CONTAINER_KINDS:
                continue
            engine = self.engine(s.owner.kind)
            if isinstance(engine, Unavailable):
                continue
            seen = engine.inspect(s.owner.name)
            # An engine may still say "running" for a moment after the job
            # exited, and a container whose PID 1 is a launcher stays up:
            # only a start after the guard's (StartedAt) is a restart.
            if isinstance(seen, Container) and seen.running and (
                    seen.started_at == 0 or s.stopped is None or seen.started_at >= s.stopped):
                reasons.append(f"{s.owner.describe()} was started again during the drain: it "
                               "would hold the accelerator while the machine sleeps")
            elif isinstance(seen, Container) and seen.running:
                # The engine's times are the wall clock's, which runs on while the machine
                # sleeps: what it has slept so far is kept, to take the sleep out after.
                self.outlived.put(s.owner.key, [s.stopped, time.time(), slept_s()])
            elif isinstance(seen, Container) or seen is None:
                self.outlived.take(s.owner.key)
        return reasons

    # -- starting again ----------------------------------------------------

    def start(self, owner: Owner, stopped_at: float | None) -> tuple[str, str]:
        """Put its restart policy back and start the container again: (started | failed | skipped, why)."""
        engine = self.engine(owner.kind)
        if isinstance(engine, Unavailable):
            return "failed", engine.reason
        seen = engine.inspect(owner.name)
        if isinstance(seen, Unavailable):
            return "failed", seen.reason
        policy = self.policies.take(owner.key)
        outlived = self.outlived.take(owner.key)
        if seen is None:
            return "skipped", "the container no longer exists"
        note = self._put_back(engine, owner, seen, policy)
        if seen.running and stopped_at is not None and 0 < seen.started_at <= stopped_at:
            return "skipped", f"still running: only its job was drained{note}"
        if seen.running:
            return "skipped", f"already running (started meanwhile){note}"
        # stopped_at None: the history's row lost its time, and the guard did stop it.
        if stopped_at is not None and seen.started_at > stopped_at:
            return "skipped", ("started and stopped again by someone else after the guard "
                               f"stopped it{note}")
        if _stopped_later(outlived, stopped_at, seen):
            return "skipped", STOPPED_LATER + note
        started = engine.start(owner.name)
        if isinstance(started, Unavailable):
            return "failed", started.reason + note
        if started == "gone":
            return "skipped", f"the container no longer exists{note}"
        if started:
            return "skipped", f"{started} (started meanwhile){note}"
        return "started", note[2:]  # a policy not put back is said; the container runs

    def _put_back(self, engine: Engine, owner: Owner, seen: Container, policy: Any) -> str:
        """Put the restart policy set aside for ``owner`` back; a note ("; its restart
        policy ...") when it was not, else ""."""
        if policy is None:
            return ""
        if not _is_policy(policy):
            return f"; its restart policy could not be put back: {self._bad(owner.key, policy)}"
        name, maximum = policy
        if (seen.restart, seen.restart_max) == (name, maximum):
            return ""  # never set aside (the engine's answer came too late to tell): as it was
        if seen.restart not in ("", "no"):
            # Set while it was drained (docker update): the operator's, not the guard's "no".
            now = (f"{seen.restart}:{seen.restart_max}" if seen.restart_max else seen.restart)
            return (f"; its restart policy was set to {now} while it was drained: kept, not "
                    f"the {name} the guard had set aside")
        put = engine.set_restart(owner.name, name, maximum)
        if not (isinstance(put, Unavailable) or put):
            return ""
        note = (f"; its restart policy {name} could not be put back: " +
                (put.reason if isinstance(put, Unavailable) else put))
        if put != "gone":  # kept: the next restore or guard run puts it back
            self.policies.put(owner.key, policy)
            note += " (tried again by the next restore or guard run)"
        return note

    def _bad(self, key: str, record: Any) -> str:
        """Why a record of the policies' file is dropped: the file, the key, what is there."""
        kind, _, cid = key.partition(":")
        return (f"{self.policies.path or POLICIES_FILE}: the record of {key}, "
                f"{json.dumps(record)}, is not a restart policy [name, retries]: dropped; put "
                f"the container's policy back by hand ({kind} update --restart=POLICY "
                f"{cid[:12]})")

    def put_back_policies(self, keep: Collection[str] = ()) -> list[str]:
        """Put back the restart policies a killed run set aside, or a restore could not put
        back, but those of ``keep`` (the next restore's); a line for each."""
        notes = []
        for key in sorted(set(self.policies.records()) - set(keep)):
            kind, _, cid = key.partition(":")
            engine = self.engine(kind) if kind in CONTAINER_KINDS else None
            if engine is None or isinstance(engine, Unavailable):
                continue
            saved = self.policies.take(key)
            if saved is None:
                continue
            if not _is_policy(saved):
                notes.append(self._bad(key, saved))
                continue
            name, maximum = saved
            put = engine.set_restart(cid, name, maximum)
            if isinstance(put, Unavailable) or (put and put != "gone"):
                self.policies.put(key, saved)
                why = put.reason if isinstance(put, Unavailable) else put
                notes.append(f"{kind} container {cid[:12]}: the restart policy {name} a "
                             f"guard run set aside could not be put back ({why})")
            elif put == "gone":
                notes.append(f"{kind} container {cid[:12]} no longer exists: the restart "
                             f"policy {name} a guard run had set aside for it was dropped")
            else:
                notes.append(f"{kind} container {cid[:12]}: put back the restart policy "
                             f"{name} a guard run had set aside and not put back")
        return notes


def _is_policy(record: Any) -> bool:
    """Whether a record of the policies' file is a restart policy: [name, retries]."""
    return (isinstance(record, list) and len(record) == 2 and isinstance(record[0], str)
            and bool(record[0]) and type(record[1]) is int and record[1] >= 0)


def _stopped_later(outlived: Any, stopped_at: float | None, seen: Container) -> bool:
    """Whether the end of the drain of this stop (``stopped_at``) saw the container running,
    its PID 1 outliving its job (``outlived``: [the stop's time, when seen, the sleep before
    it]), and it exited later than a launcher noticing its job's end would, hours asleep
    not counted: someone else stopped it."""
    if not isinstance(outlived, list) or len(outlived) not in (2, 3) or stopped_at is None:
        return False
    stop_time, seen_at, *slept = outlived
    if stop_time != stopped_at or not isinstance(seen_at, (int, float)):
        return False
    asleep = slept_s() - slept[0] if slept and isinstance(slept[0], (int, float)) else 0.0
    # An exit no later than the sleep's length after it was seen came before that sleep
    # (an operator's stop ahead of a later suspend): no sleep to take out of it.
    after = seen.finished_at - seen_at
    return (after - asleep if after > asleep else after) > LATE_EXIT_S

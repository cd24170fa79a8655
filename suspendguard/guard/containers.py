"""Docker and Podman containers: stopped through their engine with the drain signal, started again by it.

A container is stopped as ``docker stop --signal SIG --time T`` does
(``POST /containers/ID/stop?signal=SIG&t=T``, API 1.42 or later): the engine
records it as stopped by the user, so no restart policy brings it back
while the machine sleeps. An engine that speaks an older API (Podman's
compatible API says 1.41) cannot choose the stop signal: the container's
restart policy is set to ``no`` for the drain (``/update``) and it gets the
signal with ``/kill``; restore puts the policy back before the start. A
policy that cannot be changed leaves ``docker stop`` with the container's
own stop signal, said in a warning.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from suspendguard.guard.owner import CONTAINER_KINDS, Owner, Stop
from suspendguard.model import Unavailable
from suspendguard.system.engine import Container, Engine, Pending, socket_path, stop_answer

# Docker restarts an exited container after 100 ms, doubling each time.
FIRST_RESTART_DELAY_S = 0.1
# How long the guard waits for an engine's answer to a stop beyond the
# engine's own wait and kill.
STOP_JOIN_MARGIN_S = 10.0
# How long a restore right after a veto waits for a stop still in flight:
# the verdict must not wait for the engine's kill.
RESTORE_JOIN_S = 3.0
# Restart policies the guard set to "no" for an old API's kill, by owner key:
# what restore puts back, across the sleep.
POLICIES_FILE = "container-restart-policies.json"


class Engines:
    """The container engines of this host, and the stops the guard asked of them."""

    def __init__(self, environ: Mapping[str, str], state_dir: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.environ = environ
        self.state_dir = state_dir
        self.clock = clock
        self._engines: dict[str, Engine | Unavailable] = {}
        self._stops: dict[str, tuple[threading.Thread, list[str | Unavailable], float]] = {}
        self._memory: dict[str, tuple[str, int]] = {}  # policies set aside by this run
        self.warnings: list[str] = []

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
        return replace(found, restart=restart, state=seen.status, engine=engine.path, note=note)

    # -- stopping ----------------------------------------------------------

    def stop(self, owners: Sequence[Owner], signame: str, timeout_s: float) -> dict[str, str]:
        """Ask each container's engine to stop it; for each key, "" when asked, else why not."""
        out = {}
        for o in owners:
            engine = self.engine(o.kind)
            if isinstance(engine, Unavailable):
                out[o.key] = engine.reason
                continue
            with_signal = engine.can_stop_with_signal()
            if isinstance(with_signal, Unavailable):
                out[o.key] = with_signal.reason
            elif with_signal:
                out[o.key] = self._stop(engine, o, engine.stop(o.name, signame, timeout_s),
                                        timeout_s)
            else:
                out[o.key] = self._kill(engine, o, signame, timeout_s)
        return out

    def _stop(self, engine: Engine, o: Owner, sent: Pending | Unavailable,
              timeout_s: float) -> str:
        if isinstance(sent, Unavailable):
            return sent.reason
        # The engine answers once the container stopped: read it beside the
        # guard's own wait on the processes.
        answer: list[str | Unavailable] = []
        path = f"/containers/{o.name}/stop"

        def read() -> None:
            answer.append(stop_answer(engine.path, path, sent.answer()))

        thread = threading.Thread(target=read, name=f"stop {o.name[:12]}", daemon=True)
        thread.start()
        self._stops[o.key] = (thread, answer, self.clock() + timeout_s + STOP_JOIN_MARGIN_S)
        return ""

    def _kill(self, engine: Engine, o: Owner, signame: str, timeout_s: float) -> str:
        """An API without the stop signal: no restart policy for the drain, then the signal."""
        seen = engine.inspect(o.name)
        if isinstance(seen, Unavailable):
            return seen.reason
        if seen is None:
            return "the engine has no such container"
        if seen.restart not in ("", "no"):
            changed = engine.set_restart(o.name, "no")
            if isinstance(changed, Unavailable) or changed:
                why = changed.reason if isinstance(changed, Unavailable) else changed
                self.warnings.append(
                    f"{o.describe()}: its restart policy could not be set aside ({why}): "
                    "stopped with its own stop signal, not the drain signal (the engine's API "
                    "is older than 1.42)")
                return self._stop(engine, o, engine.stop(o.name, None, timeout_s), timeout_s)
            self._save_policy(o.key, seen)
        killed = engine.kill(o.name, signame)
        if isinstance(killed, Unavailable):
            return killed.reason
        return "" if not killed else f"the engine said {killed}"

    def settle(self, stops: Sequence[Stop], deadline: float) -> list[str]:
        """After the exits: wait for the engines' answers; a reason for each container running again."""
        reasons = []
        for s in stops:
            if s.owner.kind not in CONTAINER_KINDS:
                continue
            answer = self._join(s.owner.key, deadline)
            if isinstance(answer, Unavailable):
                self.warnings.append(f"{s.owner.describe()}: {answer.reason}")
            engine = self.engine(s.owner.kind)
            if isinstance(engine, Unavailable):
                continue
            seen = engine.inspect(s.owner.name)
            # An engine may still say "running" for a moment after the job
            # exited: only a start after the stop (StartedAt) is a restart.
            if isinstance(seen, Container) and seen.running and (
                    seen.started_at == 0 or seen.started_at >= s.at):
                reasons.append(f"{s.owner.describe()} was started again during the drain: it "
                               "would hold the accelerator while the machine sleeps")
        return reasons

    def _in_flight(self, key: str, until: float) -> bool:
        self._join(key, until)
        pending = self._stops.get(key)
        return pending is not None and pending[0].is_alive()

    def _join(self, key: str, until: float) -> str | Unavailable | None:
        pending = self._stops.get(key)
        if pending is None:
            return None
        thread, answer, latest = pending
        thread.join(max(0.0, min(until, latest) - self.clock()))
        return answer[0] if answer else None

    # -- starting again ----------------------------------------------------

    def start(self, owner: Owner, stopped_at: float) -> tuple[str, str]:
        """Start the container again: (started | failed | skipped, why)."""
        if self._in_flight(owner.key, self.clock() + RESTORE_JOIN_S):
            return "failed", ("still stopping (the engine kills it after [drain] timeout_s): "
                              f"start it once it stopped ({owner.kind} start {owner.name[:12]})")
        engine = self.engine(owner.kind)
        if isinstance(engine, Unavailable):
            return "failed", engine.reason
        seen = engine.inspect(owner.name)
        if isinstance(seen, Unavailable):
            return "failed", seen.reason
        if seen is None:
            self._take_policy(owner.key)
            return "skipped", "the container no longer exists"
        policy = self._take_policy(owner.key)
        note = ""
        if policy is not None:
            put = engine.set_restart(owner.name, policy[0], policy[1])
            if isinstance(put, Unavailable) or put:
                note = f"; its restart policy {policy[0]} could not be put back: " + \
                    (put.reason if isinstance(put, Unavailable) else put)
        if seen.running:
            return "skipped", f"already running (started meanwhile){note}"
        if seen.started_at > stopped_at:
            return "skipped", ("started and stopped again by someone else after the guard "
                               f"stopped it{note}")
        started = engine.start(owner.name)
        if isinstance(started, Unavailable):
            return "failed", started.reason + note
        if started == "gone":
            return "skipped", f"the container no longer exists{note}"
        if started:
            return "skipped", f"{started} (started meanwhile){note}"
        return ("failed", note[2:]) if note else ("started", "")

    # -- restart policies set aside (old APIs) -----------------------------

    def put_back_policies(self) -> list[str]:
        """Put back the restart policies a killed run set aside; a line for each."""
        notes = []
        for key, saved in sorted(self._policies().items()):
            kind, _, cid = key.partition(":")
            engine = self.engine(kind) if kind in CONTAINER_KINDS else None
            if engine is None or isinstance(engine, Unavailable):
                continue
            policy = self._take_policy(key)
            if policy is None:
                continue
            put = engine.set_restart(cid, *policy)
            if isinstance(put, Unavailable) or (put and put != "gone"):
                self._save_back(key, saved)
                why = put.reason if isinstance(put, Unavailable) else put
                notes.append(f"{kind} container {cid[:12]}: the restart policy {policy[0]} a "
                             f"killed guard run set aside could not be put back ({why})")
            else:
                notes.append(f"{kind} container {cid[:12]}: put back the restart policy "
                             f"{policy[0]} a killed guard run had set aside")
        return notes

    def _save_back(self, key: str, saved: list[object]) -> None:
        data = self._policies()
        data[key] = saved
        self._write_policies(data)

    def _policy_path(self) -> str | None:
        return os.path.join(self.state_dir, POLICIES_FILE) if self.state_dir else None

    def _policies(self) -> dict[str, list[object]]:
        path = self._policy_path()
        try:
            with open(path or "", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_policies(self, data: dict[str, list[object]]) -> None:
        path = self._policy_path()
        if path is None:
            return
        try:
            if not data:
                os.unlink(path)
                return
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError as exc:
            self.warnings.append(f"cannot record the containers' restart policies in {path}: "
                                 f"{exc.strerror}")

    def _save_policy(self, key: str, seen: Container) -> None:
        self._memory[key] = (seen.restart, seen.restart_max)
        data = self._policies()
        data[key] = [seen.restart, seen.restart_max]
        self._write_policies(data)

    def _take_policy(self, key: str) -> tuple[str, int] | None:
        data = self._policies()
        saved = data.pop(key, None)
        remembered = self._memory.pop(key, None)
        if saved is not None:
            self._write_policies(data)
            name, maximum = saved
            return str(name), int(str(maximum))
        return remembered

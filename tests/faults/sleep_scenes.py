"""The sleep path's faults (issue 19) as scenes: a hung supervisor, the guard killed between steps.

Each scene builds its fault in a fresh folder of its own, runs the guard
once and returns a :class:`Seen`: whether everything it checks held (and
which check did not), whether the verdict came within ``[drain]
deadline_s`` + 1 s, and whether it was recorded. tests/faults/
test_sleep_path.py asserts on them; benchmarks/faults.py puts them in the
fault table. The jobs are the scene's own holders of a plain file, put in
cgroups named as their supervisor names them (``system.slice/UNIT``,
``user@UID.service/...``, ``docker-ID.scope``), so the guard finds their
owners as on a real host, and nothing else is ever signalled. Needs root
and a writable cgroup v2 tree (:func:`can_run`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakes.engine.fake_engine import FakeEngine, cgroup_root
from helpers.cgroups import remove_cgroup
from helpers.dbus import PrivateBus, dbus_daemon, fake_service, private_system_bus
from helpers.holders import HOLDER, Holders
from helpers.records import ended
from helpers.wait import wait_for

from suspendguard.config import Config, build
from suspendguard.guard.pipeline import run
from suspendguard.guard.report import RECORDED, Report
from suspendguard.guard.restore import Restored, restore
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.store.history import History
from suspendguard.supervise import usermanager
from suspendguard.supervise.dropin import DROPIN_NAME
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system.boot import boot_ids
from suspendguard.system.deadline import RESTORE_AFTER_VETO_S, Cancel
from suspendguard.system.log import Logger

SCENE = str(Path(__file__).resolve().parent / "scene_supervised.py")
DEADLINE_S = 6.0
NOBODY = 65534


def can_run() -> str | None:
    """Why the scenes cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (cgroups, a user's manager)"
    if cgroup_root() is None:
        return "needs a writable cgroup v2 tree"
    return None


@dataclass
class Seen:
    """What one scene saw: the checks that failed (none: ok), the verdict's time, the record."""

    failed: list[str] = field(default_factory=list)
    in_time: bool | None = None
    recorded: bool | None = None

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failed.append(what)

    @property
    def ok(self) -> bool:
        return not self.failed


class Stage:
    """One scene's folder, node, holders and cgroups; everything cleaned up at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.node = str(tmp / "npu0")
        Path(self.node).write_bytes(b"\0" * 4096)
        self.holders = Holders(tmp)
        root = cgroup_root()
        assert root is not None
        self.base = root / f"suspendguard-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.groups: list[Path] = []
        self.state = tmp / "state"
        self.dropins = tmp / "run"

    def config(self, deadline_s: float = DEADLINE_S) -> Config:
        return build({"devices": {"families": [], "nodes": [self.node]},
                      "state": {"dir": str(self.state)}, "idle": {"backends": []},
                      "drain": {"timeout_s": 2, "deadline_s": deadline_s}})

    def config_file(self) -> Path:
        path = self.tmp / "guard.toml"
        path.write_text(f'[devices]\nfamilies = []\nnodes = ["{self.node}"]\n'
                        f'[state]\ndir = "{self.state}"\n[idle]\nbackends = []\n'
                        f'[drain]\ntimeout_s = 5\ndeadline_s = 60\n')
        return path

    def job_in(self, path: str) -> tuple[subprocess.Popen[str], int]:
        """A holder that moves itself into the cgroup ``path`` before it opens the node."""
        group = self.base / path
        group.mkdir(parents=True)
        self.groups.append(group)
        return self.holders.start(self.node, delay=0.1, argv_prefix=[
            "/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs")])

    def container_job(self) -> list[str]:
        return [sys.executable, HOLDER, "--node", self.node, "--delay", "0",
                "--marker", self.holders.marker]

    def close(self) -> None:
        self.holders.cleanup()
        for group in reversed(self.groups):
            remove_cgroup(str(group))
        for d in sorted((p for p in self.base.rglob("*") if p.is_dir()),
                        key=lambda p: -len(p.parts)) if self.base.exists() else []:
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            self.base.rmdir()


@contextlib.contextmanager
def stage(tmp: Path) -> Iterator[Stage]:
    s = Stage(tmp)
    try:
        yield s
    finally:
        s.close()


def timed(cfg: Config, supervisors: ManagersAndEngines, cancel: Cancel | None = None
          ) -> tuple[Report, float]:
    """One veto-unit run: the report and the seconds until its verdict."""
    start = time.monotonic()
    report = run(cfg, dry_run=False, action="suspend", origin="unit", idle_check=None,
                 log=Logger(io.StringIO(), {}), supervisors=supervisors, cancel=cancel,
                 history=History.open)
    return report, time.monotonic() - start


def is_recorded(cfg: Config, report: Report) -> bool:
    with History.open(cfg.state.dir, readonly=True) as h:
        attempt = h.attempt(report.attempt.id)
    return report.history == RECORDED and attempt is not None and \
        attempt.result == report.verdict.kind


def verdict_seen(cfg: Config, report: Report, took: float, deadline_s: float) -> Seen:
    return Seen(in_time=took < deadline_s + 1, recorded=is_recorded(cfg, report))


@contextlib.contextmanager
def silent_socket(path: str) -> Iterator[None]:
    """A unix socket that accepts every connection and never answers on any."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(16)
    server.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@contextlib.contextmanager
def fake_systemd(state: dict[str, Any]) -> Iterator[PrivateBus]:
    """A private bus with the fake systemd1 on it, found through DBUS_SYSTEM_BUS_ADDRESS."""
    with private_system_bus() as bus, fake_service(bus, state, services=["systemd"]):
        old = os.environ.get("DBUS_SYSTEM_BUS_ADDRESS")
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
        try:
            yield bus
        finally:
            if old is None:
                del os.environ["DBUS_SYSTEM_BUS_ADDRESS"]
            else:
                os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = old


def unit_state(pid: int, **extra: Any) -> dict[str, Any]:
    """The fake systemd's state for train.service, whose stop job SIGINTs ``pid``."""
    return {"units": {"train.service": {"LoadState": "loaded", "ActiveState": "active",
                                        "SubState": "running", "Restart": "always",
                                        "MainPID": pid}},
            "stop_jobs": {"train.service": [["kill", "-INT", str(pid)]]}, **extra}


def dropin(root: Path) -> Path:
    return root / "train.service.d" / DROPIN_NAME


def unit_supervisors(s: Stage, bus: PrivateBus) -> ManagersAndEngines:
    return ManagersAndEngines(dropin_root=str(s.dropins), bus_address=bus.address, environ={},
                       state_dir=str(s.state))


def guard_process(s: Stage, env: dict[str, str]) -> subprocess.Popen[str]:
    """The guard as a process of its own (tests/faults/scene_supervised.py), to be killed."""
    return subprocess.Popen([sys.executable, SCENE, str(s.config_file()), str(s.dropins)],
                            env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def kill(guard: subprocess.Popen[str]) -> None:
    guard.kill()
    guard.communicate(timeout=10)


def pending(s: Stage) -> list[Stop]:
    with History.open(str(s.state)) as h:
        return h.pending_stops()


def restore_pending(s: Stage, supervisors: ManagersAndEngines) -> list[Restored]:
    """What the resume unit does: bring back every stop without a result."""
    with History.open(str(s.state)) as h:
        return restore(h.pending_stops(), supervisors, s.config().restore, enabled=True,
                       record=lambda st, r, w: h.record_restore(st.id, r, w),
                       log=lambda _line: None, warn=lambda _line: None, boot_ids=boot_ids(h.proc))


# -- hung supervisors: the verdict within the deadline, recorded ------------------------


def hung_engine(tmp: Path) -> Seen:
    """An engine socket that accepts and never answers: each call would wait 5 s."""
    hung = str(tmp / "hung.sock")
    # deadline_s 4 leaves 2 s before the verdict: less than one engine call's own 5 s.
    with stage(tmp) as s, FakeEngine(str(tmp / "docker.sock")) as engine, silent_socket(hung):
        engine.create(s.container_job(), restart="always")
        cfg = s.config(deadline_s=4)
        report, took = timed(cfg, ManagersAndEngines(environ={"DOCKER_HOST": f"unix://{hung}"},
                                              state_dir=cfg.state.dir))
        seen = verdict_seen(cfg, report, took, 4)
        seen.check(any("did not answer" in h.owner.note for h in report.holders),
                   "the owner says the engine did not answer")
    return seen


def engine_hangs_on_update(tmp: Path) -> Seen:
    """The engine answers the look-ups, then never answers the update that sets the
    container's restart policy aside."""
    with stage(tmp) as s, FakeEngine(str(tmp / "docker.sock")) as engine:
        engine.create(s.container_job(), restart="always")
        engine.hang = {"update"}
        cfg = s.config()
        start = time.monotonic()
        report, _took = timed(cfg, ManagersAndEngines(
            environ={"DOCKER_HOST": f"unix://{engine.socket_path}"}, state_dir=cfg.state.dir))
        total = time.monotonic() - start
        seen = Seen(in_time=(report.attempt.duration or 0.0) < DEADLINE_S + 1,
                    recorded=is_recorded(cfg, report))
        # The update took what was left of the deadline: nobody is signalled (a SIGINT
        # with no wait after it would cost the job its work for a veto all the same).
        seen.check(report.verdict.kind == "veto" and any(
            r.code == "unsignallable" and "no time was left" in r.text
            for r in report.verdict.reasons), f"a veto, nobody signalled ({report.verdict})")
        seen.check(all(h.outcome.kind == "not-signalled" for h in report.holders),
                   f"nobody signalled ({[h.outcome for h in report.holders]})")
        # The restore after a veto has a budget of its own, inside TimeoutStartSec.
        seen.check(total < DEADLINE_S + 20, f"done inside TimeoutStartSec ({total:.1f} s)")
    return seen


def hung_user_manager(tmp: Path) -> Seen:
    """The user's manager takes the connection on its private socket and never answers."""
    run_dir = Path(f"/tmp/sg-usermgr-{os.getpid()}-{uuid.uuid4().hex[:6]}")  # 108-byte limit
    (run_dir / "systemd").mkdir(parents=True)
    hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hung.bind(str(run_dir / "systemd" / "private"))
    hung.listen(64)  # connections wait in the backlog: never accepted, never answered
    old = usermanager.runtime_dir
    usermanager.runtime_dir = lambda uid: str(run_dir)
    try:
        with stage(tmp) as s:
            _job, pid = s.job_in(f"user.slice/user-{NOBODY}.slice/user@{NOBODY}.service/"
                                 "app.slice/train.service")
            cfg = s.config()
            report, took = timed(cfg, ManagersAndEngines(environ={}, state_dir=cfg.state.dir))
            seen = verdict_seen(cfg, report, took, DEADLINE_S)
            owner = next(h.owner for h in report.holders if h.decision.holder.pid == pid)
            seen.check(owner.kind == "user-service" and "authenticating to the systemd private "
                       f"socket at unix:path={run_dir}/systemd/private timed out" in owner.note,
                       f"the owner says its manager did not answer ({owner.note})")
    finally:
        usermanager.runtime_dir = old
        hung.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    return seen


def slow_reload(tmp: Path) -> Seen:
    """The daemon-reload before the stop takes 30 s: longer than the whole deadline. systemd
    goes on with a reload nobody waits for and may apply the drop-in after the guard gave up,
    so the stop is kept on record, and the restore after the veto takes the drop-in away."""
    with stage(tmp) as s:
        _job, pid = s.job_in("system.slice/train.service")
        with fake_systemd(unit_state(pid, reload_s=30)) as bus:
            cfg = s.config()
            report, took = timed(cfg, unit_supervisors(s, bus))
            # The verdict within the deadline, the restore after it within its own budget.
            seen = verdict_seen(cfg, report, took, DEADLINE_S + RESTORE_AFTER_VETO_S)
            seen.check(report.verdict.kind == "veto", f"vetoed ({report.verdict.kind})")
            seen.check(any("daemon-reload before the drain did not answer" in w
                           and "kept on record" in w for w in report.verdict.warnings),
                       "the unanswered reload is said")
            seen.check(not dropin(s.dropins).exists(), "no drop-in outlives the run")
            with History.open(str(s.state), readonly=True) as h:
                attempt = h.attempt(report.attempt.id)
            results = [st.result for st in attempt.stops] if attempt is not None else []
            seen.check(len(results) == 1 and results[0] not in (None, "pending"),
                       f"its stop was kept on record and given its result ({results})")
    return seen


def sigterm_in_hung_wait(tmp: Path) -> Seen:
    """SIGTERM (the guard's cancel) while an engine call hangs: the wait ends at once."""
    hung = str(tmp / "hung.sock")
    with stage(tmp) as s, FakeEngine(str(tmp / "docker.sock")) as engine, silent_socket(hung):
        engine.create(s.container_job(), restart="always")
        cfg = s.config(deadline_s=60)
        cancel = Cancel()
        threading.Timer(1.0, cancel.cancel, ["guard received SIGTERM"]).start()
        report, took = timed(cfg, ManagersAndEngines(environ={"DOCKER_HOST": f"unix://{hung}"},
                                              state_dir=cfg.state.dir), cancel)
        cancel.close()
        # Not the 5 s of one engine call, nor the deadline: one second after the signal.
        seen = Seen(in_time=took < 3.0, recorded=is_recorded(cfg, report))
        seen.check(report.verdict.kind == "veto" and
                   any("guard received SIGTERM" in r for r in report.verdict.texts),
                   "a veto that names the SIGTERM")
    return seen


# -- the guard killed between steps: a row restore acts on, nothing left behind --------


def restored_after_kill(seen: Seen, s: Stage, owner: str, supervisors: ManagersAndEngines) -> None:
    """The killed guard's stop row is there, with the boot id, and restore brings the job back."""
    rows = pending(s)
    seen.check([r.owner.key for r in rows] == [owner], f"a pending stop row for {owner}")
    seen.check(all(r.boot_id for r in rows), "the row has the boot id")
    seen.recorded = bool(rows)
    done = restore_pending(s, supervisors)
    seen.check([d.result for d in done] == ["started"], f"restore started it ({done})")
    seen.check(pending(s) == [], "nothing left pending")


def killed_after_policy_set_aside(tmp: Path) -> Seen:
    seen = Seen()
    with stage(tmp) as s, FakeEngine(str(tmp / "docker.sock")) as engine:
        c = engine.create(s.container_job(), restart="always")
        env = {"DOCKER_HOST": f"unix://{engine.socket_path}"}
        set_aside = threading.Event()
        engine.after = lambda _method, action: set_aside.set() if action == "update" else None
        guard = guard_process(s, env)
        seen.check(set_aside.wait(20), "the guard set the restart policy aside")
        seen.check(wait_for(lambda: not c.running, 15.0, interval=0.02),
                   "the guard's signal ended the job")
        kill(guard)  # the container is down, its policy "no"
        seen.check(not c.running, "the container is down")
        restored_after_kill(seen, s, f"docker:{c.id}",
                            ManagersAndEngines(environ=env, state_dir=str(s.state)))
        seen.check(engine.wait_running(c), "the container runs again")
    return seen


def killed_after_the_drain_signal(tmp: Path) -> Seen:
    seen = Seen()
    with stage(tmp) as s:
        job, pid = s.job_in("system.slice/train.service")
        with fake_systemd(unit_state(pid)) as bus:
            guard = guard_process(s, {"DBUS_SYSTEM_BUS_ADDRESS": bus.address})
            seen.check(wait_for(lambda: job.poll() is not None, 15.0, interval=0.02),
                       "the guard's signal ended the job")
            kill(guard)
            restored_after_kill(seen, s, "systemd-service:train.service",
                                unit_supervisors(s, bus))
            seen.check(not dropin(s.dropins).exists(), "the drop-in is gone")
    return seen


def killed_between_dropin_and_reload(tmp: Path) -> Seen:
    seen = Seen()
    with stage(tmp) as s:
        job, pid = s.job_in("system.slice/train.service")
        with fake_systemd(unit_state(pid, reload_s=30)) as bus:
            guard = guard_process(s, {"DBUS_SYSTEM_BUS_ADDRESS": bus.address})
            seen.check(wait_for(lambda: dropin(s.dropins).exists(), 15.0, interval=0.02),
                       "the drop-in was written")
            time.sleep(0.3)  # inside the 30 s reload
            kill(guard)
            seen.check(dropin(s.dropins).exists() and job.poll() is None,
                       "killed with the drop-in in place, the job untouched")
            rows = pending(s)
            seen.check([r.issued for r in rows] == [None], "the row written before the drop-in")
            seen.recorded = bool(rows)
            # The next run of the guard puts it back first, and says so.
            cfg = s.config()
            report, took = timed(cfg, unit_supervisors(s, bus))
            seen.in_time = took < DEADLINE_S + 1
            seen.check(not dropin(s.dropins).exists(), "the next run removed the drop-in")
            seen.check(any("removed the drain drop-in a killed guard run left on train.service"
                           in w for w in report.verdict.warnings), "and said so")
    return seen


# -- what restore does with stops of an earlier boot --------------------------------


def earlier_boot(tmp: Path) -> Seen:
    from suspendguard.cli import main
    seen = Seen()
    with stage(tmp) as s:
        conf = s.config_file()
        with History.open(str(s.state)) as h:
            attempt = h.begin("suspend", "unit", False, "")
            h.stopping(attempt, [Stop(Owner("systemd-service", "train.service"), 1,
                                      time.time(), attempt, boot_id="an-earlier-boot")])
            h.finish(ended(attempt, "allow"))
        out = io.StringIO()
        # No bus at all: a stop left down asks nothing of systemd.
        code = main(["--config", str(conf), "restore", "--json"], out=out, err=io.StringIO(),
                    environ={"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp / 'no-bus'}"})
        seen.check(code == 0 and '"result": "left"' in out.getvalue(),
                   f"restore left it down ({out.getvalue()})")
        out = io.StringIO()
        main(["--config", str(conf), "status"], out=out, err=io.StringIO(), environ={})
        text = out.getvalue()
        seen.check("left down: stopped before a reboot" in text, "status lists it")
        seen.check("to start again: systemctl start train.service" in text,
                   "with the command that starts it")
        with History.open(str(s.state)) as h:
            seen.recorded = [r.result for r in h.not_restored()] == ["left"]
    return seen


SCENES: list[tuple[str, Callable[[Path], Seen]]] = [
    ("19 hung engine (accepts, never answers)", hung_engine),
    ("19 engine answers look-ups, hangs on update", engine_hangs_on_update),
    ("19 hung user manager", hung_user_manager),
    ("19 daemon-reload slower than the deadline", slow_reload),
    ("19 SIGTERM during a hung engine call", sigterm_in_hung_wait),
    ("19 SIGKILL, container kept down", killed_after_policy_set_aside),
    ("19 SIGKILL, unit kept down", killed_after_the_drain_signal),
    ("19 SIGKILL between drop-in and reload", killed_between_dropin_and_reload),
    ("19 stops from an earlier boot", earlier_boot),
]

__all__ = ["SCENES", "Seen", "can_run", "dbus_daemon"]

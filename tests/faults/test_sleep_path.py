"""The sleep path keeps its promises when a supervisor hangs or the guard is killed between steps.

The scenes (tests/faults/sleep_scenes.py, also rows of benchmarks/faults.py)
each give a verdict within ``[drain] deadline_s`` + 1 s and record it, and
leave no job stopped without a row that ``restore`` acts on: a container
engine that never answers or hangs on the update of a restart policy, a
hung user manager, a daemon-reload slower than the deadline, SIGTERM in a
hung wait, the guard SIGKILLed once a container or a unit was kept down and
its job signalled, or between the drain drop-in and the reload, stops of an
earlier boot. Below them, restore's own
budget: a slow start is "starting", a stop not reached stays pending.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.engine.fake_engine import FakeEngine

from suspendguard.guard import restore as restore_module
from suspendguard.guard.restore import restore
from suspendguard.model import Owner, OwnerKind
from suspendguard.record import Stop
from suspendguard.store.history import History
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system.boot import boot_ids
from suspendguard.system.deadline import Deadline, bounded
from suspendguard.system.procfs import ProcFS

from .sleep_scenes import (
    SCENES,
    Seen,
    can_run,
    dbus_daemon,
    fake_systemd,
    guard_process,
    pending,
    restore_pending,
    stage,
    unit_state,
)

pytestmark = pytest.mark.skipif(can_run() is not None or dbus_daemon() is None,
                                reason=f"{can_run() or 'needs dbus-daemon'}")


@pytest.mark.parametrize("scene", [s for _name, s in SCENES], ids=[n for n, _s in SCENES])
def test_scene(scene: Callable[[Path], Seen], tmp_path: Path) -> None:
    seen = scene(tmp_path)
    assert seen.ok, seen.failed
    assert seen.in_time is not False, "the verdict came after deadline_s + 1 s"
    assert seen.recorded is not False, "not recorded"


def stop_row(kind: OwnerKind = "systemd-service", name: str = "train.service") -> Stop:
    return Stop(Owner(kind, name), 1, time.time(), 1)


def test_a_slow_start_is_starting_not_failed(make_config: Any, tmp_path: Path) -> None:
    state = unit_state(0, start_delay_s={"train.service": 5.0})
    state["units"]["train.service"]["ActiveState"] = "inactive"
    with fake_systemd(state) as bus:
        sup = ManagersAndEngines(dropin_root=str(tmp_path / "run"), bus_address=bus.address,
                          environ={}, state_dir=str(tmp_path / "state"))
        start = time.monotonic()
        with bounded(Deadline(time.monotonic() + 2.0)):
            [done] = restore([stop_row()], sup, make_config().restore, enabled=True,
                             record=lambda *_a: None, log=lambda _line: None, warn=lambda _line: None)
    assert time.monotonic() - start < 3.0  # the budget, not the 5 s start
    assert done.result == "starting", done
    assert "suspendguard status" in done.why


def test_restore_ends_at_its_budget_and_leaves_the_rest_pending(make_config: Any,
                                                                tmp_path: Path) -> None:
    sup = ManagersAndEngines(dropin_root=str(tmp_path / "run"), environ={},
                      state_dir=str(tmp_path / "state"))
    results: list[str] = []
    with bounded(Deadline(time.monotonic() - 1.0)):
        [done] = restore([stop_row("docker", "a" * 64)], sup, make_config().restore,
                         enabled=True, record=lambda _s, r, _w: results.append(r),
                         log=lambda _line: None, warn=lambda _line: None)
    assert done.result == "pending" and results == []  # no result: the next restore's


def test_rows_written_ahead_are_completed_or_dropped(make_config: Any) -> None:
    """A stop row is there before the stop; one the supervisor refused never happened."""
    cfg = make_config()
    with History.open(cfg.state.dir) as h:
        attempt = h.begin("suspend", "unit", False, "")
        rows = [Stop(Owner("systemd-service", f"u{seq}.service"), seq, time.time(), attempt)
                for seq in (1, 2)]
        ids = h.stopping(attempt, rows)
        assert [(s.owner.name, s.issued) for s in h.pending_stops()] == \
            [("u1.service", None), ("u2.service", None)]
        h.stop_issued(taken=[ids[0]], refused=[ids[1]])
        [left] = h.pending_stops()
    assert left.owner.name == "u1.service" and left.issued is not None
    # The boot as any sandbox of this PID namespace names it (boot time, init's start), and
    # as the kernel names it, which no step of the clock moves.
    assert left.boot_id == f"{btime_start()} {kernel_boot_id()}"


def btime_start() -> str:
    btime = next(line.split()[1] for line in Path("/proc/stat").read_text().splitlines()
                 if line.startswith("btime "))
    return f"{btime}.{Path('/proc/1/stat').read_text().rsplit(')', 1)[1].split()[19]}"


def kernel_boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.mark.parametrize(("kept", "earlier"), [
    # The clock stepped by 3 s since (timesyncd after a resume): btime moved with it.
    (lambda: f"{int(btime_start().split('.')[0]) + 3}.1 {kernel_boot_id()}", False),
    # In a container, a root shell and the unit's sandbox read different kernel ids.
    (lambda: f"{btime_start()} 00000000-0000-0000-0000-000000000000", False),
    (lambda: btime_start(), False),  # a stop kept before the kernel's id was
    (lambda: kernel_boot_id(), False),  # a stop kept before "BTIME.START" was
    (lambda: "1700000000.1 00000000-0000-0000-0000-000000000000", True),  # a reboot since
])
def test_a_stop_is_of_this_boot_when_either_of_its_names_is(
        kept: Callable[[], str], earlier: bool) -> None:
    stop = Stop(Owner("systemd", "u1.service"), 1, 1.0, boot_id=kept())
    assert restore_module.earlier_boot(stop, boot_ids(ProcFS())) is earlier


def test_a_guard_killed_before_the_engine_answered_the_update_loses_no_policy(
        tmp_path: Path) -> None:
    # The engine took the update (policy "no") and the guard was killed before its answer
    # came (TimeoutStartSec, an OOM kill): the policy it had must still come back.
    with stage(tmp_path) as s, FakeEngine(str(tmp_path / "docker.sock")) as engine:
        c = engine.create(s.container_job(), restart="always")
        env = {"DOCKER_HOST": f"unix://{engine.socket_path}"}
        guards: list[subprocess.Popen[str]] = []
        engine.after = lambda _m, action: guards[0].kill() if action == "update" else None
        guards.append(guard_process(s, env))
        guards[0].communicate(timeout=30)
        assert c.restart == "" and c.running  # set aside; the job was never signalled
        [row] = pending(s)
        assert row.owner.key == f"docker:{c.id}" and row.issued is None
        [done] = restore_pending(s, ManagersAndEngines(environ=env, state_dir=str(s.state)))
        assert done.result == "skipped" and "still running" in done.why, done
        assert c.restart == "always"

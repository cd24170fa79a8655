"""Containers: their holders signalled by the guard, kept down by their engine, started again after.

Against tests/fakes/engine (the Docker Engine API on a unix socket, real
processes in ``docker-ID.scope`` / ``libpod-ID.scope`` cgroups), handed to
the guard the standard way: DOCKER_HOST / CONTAINER_HOST. What a real
Docker Engine does with the same requests is tested in
tests/containers/test_docker_engine.py; the fake stays for Podman (which
does not run here) and for engines that fail or are watched by others.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.engine.fake_engine import FakeEngine, cgroup_root
from helpers.holders import HOLDER, Holders
from helpers.isolation import ROOT
from helpers.runners import cli, guard
from helpers.wait import wait_for

from suspendguard.commands import restore as restore_command
from suspendguard.config import DevicesConfig
from suspendguard.errors import HistoryError
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.ledger import Ledger
from suspendguard.guard.scan import scan_holders
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.store import lock as guard_lock
from suspendguard.store.history import History
from suspendguard.supervise.containers import OUTLIVED_FILE, POLICIES_FILE
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system.engine import TIMEOUT_S

pytestmark = pytest.mark.skipif(not ROOT or cgroup_root() is None,
                                reason="the fake engine puts its containers in cgroups: root and "
                                       "a writable cgroup v2 tree")

# Longer than the fake engine's restart delay and the guard's respawn wait:
# a container that a restart policy brings back is running again by then.
SLEEP_S = 0.6


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[FakeEngine]:
    with FakeEngine(str(tmp_path / "docker.sock")) as e:
        yield e


def job(node: str, holders: Holders, mode: str = "graceful") -> list[str]:
    return [sys.executable, HOLDER, "--node", node, "--mode", mode, "--delay", "0",
            "--marker", holders.marker]


def quick_job(node: str, holders: Holders) -> list[str]:
    """A graceful job a shell makes: it holds the node a few ms after its start, not Python's 50+.

    For the tests whose point is a restart caught within Docker's restart
    delay plus the guard's margin, which Python's start-up on a loaded
    machine can outlast.
    """
    script = ('exec 3<"$1"; trap \'echo "$$ SIGINT" >> "$2"; exit 0\' INT; echo "ready $$"; '
              'while :; do sleep 0.05 3<&-; done')
    return ["/bin/sh", "-c", script, "sh", node, holders.marker]


def env(engine: FakeEngine) -> dict[str, str]:
    var = "DOCKER_HOST" if engine.kind == "docker" else "CONTAINER_HOST"
    return {var: f"unix://{engine.socket_path}"}


def supervisors(engine: FakeEngine, tmp_path: Path) -> ManagersAndEngines:
    return ManagersAndEngines(environ=env(engine), state_dir=str(tmp_path / "state"))


def conf_file(tmp_path: Path, node: str, extra: str = "") -> str:
    path = tmp_path / "config.toml"
    path.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n'
                    f'[idle]\nbackends = []\n[drain]\ntimeout_s = 5\n{extra}')
    return str(path)


def stops(tmp_path: Path) -> list[dict[str, Any]]:
    with History.open(str(tmp_path / "state")) as h:
        return [s.to_json() for a in h.attempts() for s in a.stops]


def test_the_fake_restarts_a_container_signalled_around_it(
        engine: FakeEngine, node: str, holders: Holders) -> None:
    # What makes the tests below able to fail: a plain drain's signal is
    # followed by the restart policy.
    c = engine.create(job(node, holders), restart="always")
    first = c.pid
    engine.kill_around(c)
    # Restarted once its new job said "ready": a Python start-up, which a loaded machine
    # can stretch past any fixed sleep.
    wait_for(lambda: c.restarts == 1 and c.pid != first, 10.0,
             message=lambda: f"not restarted: restarts {c.restarts}, pid {c.pid} (first {first})")
    assert c.running and c.pid != first and c.restarts == 1


def updates(engine: FakeEngine, cid: str) -> list[str]:
    """The restart policies the guard set, in order."""
    return [b["RestartPolicy"]["Name"] for m, p, _q, b in engine.requests
            if m == "POST" and p == f"/containers/{cid}/update"]


def test_drained_by_pid_kept_down_by_the_engine_and_restored_after_resume(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(job(node, holders), restart="always", name="infer")
    pid = c.pid
    report = guard(make_config(), supervisors=supervisors(engine, tmp_path))

    assert report.verdict.kind == "allow", report.verdict
    # The policy went aside before the signal, and the guard sent the signal itself.
    assert updates(engine, c.id) == ["no"]
    assert f"/containers/{c.id}/stop" not in engine.paths("POST")
    assert f"/containers/{c.id}/kill" not in engine.paths("POST")
    assert f"{pid} SIGINT" in holders.signals()
    [holder] = report.holders
    assert holder.owner.kind == "docker" and holder.owner.name == c.id
    assert holder.owner.restart == "always" and holder.outcome.kind == "exited"
    # The "sleep": the restart policy does not bring it back.
    time.sleep(SLEEP_S)
    assert not c.running and c.restarts == 0
    [pending] = stops(tmp_path)
    assert pending["owner"] == f"docker:{c.id}" and pending["result"] == "pending"

    code, out, err = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                         environ=env(engine))
    assert code == 0, err
    [done] = json.loads(out)["restored"]
    assert done["result"] == "started", done
    assert engine.wait_running(c) and c.pid != pid
    assert updates(engine, c.id) == ["no", "always"] and c.restart == "always"
    assert stops(tmp_path)[0]["result"] == "started"
    # Nothing left to bring back: a second restore starts nothing.
    assert cli("--config", conf_file(tmp_path, node), "restore", environ=env(engine))[1] == \
        "nothing to restore\n"
    assert engine.paths("POST").count(f"/containers/{c.id}/start") == 1


def test_a_restore_whose_time_ended_before_a_job_s_turn_exits_3(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Nobody runs restore again by itself: the job not reached stays down, and it is said.
    c = engine.create(job(node, holders), restart="always")
    assert guard(make_config(), supervisors=supervisors(engine, tmp_path)).verdict.kind == "allow"
    monkeypatch.setattr(restore_command, "RESTORE_AFTER_RESUME_S", 0.0)
    code, out, err = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                         environ=env(engine))
    [left] = json.loads(out)["restored"]
    assert (code, left["result"]) == (3, "pending"), err
    assert "the restore's budget ended before its turn" in left["why"]
    assert not c.running and stops(tmp_path)[0]["result"] == "pending"


def test_container_without_restart_policy_is_stopped_and_restored(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(job(node, holders), restart="no")
    report = guard(make_config(), supervisors=supervisors(engine, tmp_path))
    assert report.verdict.kind == "allow"
    assert report.holders[0].owner.restart == "no"
    assert updates(engine, c.id) == []  # nothing to set aside
    code, out, _ = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                       environ=env(engine))
    assert code == 0 and json.loads(out)["restored"][0]["result"] == "started"
    assert engine.wait_running(c)


def test_a_veto_starts_the_drained_container_again_at_once(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(job(node, holders), restart="always")
    _, slow = holders.start(node, mode="slow", delay=4)  # exits too late: the veto
    report = guard(make_config(drain={"timeout_s": 1}), supervisors=supervisors(engine, tmp_path))

    assert report.verdict.kind == "veto"
    assert any(f"pid {slow}" in r for r in report.verdict.texts), report.verdict.texts
    posts = engine.paths("POST")
    assert posts.index(f"/containers/{c.id}/update") < posts.index(f"/containers/{c.id}/start")
    assert c.running and c.restarts == 0  # started by the guard, not by the policy
    assert c.restart == "always"
    [row] = stops(tmp_path)
    assert row["result"] == "started"


def test_a_veto_whose_history_cannot_finish_still_records_the_start_again(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The row written ahead gets its result: left pending, any later restore (after this or
    # a later sleep) started the container a second time, after an operator stopped it.
    c = engine.create(job(node, holders), restart="always")
    holders.start(node, mode="slow", delay=4)  # exits too late: the veto

    def full(*_: Any, **__: Any) -> None:
        raise HistoryError("cannot write history.db: database or disk is full")

    monkeypatch.setattr(History, "finish", full)
    report = guard(make_config(drain={"timeout_s": 1}), supervisors=supervisors(engine, tmp_path))
    assert report.verdict.kind == "veto"
    assert any("history not recorded" in w for w in report.verdict.warnings)
    assert engine.wait_running(c) and c.restart == "always"
    with sqlite3.connect(tmp_path / "state" / "history.db") as db:
        assert db.execute("SELECT owner, result FROM stops").fetchall() == [
            (f"docker:{c.id}", "started")]


def test_a_held_container_keeps_its_policy_set_aside_through_the_next_guard_run(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    # Held after resume (its device unhealthy): "always" put back by the next pre-sleep run's
    # clean-up brought it back at dockerd's next start, onto that device.
    c = engine.create(job(node, holders), restart="always")
    assert guard(make_config(), supervisors=supervisors(engine, tmp_path)).verdict.kind == "allow"
    time.sleep(SLEEP_S)
    with History.open(str(tmp_path / "state")) as h:
        [stop] = h.pending_stops()
        h.record_hold(stop.id, "device nvidia unhealthy")
    report = guard(make_config(), supervisors=supervisors(engine, tmp_path))
    assert not any("put back the restart policy" in w for w in report.verdict.warnings), \
        report.verdict.warnings
    assert not c.running and c.restart == "" and updates(engine, c.id) == ["no"]
    # restore --force then puts it back as it starts the container.
    code, out, err = cli("--config", conf_file(tmp_path, node), "restore", "--force", "--json",
                         environ=env(engine))
    assert code == 0 and json.loads(out)["restored"][0]["result"] == "started", (out, err)
    assert engine.wait_running(c) and c.restart == "always"


def test_a_slurm_node_that_does_not_sleep_after_its_drain_starts_the_container_again(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path) -> None:
    # SuspendProgram's drain allowed, then logind refused the sleep (here: no system bus):
    # no resume will come to start what the drain stopped.
    c = engine.create(job(node, holders), restart="always")
    code, out, err = cli("--config", conf_file(tmp_path, node), "slurm", "node", "prepare",
                         "--suspend", environ={**env(engine), "DBUS_SYSTEM_BUS_ADDRESS":
                                               f"unix:path={tmp_path / 'no-bus'}"})
    doc = json.loads(out)
    assert (code, doc["verdict"], doc["suspend"]) == (1, "veto", "refused"), (doc, err)
    assert doc["reason_details"][0]["code"] == "power-action-failed", doc
    assert engine.wait_running(c) and c.restart == "always"
    assert [s["result"] for s in stops(tmp_path)] == ["started"]


def test_a_container_brought_back_after_its_stop_vetoes(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(job(node, holders), restart="always")
    c.back_after_stop = True
    report = guard(make_config(), supervisors=supervisors(engine, tmp_path))
    assert report.verdict.kind == "veto"
    assert any("started again" in r or "respawned" in r for r in report.verdict.texts), \
        report.verdict.texts
    assert engine.wait_running(c)
    c.back_after_stop = False  # the fake's teardown stops it for good


def test_a_container_started_meanwhile_is_skipped(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(job(node, holders), restart="always")
    assert guard(make_config(), supervisors=supervisors(engine, tmp_path)).verdict.kind == "allow"
    engine.handle("POST", f"/v1.43/containers/{c.id}/start", b"")  # an operator's docker start
    _, out, _ = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                    environ=env(engine))
    [done] = json.loads(out)["restored"]
    assert done["result"] == "skipped" and "already running" in done["why"]


def test_a_stop_whose_recorded_time_is_damaged_is_still_started_again(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    # The row names the container the guard stopped; only its time is lost (text in the
    # column): restore cannot tell a start by someone else, and brings the job back.
    c = engine.create(job(node, holders), restart="always")
    assert guard(make_config(), supervisors=supervisors(engine, tmp_path)).verdict.kind == "allow"
    time.sleep(SLEEP_S)
    assert not c.running
    with sqlite3.connect(tmp_path / "state" / "history.db") as db:
        db.execute("UPDATE stops SET stopped = 'yesterday'")
    code, out, err = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                         environ=env(engine))
    assert code == 0 and "Traceback" not in err, err
    [done] = json.loads(out)["restored"]
    assert done["result"] == "started" and done["stopped"] is None, done
    assert "stopped is 'yesterday', not a number: read as unknown" in err
    assert engine.wait_running(c) and c.restart == "always"


def test_a_removed_container_is_skipped(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(job(node, holders), restart="always")
    assert guard(make_config(), supervisors=supervisors(engine, tmp_path)).verdict.kind == "allow"
    del engine.containers[c.id]  # docker rm
    _, out, _ = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                    environ=env(engine))
    [done] = json.loads(out)["restored"]
    assert done == {**done, "result": "skipped", "why": "the container no longer exists"}


def test_engine_not_answering_drains_it_as_a_plain_process_with_a_warning(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(quick_job(node, holders), restart="always")
    first = c.pid
    gone = ManagersAndEngines(environ={"DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}"},
                       state_dir=str(tmp_path / "state"))
    report = guard(make_config(drain={"rounds": 2}), supervisors=gone)

    assert f"{first} SIGINT" in holders.signals()  # signalled directly
    assert engine.paths("POST") == []
    assert any("the container engine could not be reached" in w
               and "restart policy may bring it back" in w for w in report.verdict.warnings), \
        report.verdict.warnings
    # The respawn wait caught what the policy brought back.
    assert report.verdict.kind == "veto"
    assert any("respawned" in r for r in report.verdict.texts), report.verdict.texts
    assert c.restarts >= 1
    assert stops(tmp_path) == []


def test_podman_is_kept_down_through_its_compatible_api_and_restore_puts_its_policy_back(
        tmp_path: Path, node: str, holders: Holders, make_config: Any) -> None:
    with FakeEngine(str(tmp_path / "podman.sock"), api="1.41", kind="podman") as engine:
        c = engine.create(job(node, holders), restart="on-failure")
        c.restart_max = 3
        pid = c.pid
        report = guard(make_config(), supervisors=supervisors(engine, tmp_path))
        assert report.verdict.kind == "allow", report.verdict
        assert report.holders[0].owner.kind == "podman"
        posts = [(p, q, b) for m, p, q, b in engine.requests if m == "POST"]
        assert posts == [(f"/containers/{c.id}/update", {},
                          {"RestartPolicy": {"Name": "no", "MaximumRetryCount": 0}})]
        assert f"{pid} SIGINT" in holders.signals()
        time.sleep(SLEEP_S)
        assert not c.running and c.restarts == 0

        code, out, _ = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                           environ=env(engine))
        assert json.loads(out)["restored"][0]["result"] == "started" and code == 0
        assert (c.restart, c.restart_max) == ("on-failure", 3) and engine.wait_running(c)


def test_a_policy_the_engine_refuses_to_change_is_said_and_its_return_vetoes(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(quick_job(node, holders), restart="always")
    engine.refuse_update = True
    report = guard(make_config(drain={"rounds": 2}), supervisors=supervisors(engine, tmp_path))
    assert any("restart policy could not be set aside" in w and "may bring it back" in w
               for w in report.verdict.warnings), report.verdict.warnings
    assert report.verdict.kind == "veto"
    assert any("started again during the drain" in r or "respawned" in r
               for r in report.verdict.texts), report.verdict.texts
    assert c.restarts >= 1
    # Refused, the policy never changed: nothing is kept to put back, and nothing fails at it
    # (a kept record made every restore report the container failed, and every run warn).
    assert [s["result"] for s in stops(tmp_path)] != ["failed"], stops(tmp_path)
    assert not (tmp_path / "state" / POLICIES_FILE).exists() or json.loads(
        (tmp_path / "state" / POLICIES_FILE).read_text()) == {}


def test_a_policy_the_engine_refuses_to_put_back_is_kept_until_it_can_be(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(job(node, holders), restart="always")
    assert guard(make_config(), supervisors=supervisors(engine, tmp_path)).verdict.kind == "allow"
    time.sleep(SLEEP_S)
    assert not c.running and c.restart == ""
    engine.refuse_update = True  # a moment's engine error, after resume
    code, out, err = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                         environ=env(engine))
    [done] = json.loads(out)["restored"]
    # Started it was: the policy is said, and kept, not reported as a start that failed.
    assert code == 0 and done["result"] == "started", done
    assert "its restart policy always could not be put back" in done["why"]
    assert "tried again by the next restore or guard run" in done["why"]
    assert engine.wait_running(c)
    # The policy it had is not lost with that answer: the next restore puts it back.
    engine.refuse_update = False
    code, out, err = cli("--config", conf_file(tmp_path, node), "restore", environ=env(engine))
    assert code == 0 and out == "nothing to restore\n"
    assert "put back the restart policy always" in err, err
    assert c.restart == "always"


def test_a_policy_set_aside_with_no_answer_in_time_is_still_put_back(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    # The engine takes the update and answers past the guard's wait: the policy is "no" all
    # the same, and dropping the guard's record of "always" lost it for good.
    c = engine.create(job(node, holders), restart="always")
    answered = threading.Event()

    def late(method: str, action: str) -> None:
        if action == "update" and c.restart == "":  # the fake's "no"
            answered.wait(TIMEOUT_S + 1)

    engine.after = late
    try:
        report = guard(make_config(), supervisors=supervisors(engine, tmp_path))
    finally:
        answered.set()
        engine.after = None
    assert any("restart policy could not be set aside" in w for w in report.verdict.warnings)
    time.sleep(SLEEP_S)
    assert c.restart == ""  # the engine did set it aside
    code, out, _ = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                       environ=env(engine))
    assert code == 0, out
    assert c.restart == "always" and engine.wait_running(c)


def shell_container(engine: FakeEngine, node: str, holders: Holders, script: str) -> Any:
    """A container whose PID 1 is a shell running ``script`` ({job}: the job's command line),
    once its job holds the node."""
    c = engine.create(["/bin/sh", "-c", script.format(job=" ".join(job(node, holders)))],
                      restart="always")
    nodes = take_inventory(DevicesConfig((), (node,), ()))
    wait_for(lambda: bool(scan_holders(nodes).holders), 10)
    return c


def test_a_job_respawned_inside_its_container_is_kept_down_once(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    # Its PID 1 starts the worker again (an elastic agent): the next round signals the new
    # worker, and must not stop the container a second time, which wrote a second stop for
    # restore to handle ("still running since the drain") and recorded the set-aside policy.
    c = shell_container(engine, node, holders,
                        'echo "ready $$"; while :; do {job} > /dev/null; sleep 0.05; done')
    report = guard(make_config(drain={"rounds": 2}), supervisors=supervisors(engine, tmp_path))
    assert len(holders.signals()) >= 2, holders.signals()  # both rounds signalled a worker
    assert report.verdict.kind == "veto", report.verdict  # it came back each time
    assert [s["name"] for s in stops(tmp_path)] == [c.id]
    # Set aside once, and put back once at the veto.
    assert [b["RestartPolicy"]["Name"] for m, p, _q, b in engine.requests
            if m == "POST" and p == f"/containers/{c.id}/update"] == ["no", "always"]


NIGHT = 8 * 3600


@pytest.mark.parametrize(("wall_s", "asleep_s", "result"), [
    (60, 0, "skipped"),  # stopped a minute after the drain
    (NIGHT + 60, NIGHT, "skipped"),  # a minute after the resume
    (NIGHT + 2, NIGHT, "started"),  # its PID 1 noticed its job's end just after the resume
    (300, NIGHT, "skipped"),  # stopped five minutes after a drain from a shell, then a night
])
def test_a_container_whose_pid_1_outlived_its_job_stopped_by_hand_after_is_left_down(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any,
        wall_s: int, asleep_s: int, result: str) -> None:
    # Its PID 1 outlives its job: the drain leaves the container running. An operator's
    # "docker stop" between the drain and the restore is theirs: restore must not undo it.
    # One that exits seconds after the resume noticed its job's end: hours asleep between
    # (the engine's times are the wall clock's) make it no operator's.
    c = shell_container(engine, node, holders,
                        'echo "ready $$"; {job} > /dev/null; while :; do sleep 0.05; done')
    report = guard(make_config(), supervisors=supervisors(engine, tmp_path))
    assert report.verdict.kind == "allow", report.verdict
    assert c.running and holders.signals(), holders.signals()  # only its job was drained
    # The end of the drain saw it running; the stop below comes wall_s after that on the
    # wall clock, and the machine has slept asleep_s since.
    outlived = tmp_path / "state" / OUTLIVED_FILE
    [(key, [stopped, seen, slept])] = json.loads(outlived.read_text()).items()
    assert key == f"docker:{c.id}"
    outlived.write_text(json.dumps({key: [stopped, seen - wall_s, slept - asleep_s]}))
    engine.handle("POST", f"/v1.43/containers/{c.id}/stop", b"")
    wait_for(lambda: not c.running and not c.finished_at.startswith("0001-"), 5)
    code, out, err = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                         environ=env(engine))
    assert code == 0, err
    [done] = json.loads(out)["restored"]
    assert done["result"] == result, done
    if result == "skipped":
        assert "stopped by someone else after the drain" in done["why"], done
        assert f"/containers/{c.id}/start" not in engine.paths("POST")
        assert not c.running
    assert c.restart == "always"  # its policy is back all the same


def saving_container(engine: FakeEngine, node: str, holders: Holders, saved: Path) -> Any:
    """A container (restart on-failure) whose job, on SIGINT, saves until ``saved`` exists,
    then exits 0, once it holds the node."""
    script = ('exec 3<"$1"; trap \'echo "$$ SIGINT" >> "$2"; until [ -e "$3" ]; do sleep 0.05; '
              'done; exit 0\' INT; echo "ready $$"; while :; do sleep 0.05 3<&-; done')
    c = engine.create(["/bin/sh", "-c", script, "sh", node, holders.marker, str(saved)],
                      restart="on-failure")
    wait_for(lambda: bool(scan_holders(take_inventory(DevicesConfig((), (node,), ()))).holders),
             10)
    return c


def left_saving_then_started(engine: FakeEngine, c: Any, node: str, holders: Holders,
                             tmp_path: Path) -> None:
    """The run's restore left the container pending while its job saves, its policy back;
    once the save ends, the next restore starts it."""
    wait_for(lambda: bool(holders.signals()), 5)  # the shell's trap runs once its sleep ends
    assert holders.signals() == [f"{c.pid} SIGINT"]
    [row] = stops(tmp_path)
    assert (row["result"], "still draining" in row["why"]) == ("pending", True), row
    assert c.running and c.restart == "on-failure"  # its policy is back
    assert f"/containers/{c.id}/start" not in engine.paths("POST")
    (tmp_path / "saved").touch()  # the save ends
    wait_for(lambda: not c.running, 10)
    assert c.restarts == 0
    code, out, err = cli("--config", conf_file(tmp_path, node), "restore", "--json",
                         environ=env(engine))
    assert code == 0, err
    assert [r["result"] for r in json.loads(out)["restored"]] == ["started"]
    assert engine.wait_running(c) and stops(tmp_path)[0]["result"] == "started"


def test_a_container_whose_job_still_saves_at_the_veto_stays_pending_and_starts_after(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    # Its save outlives [drain] timeout_s, and it exits 0: an on-failure policy does not
    # bring it back. The veto's restore must neither start it beside the save nor record it
    # skipped (down for good): it stays pending, and the next restore starts it.
    c = saving_container(engine, node, holders, tmp_path / "saved")
    report = guard(make_config(drain={"timeout_s": 1}), supervisors=supervisors(engine, tmp_path))
    assert report.verdict.kind == "veto", report.verdict
    left_saving_then_started(engine, c, node, holders, tmp_path)


def test_a_pending_container_says_its_policy_could_not_be_put_back(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = saving_container(engine, node, holders, tmp_path / "saved")

    def refuse_once_set_aside() -> None:  # the engine refuses from the drain's update on
        wait_for(lambda: f"/containers/{c.id}/update" in engine.paths("POST"), 10,
                 interval=0.01, message="the drain never set the policy aside")
        engine.refuse_update = True

    refusing = threading.Thread(target=refuse_once_set_aside, daemon=True)
    refusing.start()
    report = guard(make_config(drain={"timeout_s": 1}), supervisors=supervisors(engine, tmp_path))
    refusing.join(10)
    assert report.verdict.kind == "veto", report.verdict
    [row] = stops(tmp_path)
    assert row["result"] == "pending", row
    assert row["why"].startswith("still draining") and (
        "its restart policy on-failure could not be put back" in row["why"]), row
    engine.refuse_update = False
    (tmp_path / "saved").touch()  # the save ends
    wait_for(lambda: not c.running, 10)


def test_a_restore_while_a_drain_runs_leaves_that_drain_alone(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path) -> None:
    # An operator's "suspendguard restore" (status says to run it) while the veto unit
    # drains: the drain's rows written ahead are not restore's, nor its policy set aside.
    c = engine.create(job(node, holders), restart="always")
    state = tmp_path / "state"
    owner = Owner("docker", c.id)
    with History.open(str(state)) as h:
        draining = h.begin("suspend", "unit", False, "digest")
        h.stopping(draining, [Stop(owner, 1, time.time())])
    assert supervisors(engine, tmp_path).engines.stop([owner], "SIGINT", 5.0) == {owner.key: ""}
    lock = guard_lock.take(str(state), 0.0)  # the drain's own
    assert lock.fd >= 0
    try:
        code, _out, err = cli("--config", conf_file(tmp_path, node), "restore",
                             environ=env(engine))
    finally:
        lock.release()
    assert code == 3 and f"another suspendguard run (pid {os.getpid()}) is draining" in err, err
    assert "restore started nothing" in err
    assert c.restart == "" and updates(engine, c.id) == ["no"]  # still set aside
    assert [r["result"] for r in stops(tmp_path)] == ["pending"]


def test_check_shows_the_container_owner(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path) -> None:
    c = engine.create(job(node, holders), restart="unless-stopped", name="infer")
    code, out, _ = cli("--config", conf_file(tmp_path, node), "check", "--json",
                       environ=env(engine))
    assert code == 0
    [holder] = json.loads(out)["holders"]
    assert holder["owner_key"] == f"docker:{c.id}"
    assert holder["owner"]["restart"] == "unless-stopped"
    assert holder["owner"]["engine"] == engine.socket_path
    assert engine.paths("POST") == []  # a dry run stops nothing
    _, text, _ = cli("--config", conf_file(tmp_path, node), "check", environ=env(engine))
    assert f"run by Docker container {c.id[:12]} (restart unless-stopped)" in text


class _Broken(ManagersAndEngines):
    """The real supervisors, failing after the holders were signalled."""

    def settle(self, stops: Any, deadline: Any) -> list[str]:
        raise RuntimeError("broken on purpose")


def test_a_drain_that_breaks_half_way_puts_the_owner_back(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any) -> None:
    c = engine.create(job(node, holders), restart="always")
    broken = _Broken(environ=env(engine), state_dir=str(tmp_path / "state"))
    with pytest.raises(RuntimeError, match="broken on purpose"):
        guard(make_config(), supervisors=broken)
    assert updates(engine, c.id) == ["no", "always"]  # set aside, then put back
    assert engine.wait_running(c) and c.restart == "always"
    # Its result is recorded: a later restore (after any sleep) has nothing of it to do, and
    # does not start it again after an operator stopped it.
    assert [s["result"] for s in stops(tmp_path)] == ["started"]
    code, out, _ = cli("--config", conf_file(tmp_path, node), "restore", environ=env(engine))
    assert (code, out) == (0, "nothing to restore\n")


def test_a_drain_that_breaks_while_a_job_saves_leaves_its_container_pending(
        engine: FakeEngine, node: str, holders: Holders, tmp_path: Path, make_config: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The drain breaks in its wait, once its signal reached the job: the restore the broken
    # run makes must not record the container skipped while the job saves (down for good).
    c = saving_container(engine, node, holders, tmp_path / "saved")
    reached = Ledger.reached

    def breaks(self: Ledger, *args: Any) -> str:
        reached(self, *args)
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(Ledger, "reached", breaks)
    with pytest.raises(RuntimeError, match="broken on purpose"):
        guard(make_config(), supervisors=supervisors(engine, tmp_path))
    left_saving_then_started(engine, c, node, holders, tmp_path)

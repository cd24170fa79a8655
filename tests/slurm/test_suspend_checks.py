"""What SuspendProgram and ResumeProgram check before they act: whose answer it is, whether
Slurm still counts the node going down, and a hold's RESUME that slurmctld did not take.

The node's guard is a child behind the remote's stand-in (``env``), and scontrol the
suite's stand-in (fake_slurm).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers.fake_slurm import FakeSlurm, node
from helpers.fake_slurm import node as slurm_node  # where a test's device node is `node`
from helpers.holders import Holders
from helpers.isolation import needs_root
from helpers.runners import cli

from slurm.test_controller import REMOTE
from slurm.test_programs import TIMED_OUT, config_file, recording_guard
from suspendguard.slurm import controller

ELSEWHERE = json.dumps({"node": "node7", "verdict": "allow", "reasons": [],
                        "reason_details": [], "attempt": 3})


def another_host(tmp_path: Path, flags: tuple[str, ...]) -> tuple[FakeSlurm, Path, Path, Path]:
    """node12 (its state ``flags``), and a config whose remote reaches node7 whatever node it
    is asked for (a wrong ~/.ssh/config entry): node7's guard answers allow as itself, and
    notes each question. The fake scontrol, the config, the notes, and where the power
    action notes the nodes it powered off."""
    fake = FakeSlurm(tmp_path, {"node12": node(flags)})
    asked, off = tmp_path / "asked", tmp_path / "powered-off"
    guard = [sys.executable, "-c", f"import sys; open({str(asked)!r}, 'a').write("
             f"' '.join(sys.argv[1:]) + '\\n'); print({ELSEWHERE!r})"]
    power_off = [sys.executable, "-c", f"open({str(off)!r}, 'a').write('{{node}}\\n')"]
    path = tmp_path / "config.toml"
    path.write_text("[slurm]\n"
                    f"remote = {json.dumps(REMOTE)}\n"
                    f"guard = {json.dumps(guard)}\n"
                    f"power_off = {json.dumps(power_off)}\n"
                    f"scontrol = {json.dumps(str(fake.path))}\n"
                    f"exclude_file = {json.dumps(str(tmp_path / 'exclude.conf'))}\n"
                    "resume_wait_s = 0.5\n")
    return fake, path, asked, off


ANSWERED_AS = ("the guard on node12 did not answer: answered as 'node7' (another host, or its "
               "host name is not its NodeName: set [slurm] node_name there)")


def test_an_answer_from_another_host_holds_the_node_up_as_unreachable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # node7's guard allowed for its own holders: node12's were never asked, and powered off
    # node12 would take them down.
    monkeypatch.setattr(controller, "REGISTER_S", 0.1)
    fake, path, asked, off = another_host(tmp_path, ("POWERING_DOWN",))
    status, _, err = cli("--config", str(path), "slurm", "suspend", "node12")
    assert status == 1, err
    assert not off.exists()
    held = f"suspendguard: node-unreachable: {ANSWERED_AS}"
    assert f"node12: not powered down: {held}" in err, err
    assert fake.node("node12") == node(("POWERED_DOWN", "DRAIN"), held)
    assert (tmp_path / "exclude.conf").read_text().endswith("SuspendExcNodes=node12\n")
    # Nothing more asked of the host that answered: neither restart nor rejoin.
    assert asked.read_text() == "slurm node prepare --as node12\n"


@needs_root
def test_a_host_reached_for_another_node_drains_nothing_and_the_node_is_held(
        tmp_path: Path, conf: Path, node: str, holders: Holders,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The remote reaches node7 (SLURMD_NODENAME there) for node12, and runs node7's real
    # guard: asked as node12, it leaves node7's own job alone, and node12 is held.
    monkeypatch.setattr(controller, "REGISTER_S", 0.1)
    fake = FakeSlurm(tmp_path, {"node12": slurm_node(("POWERING_DOWN",))})
    off = tmp_path / "powered-off"
    guard = [sys.executable, "-m", "suspendguard", "--config", str(conf)]
    power_off = [sys.executable, "-c", f"open({str(off)!r}, 'a').write('{{node}}\\n')"]
    path = tmp_path / "controller.toml"
    path.write_text("[slurm]\nnode_name = \"ctl\"\n"
                    f"remote = {json.dumps(['/usr/bin/env', 'SLURMD_NODENAME=node7'])}\n"
                    f"guard = {json.dumps(guard)}\n"
                    f"power_off = {json.dumps(power_off)}\n"
                    f"scontrol = {json.dumps(str(fake.path))}\n"
                    f"exclude_file = {json.dumps(str(tmp_path / 'exclude.conf'))}\n")
    proc, _ = holders.start(node)
    status, _, err = cli("--config", str(path), "slurm", "suspend", "node12")
    assert status == 1, err
    assert holders.signals() == [] and proc.poll() is None  # node7's job never drained
    assert not (tmp_path / "state" / "history.db").exists()  # nor even looked at
    assert not off.exists()
    held = f"suspendguard: node-unreachable: {ANSWERED_AS}"
    assert fake.node("node12") == slurm_node(("POWERED_DOWN", "DRAIN"), held), err


def test_a_woken_node_another_host_answers_for_is_not_taken_for_awake(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller, "RETRY_PAUSE_S", 0.1)
    _, path, asked, _ = another_host(tmp_path, ("POWERING_UP",))
    status, _, err = cli("--config", str(path), "slurm", "resume", "node12")
    assert status == 1, err
    assert "node12: not awake within [slurm] resume_wait_s (0.5 s): answered as 'node7'" in err
    assert set(asked.read_text().splitlines()) == {"slurm node awake --as node12"}  # never: rejoin --boot


@pytest.mark.parametrize(("flags", "state"), [
    (("POWERED_DOWN",), "ALLOCATED"),  # past SuspendTimeout, a job placed on it
    (("POWERING_UP",), "ALLOCATED"),  # and the node being woken for it
    ((), "IDLE"),  # its slurmd registered: up again
])
@pytest.mark.parametrize("power_off", [False, True])
def test_a_node_slurm_no_longer_counts_going_down_is_left_to_slurm_unasked(
        tmp_path: Path, flags: tuple[str, ...], state: str, power_off: bool) -> None:
    # prepare takes every holder for one outside Slurm: asked now, it would stop the tasks
    # of the job Slurm placed on the node.
    fake = FakeSlurm(tmp_path, {"node1": node(flags, state=state)})
    path, asked = recording_guard(tmp_path, fake)
    off = tmp_path / "powered-off"
    if power_off:
        with path.open("a") as f:
            f.write(f"power_off = {json.dumps([sys.executable, '-c', f'open({str(off)!r}, 0o1)'])}\n")
    status, _, err = cli("--config", str(path), "slurm", "suspend", "node1")
    assert status == 1, err
    assert not asked.exists(), asked.read_text()
    assert not off.exists()
    shown = "+".join([state, *flags])
    assert f"node1: left to Slurm: no longer powering down ({shown}); its guard not asked" in err
    assert fake.node("node1") == node(flags, state=state)  # not drained: no hold


RESUME_NODE1 = "update NodeName=node1 State=RESUME"


def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeSlurm) -> tuple[int, str]:
    """``slurm suspend node1`` refused by its guard: the exit status and what was said."""
    monkeypatch.setattr(controller, "REGISTER_S", 0.1)
    monkeypatch.setattr(controller, "SCONTROL_PAUSE_S", 0.0)
    status, _, err = cli("--config", str(config_file(tmp_path, fake, "veto")), "slurm",
                         "suspend", "node1")
    return status, err


def resumes(fake: FakeSlurm) -> int:
    return fake.calls().count(RESUME_NODE1.split())


def test_a_hold_s_resume_slurmctld_answered_late_is_asked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_DOWN",))})
    fake.fail(RESUME_NODE1, TIMED_OUT, times=1)
    status, err = held(tmp_path, monkeypatch, fake)
    assert status == 1, err
    assert resumes(fake) == 2
    assert f"node1: scontrol {RESUME_NODE1}: " in err and "; asked again" in err, err
    assert fake.node("node1") == node(("POWERED_DOWN", "DRAIN"),
                                      "suspendguard: sigint-ignored: pid 7 ignores SIGINT")


def test_a_hold_s_resume_never_taken_is_an_error_with_scontrol_s_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_DOWN",))})
    fake.fail(RESUME_NODE1, TIMED_OUT)
    _, err = held(tmp_path, monkeypatch, fake)
    assert resumes(fake) == controller.SCONTROL_TRIES
    [said] = [line for line in err.splitlines() if "not set RESUME" in line]
    assert said.startswith(f"suspendguard: error: node1: not set RESUME: scontrol "
                           f"{RESUME_NODE1}: "), said
    assert TIMED_OUT in said and "it was not powering down" not in said, said
    assert "DRAIN" in fake.node("node1")["flags"]  # held all the same


def test_a_resume_slurmctld_refuses_to_a_node_not_powering_down_is_no_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # slurmctld's answer (update_node: an invalid state change), not a failure to reach it:
    # asked once, and said as what it is.
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_DOWN",))})
    fake.fail(RESUME_NODE1, "slurm_update error: Invalid node state specified")
    _, err = held(tmp_path, monkeypatch, fake)
    assert resumes(fake) == 1
    [said] = [line for line in err.splitlines() if "not set RESUME" in line]
    assert said.startswith("suspendguard: node1: not set RESUME (") and said.endswith(
        "Invalid node state specified): it was not powering down"), said

"""The controller's programs as slurmctld runs them, against a stand-in scontrol (fake_slurm)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO
from helpers.fake_slurm import FakeSlurm, node
from helpers.journal import entries, standing_in
from helpers.runners import cli

from slurm.test_controller import REMOTE, answering
from suspendguard.cli import main
from suspendguard.slurm import controller
from suspendguard.slurm.controller import UNSAID
from suspendguard.slurm.node import _health_action
from suspendguard.slurm.remote import held_by_guard, ours
from suspendguard.slurm.scontrol import Scontrol


def config_file(tmp_path: Path, fake: FakeSlurm, verdict: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text("[slurm]\n"
                    f"remote = {json.dumps(REMOTE)}\n"
                    f"guard = {json.dumps(list(answering(verdict)))}\n"
                    f"scontrol = {json.dumps(str(fake.path))}\n"
                    f"exclude_file = {json.dumps(str(tmp_path / 'exclude.conf'))}\n")
    return path


def test_a_hold_is_made_and_told_with_the_standard_streams_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # slurmctld closes every descriptor before it runs SuspendProgram (power_save.c:
    # closeall(0)): Python starts with sys.stdout and sys.stderr None.
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_DOWN",))})
    path = config_file(tmp_path, fake, "veto")
    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", None)
    monkeypatch.setattr(controller, "REGISTER_S", 0.1)
    with standing_in(tmp_path, monkeypatch) as journal:
        status = main(["--config", str(path), "slurm", "suspend", "node1"], environ={})
        said = [e["MESSAGE"] for e in entries(journal)]
    assert status == 1
    held = "suspendguard: sigint-ignored: pid 7 ignores SIGINT"
    assert fake.node("node1") == node(("POWERED_DOWN", "DRAIN"), held)
    assert (tmp_path / "exclude.conf").read_text().endswith("SuspendExcNodes=node1\n")
    assert f"node1: not powered down: {held}" in said


def test_the_suspend_program_run_as_slurmctld_runs_it_holds(tmp_path: Path) -> None:
    # For real: descriptors 0, 1 and 2 closed before the exec, as power_save.c leaves them.
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_DOWN",))})
    path = config_file(tmp_path, fake, "veto")
    closed = ("import os, sys; os.closerange(0, 3); "
              "os.execv(sys.executable, [sys.executable, '-m', 'suspendguard', *sys.argv[1:]])")
    done = subprocess.run([sys.executable, "-c", closed, "--config", str(path), "slurm",
                           "suspend", "node1"], cwd=REPO, timeout=120, check=False)
    assert done.returncode == 1
    held = "suspendguard: sigint-ignored: pid 7 ignores SIGINT"
    assert fake.node("node1") == node(("POWERED_DOWN", "DRAIN"), held)
    assert (tmp_path / "exclude.conf").read_text().endswith("SuspendExcNodes=node1\n")


MAINTENANCE = "PSU swap, ticket 4411"
TIMED_OUT = "slurm_load_node error: Socket timed out on send/recv operation"


def suspend_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    fake: FakeSlurm, exit_status: int = 1) -> tuple[str, str]:
    """``slurm suspend node1`` refused by its guard: the node's reason after, and what was said."""
    monkeypatch.setattr(controller, "REGISTER_S", 0.1)
    monkeypatch.setattr(controller, "SCONTROL_PAUSE_S", 0.0)
    status, _, err = cli("--config", str(config_file(tmp_path, fake, "veto")), "slurm",
                         "suspend", "node1")
    assert status == exit_status, err
    reason: str = fake.node("node1")["reason"]
    return reason, err


def test_a_maintenance_reason_read_late_is_kept_before_the_guards(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN", "POWERING_DOWN"), MAINTENANCE)})
    # The read before the question fails all its tries (the node is asked as before), the
    # hold's read twice.
    fake.fail("show node -o node1", TIMED_OUT, times=controller.SCONTROL_TRIES + 2)
    reason, _ = suspend_refused(tmp_path, monkeypatch, fake)
    assert reason == f"{MAINTENANCE} (suspendguard: sigint-ignored: pid 7 ignores SIGINT)"
    assert _health_action(True, reason, []) == "leave"  # the admin's drain is theirs to lift


def test_a_multi_line_maintenance_reason_is_kept_on_one_line_without_its_stamp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # scontrol prints a reason's further lines after its stamp: read as one line, the
    # stamp dropped, so the hold's reason never carries a stamp of Slurm's in its words.
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN", "POWERING_DOWN"),
                                              "PSU swap\nticket 4411\nback Monday")})
    reason, _ = suspend_refused(tmp_path, monkeypatch, fake)
    assert reason == ("PSU swap ticket 4411 back Monday "
                      "(suspendguard: sigint-ignored: pid 7 ignores SIGINT)")


def test_slurmctld_s_not_responding_is_replaced_so_the_node_s_check_lifts_the_hold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Slurm 22.05 suspends a DOWN node too: its reason is slurmctld's, nobody's to lift.
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_DOWN",), "Not responding", "DOWN")})
    reason, _ = suspend_refused(tmp_path, monkeypatch, fake)
    assert reason == "suspendguard: sigint-ignored: pid 7 ignores SIGINT"
    assert _health_action(True, reason, []) == "resume"


def test_a_long_maintenance_reason_still_keeps_the_held_node_out_of_power_saving(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Their words are cut, not the guard's mark: sync must still find the node held,
    # or it drops it from SuspendExcNodes and Slurm 22.05 powers it down again.
    long = "PSU swap, see the ticket: " + "the rack's second feed is down " * 6
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN", "POWERING_DOWN"), long)})
    reason, _ = suspend_refused(tmp_path, monkeypatch, fake)
    assert len(reason) <= 200 and reason.startswith(long[:90])
    assert reason.endswith(" (suspendguard: sigint-ignored: pid 7 ignores SIGINT)")
    assert held_by_guard(reason) and _health_action(True, reason, []) == "leave"
    assert cli("--config", str(tmp_path / "config.toml"), "slurm", "sync")[0] == 0
    assert (tmp_path / "exclude.conf").read_text().endswith("SuspendExcNodes=node1\n")


def test_a_reason_never_read_is_held_as_not_the_guards_to_lift(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The drain replaces whatever reason the node had: it may have been a maintenance
    # drain, so nothing the guard does may lift it.
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN", "POWERING_DOWN"), MAINTENANCE)})
    fake.fail("show node -o node1", TIMED_OUT)
    reason, err = suspend_refused(tmp_path, monkeypatch, fake)
    assert reason == ("earlier reason unknown, scontrol show node failed "
                      "(suspendguard: sigint-ignored: pid 7 ignores SIGINT)")
    assert not ours(reason) and held_by_guard(reason)
    [said] = [line for line in err.splitlines() if "could not be read before the drain" in line]
    assert "scontrol update NodeName=node1 State=RESUME" in said
    # slurmctld answers again: the node's health check, with its accelerator free and
    # healthy, and the sync timer's pass both leave the drain as it is.
    fake.heal("show node -o node1")
    before = len(fake.calls())
    assert cli("--config", str(on_node(tmp_path)), "slurm", "health")[:2] == (
        0, "node1: leave: accelerator free and healthy\n")
    assert cli("--config", str(tmp_path / "node.toml"), "slurm", "sync")[0] == 0
    assert fake.node("node1") == node(("POWERED_DOWN", "DRAIN"), reason)
    assert ["update", "NodeName=node1", "State=RESUME"] not in fake.calls()[before:]
    assert (tmp_path / "exclude.conf").read_text().endswith("SuspendExcNodes=node1\n")


def on_node(tmp_path: Path) -> Path:
    """node1's own configuration: its accelerator free and healthy (no device to look at)."""
    path = tmp_path / "node.toml"
    path.write_text((tmp_path / "config.toml").read_text() + 'node_name = "node1"\n'
                    "[devices]\nfamilies = []\nnodes = []\n[idle]\nbackends = []\n")
    return path


DRAIN_NODE1 = "update NodeName=node1 State=DRAIN"


def test_a_drain_that_failed_once_is_asked_again_with_the_admin_s_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hold's RESUME lifts the maintenance drain: the guard's drain is all that
    # keeps it, so a drain slurmctld did not take is asked again.
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN", "POWERING_DOWN"), MAINTENANCE)})
    fake.fail(DRAIN_NODE1, TIMED_OUT, times=1)
    reason, _ = suspend_refused(tmp_path, monkeypatch, fake)
    assert reason == f"{MAINTENANCE} (suspendguard: sigint-ignored: pid 7 ignores SIGINT)"
    assert "DRAIN" in fake.node("node1")["flags"]
    assert (tmp_path / "exclude.conf").read_text().endswith("SuspendExcNodes=node1\n")


def test_a_drain_never_taken_is_said_with_the_command_that_restores_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN", "POWERING_DOWN"), MAINTENANCE)})
    fake.fail(DRAIN_NODE1, TIMED_OUT)
    # Not held at all: scontrol failed (3), not a node its guard held up (1).
    _, err = suspend_refused(tmp_path, monkeypatch, fake, exit_status=3)
    [said] = [line for line in err.splitlines() if "could not be drained" in line]
    assert said.endswith(f"drain it by hand: scontrol update NodeName=node1 State=DRAIN "
                         f"Reason='{MAINTENANCE} (suspendguard: sigint-ignored: pid 7 "
                         "ignores SIGINT)'")


def test_a_node_woken_unhealthy_keeps_an_admin_s_reason_before_the_guards(
        tmp_path: Path) -> None:
    # ResumeProgram drains a node whose guard says it is not fit to run jobs: a drain
    # somebody else set stays theirs to lift, as at a hold.
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN", "POWERING_UP"), MAINTENANCE)})
    status, _, err = cli("--config", str(config_file(tmp_path, fake, "veto")), "slurm",
                         "resume", "node1")
    assert status != 0, err
    reason = fake.node("node1")["reason"]
    assert reason == f"{MAINTENANCE} (suspendguard: sigint-ignored: pid 7 ignores SIGINT)"
    assert _health_action(True, reason, []) == "leave"


@pytest.mark.parametrize("flags", [("DRAIN", "POWERING_UP"), ("DRAIN", "POWERING_DOWN")])
def test_a_drain_whose_reason_slurm_dropped_is_not_taken_for_the_guards(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...]) -> None:
    # Slurm 22.05 frees a drained node's reason at a power-save wake and when a powered-down
    # node registers, the DRAIN kept: an admin's maintenance drain reads as a drain with no
    # reason. Woken unhealthy (ResumeProgram) or held (SuspendProgram), the guard's reason
    # goes after a mark of it, and health never lifts the drain.
    fake = FakeSlurm(tmp_path, {"node1": node(flags)})
    if "POWERING_UP" in flags:
        status, _, err = cli("--config", str(config_file(tmp_path, fake, "veto")), "slurm",
                             "resume", "node1")
        assert status != 0, err
        reason = fake.node("node1")["reason"]
    else:
        reason, _ = suspend_refused(tmp_path, monkeypatch, fake)
    assert reason == f"{UNSAID} (suspendguard: sigint-ignored: pid 7 ignores SIGINT)", reason
    assert "DRAIN" in fake.node("node1")["flags"]
    assert _health_action(True, reason, []) == "leave"


def test_a_node_woken_unhealthy_that_cannot_be_drained_is_not_let_rejoin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Registered undrained, it would run the job that woke it on the unhealthy device.
    monkeypatch.setattr(controller, "SCONTROL_PAUSE_S", 0.0)
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_UP",))})
    fake.fail(DRAIN_NODE1, TIMED_OUT)
    unhealthy = json.dumps({"verdict": "veto", "reasons": ["gpu 0: CUDA init error 999"],
                            "reason_details": [{"code": "unhealthy-after-resume",
                                                "text": "gpu 0: CUDA init error 999"}]})
    path, asked = recording_guard(tmp_path, fake, unhealthy)
    status, _, err = cli("--config", str(path), "slurm", "resume", "node1")
    assert status == 3, err  # scontrol failed
    assert asked.read_text() == "slurm node awake --as node1\n"  # never: rejoin --boot
    assert ("node1: unfit after its wake (unhealthy-after-resume) and not drained: slurmd "
            "not restarted; Slurm marks it DOWN at ResumeTimeout") in err


def recording_guard(tmp_path: Path, fake: FakeSlurm,
                    doc: str = json.dumps({"verdict": "allow", "reasons": [],
                                           "reason_details": []})) -> tuple[Path, Path]:
    """A config whose nodes' guard answers ``doc`` to every step, as the node asked, and
    notes each one; the notes' file."""
    asked = tmp_path / "asked"
    guard = [sys.executable, "-c", f"import json, os, sys; open({str(asked)!r}, 'a').write("
             f"' '.join(sys.argv[1:]) + '\\n'); print(json.dumps({{**json.loads({doc!r}), "
             "'node': os.environ['SG_NODE']}))"]
    path = tmp_path / "config.toml"
    path.write_text("[slurm]\n"
                    f"remote = {json.dumps(REMOTE)}\n"
                    f"guard = {json.dumps(guard)}\n"
                    f"scontrol = {json.dumps(str(fake.path))}\n"
                    f"exclude_file = {json.dumps(str(tmp_path / 'exclude.conf'))}\n")
    return path, asked


def test_a_node_whose_slurmd_registered_by_itself_is_not_restarted_with_b(
        tmp_path: Path) -> None:
    # A real boot ([slurm] power_on, the BMC) brings slurmd up with the node, and slurmctld
    # takes its registration: the job that woke the node may run already. A restart with -b
    # would be an unexpected reboot to slurmctld: the node DOWN, its jobs killed.
    fake = FakeSlurm(tmp_path, {"node1": node(state="ALLOCATED")})
    path, asked = recording_guard(tmp_path, fake)
    status, _, err = cli("--config", str(path), "slurm", "resume", "node1")
    assert status == 0, err
    assert asked.read_text() == "slurm node awake --as node1\n"
    assert "node1: slurmd registered by itself: not restarted" in err


def test_a_node_whose_state_read_failed_once_is_not_restarted_with_b(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # slurmctld answers late while many nodes wake at once: a failed read is no sign that
    # the node has not registered, and -b on a registered node kills its jobs.
    monkeypatch.setattr(controller, "SCONTROL_PAUSE_S", 0.0)
    fake = FakeSlurm(tmp_path, {"node1": node(state="ALLOCATED")})
    fake.fail("show node -o node1", TIMED_OUT, times=1)
    path, asked = recording_guard(tmp_path, fake)
    status, _, err = cli("--config", str(path), "slurm", "resume", "node1")
    assert status == 0, err
    assert asked.read_text() == "slurm node awake --as node1\n"
    assert "node1: slurmd registered by itself: not restarted" in err


@pytest.mark.parametrize(("flags", "state", "setting"), [
    # slurmctld never answers: whether the node registered by itself is not known.
    ((), "ALLOCATED", ""),
    # [slurm] power_off: the node boots, and its slurmd registers by itself, perhaps just
    # after its guard answered: -b then would land on a node that may run the job.
    (("POWERING_UP",), "IDLE", 'power_off = ["/bin/true"]\n'),
])
def test_a_node_powered_off_or_whose_state_is_unknown_is_waited_for_not_restarted_with_b(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], state: str,
        setting: str) -> None:
    monkeypatch.setattr(controller, "SCONTROL_PAUSE_S", 0.0)
    monkeypatch.setattr(controller, "REGISTER_AFTER_RESTART_S", 0.1)
    fake = FakeSlurm(tmp_path, {"node1": node(flags, state=state)})
    if not setting:
        fake.fail("show node -o node1", TIMED_OUT)
    path, asked = recording_guard(tmp_path, fake)
    with path.open("a") as f:
        f.write(f"{setting}resume_wait_s = 0.5\n")
    status, _, err = cli("--config", str(path), "slurm", "resume", "node1")
    assert status == 1, err  # never seen registered
    assert asked.read_text() == "slurm node awake --as node1\n"
    assert ("node1: its state could not be read (" in err) == (not setting), err


def test_a_node_slurmctld_still_counts_powering_up_is_restarted_with_b(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A node that only slept: its slurmd's registrations are ignored (its boot time is old).
    monkeypatch.setattr(controller, "REGISTER_AFTER_RESTART_S", 0.1)
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_UP",))})
    path, asked = recording_guard(tmp_path, fake)
    status, _, err = cli("--config", str(path), "slurm", "resume", "node1")
    assert status == 1, err  # the fake never registers it
    assert asked.read_text() == "slurm node awake --as node1\nslurm node rejoin --boot --as node1\n"


def test_every_node_is_woken_before_any_is_waited_for(tmp_path: Path) -> None:
    # More nodes than were once asked at a time: the last one's boot must not wait for the
    # first ones' checks, or its job misses ResumeTimeout.
    names = [f"node{i}" for i in range(1, 21)]
    fake = FakeSlurm(tmp_path, {n: node(state="ALLOCATED") for n in names})
    path, asked = recording_guard(tmp_path, fake)
    on = [sys.executable, "-c", f"open({str(asked)!r}, 'a').write('on {{node}}\\n')"]
    with path.open("a") as f:
        f.write(f"power_on = {json.dumps(on)}\n")
    status, _, err = cli("--config", str(path), "slurm", "resume", ",".join(names))
    assert status == 0, err
    lines = asked.read_text().splitlines()
    assert sorted(lines[:20]) == sorted(f"on {n}" for n in names), lines
    assert sorted(lines[20:]) == sorted(f"slurm node awake --as {n}" for n in names), lines


def test_a_node_whose_health_is_unknown_after_its_wake_rejoins_and_it_is_said(
        tmp_path: Path) -> None:
    # unknown holds a node back no more than the check after resume holds a host's jobs:
    # not drained, and the reason is in the ResumeProgram's log.
    why = "device npu 0 unknown: npu-smi failed: exit status 1"
    doc = json.dumps({"verdict": "unknown", "reasons": [why], "reason_details": [
        {"code": "health-unknown", "text": why, "device": "ascend"}]})
    fake = FakeSlurm(tmp_path, {"node1": node(state="ALLOCATED")})
    path, asked = recording_guard(tmp_path, fake, doc)
    status, _, err = cli("--config", str(path), "slurm", "resume", "node1")
    assert status == 0, err
    assert asked.read_text() == "slurm node awake --as node1\n"
    assert fake.node("node1") == node(state="ALLOCATED")
    assert f"node1: its accelerator's health after the wake is unknown: {why}" in err
    assert "node1: awake and its health unknown; slurmd registered" in err, err
    assert "healthy" not in err, err


@pytest.mark.parametrize("program", ["suspend", "resume"])
@pytest.mark.parametrize("hostlist", ["", " ", ",,"])
def test_a_hostlist_of_no_node_is_bad_usage_and_scontrol_is_not_asked_to_expand_it(
        tmp_path: Path, program: str, hostlist: str) -> None:
    fake = FakeSlurm(tmp_path, {"node1": node()})
    status, out, err = cli("--config", str(config_file(tmp_path, fake, "allow")), "slurm",
                           program, hostlist)
    assert (status, out) == (2, ""), err
    assert err == f"suspendguard: slurm {program}: HOSTLIST {hostlist!r} names no node\n"
    assert not [c for c in fake.calls() if c[:2] == ["show", "hostnames"]]


@pytest.mark.parametrize("program", ["suspend", "resume"])
@pytest.mark.parametrize("hostlist", ["n[3-1]", "nid[10-20]:4", "n[1-2"])
def test_a_hostlist_slurm_cannot_read_is_bad_usage(
        tmp_path: Path, real_scontrol: Scontrol, program: str, hostlist: str) -> None:
    # Slurm's own scontrol reads it (it exits 0 on one it cannot): bad usage, as "," is,
    # not a failure of scontrol or slurmctld.
    path = tmp_path / "config.toml"
    path.write_text(f"[slurm]\nscontrol = {json.dumps(real_scontrol.path)}\n"
                    'exclude_file = ""\n')
    status, out, err = cli("--config", str(path), "slurm", program, hostlist)
    assert (status, out) == (2, ""), err
    assert err.startswith(f"suspendguard: slurm {program}: HOSTLIST {hostlist!r}: scontrol show "
                          f"hostnames {hostlist}: ") and err.count("\n") == 1, err


def test_the_resume_program_takes_the_features_slurm_passes_after_the_hostlist(
        tmp_path: Path) -> None:
    # Slurm's node_features plugins (power_save.c, power_job_reboot) run ResumeProgram with
    # the features a job asks for after the hostlist: the nodes are woken all the same.
    fake = FakeSlurm(tmp_path, {"node1": node(state="ALLOCATED")})
    path, asked = recording_guard(tmp_path, fake)
    status, out, err = cli("--config", str(path), "slurm", "resume", "node1", "cache,quad")
    assert (status, out) == (0, ""), err
    assert asked.read_text() == "slurm node awake --as node1\n"
    assert "slurm resume: FEATURES 'cache,quad' not applied: the nodes wake as they are" in err

"""A node's ``slurm node prepare`` as ``suspendguard mode`` says, on a real holder of its node.

The SuspendProgram's drain is the node's guard too: in observe mode (a first rollout) it signals
nobody and refuses nothing, what it would have done said; in off mode it does not look.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers.fake_slurm import FakeSlurm
from helpers.fake_slurm import node as slurm_node
from helpers.holders import Holders
from helpers.runners import cli
from helpers.wait import wait_for

from slurm.test_controller import going_down
from suspendguard.config.load import defaults
from suspendguard.slurm.controller import Controller
from suspendguard.store.history import History
from suspendguard.system.log import Logger

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching the mode needs root")


def prepare(conf: Path) -> dict[str, object]:
    code, out, err = cli("--config", str(conf), "slurm", "node", "prepare")
    doc: dict[str, object] = json.loads(out)
    assert code == (0 if doc["verdict"] == "allow" else 1), (code, err)
    return doc


def test_enforced_the_node_drains_its_holder(conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node)
    doc = prepare(conf)
    assert (doc["verdict"], doc["mode"]) == ("allow", "enforce"), doc
    assert proc.wait(timeout=10) == 0 and holders.signals() == [f"{pid} SIGINT"]


@pytest.mark.parametrize(("flags", "outcome"), [(["--suspend"], "not suspended"),
                                                ([], "not powered off")])
def test_a_node_whose_controller_stopped_waiting_does_not_sleep(
        conf: Path, node: str, holders: Holders, tmp_path: Path, no_bus: str,
        flags: list[str], outcome: str) -> None:
    # At [slurm] timeout_s the controller kills its ssh and holds the node as unreachable;
    # sshd closes the session's end and signals nothing, so the guard here goes on. Powered
    # off by the controller ([slurm] power_off), the node is not: it starts its jobs again.
    _, pid = holders.start(node, delay=1.5)
    err = tmp_path / "prepare.err"
    with err.open("w") as stderr:
        guard = subprocess.Popen([sys.executable, "-m", "suspendguard", "--config", str(conf),
                                  "slurm", "node", "prepare", *flags],
                                 stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert guard.stdout is not None
    wait_for(lambda: holders.signals() == [f"{pid} SIGINT"], 30)
    guard.stdout.close()  # nobody reads the answer any more
    guard.wait(timeout=60)
    said = err.read_text()
    assert ("slurm node prepare: the controller stopped waiting for this answer ([slurm] "
            f"timeout_s): {outcome}") in said, said
    assert "logind" not in said, said  # never asked to sleep


def test_in_observe_mode_the_node_signals_nobody_allows_and_says_what_it_would_have_done(
        conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node, mode="deaf")
    assert cli("--config", str(conf), "mode", "observe")[0] == 0
    doc = prepare(conf)
    assert (doc["verdict"], doc["mode"], doc["reasons"]) == ("allow", "observe", []), doc
    observed = doc["observed"]
    assert isinstance(observed, dict) and observed["verdict"] == "veto", doc
    assert any(f"pid {pid}" in r and "ignores SIGINT" in r for r in observed["reasons"]), doc
    assert holders.signals() == [] and proc.poll() is None
    with History.open(str(conf.parent / "state"), readonly=True) as h:
        [look] = h.attempts(5)
    assert (look.id, look.origin, look.dry_run, look.result) == (doc["attempt"], "slurm", True,
                                                                 "veto")


def test_off_the_node_does_not_look(conf: Path, node: str, holders: Holders) -> None:
    proc, _pid = holders.start(node, mode="deaf")
    assert cli("--config", str(conf), "mode", "off")[0] == 0
    doc = prepare(conf)
    assert (doc["verdict"], doc["mode"], "attempt" in doc) == ("allow", "off", False), doc
    assert holders.signals() == [] and proc.poll() is None
    assert not (conf.parent / "state" / "history.db").exists()  # nothing looked at, or kept


def test_the_controller_says_what_an_observing_node_would_have_refused(tmp_path: Path) -> None:
    doc = {"node": "gpu3", "verdict": "allow", "reasons": [], "reason_details": [], "mode": "observe",
           "observed": {"verdict": "veto", "reasons": ["pid 7 python3 ignores SIGINT"]}}
    seen = tmp_path / "powered-off"
    config = replace(defaults().slurm, remote=("/usr/bin/env",),
                     guard=(sys.executable, "-c", f"print({json.dumps(json.dumps(doc))})"),
                     power_off=(sys.executable, "-c", f"open({str(seen)!r}, 'w').write('{{node}}')"),
                     scontrol=str(going_down(tmp_path).path),
                     exclude_file=str(tmp_path / "exclude"))
    err = io.StringIO()
    assert Controller(config, Logger(err, {}), local="ctl")._suspend_one("gpu3")
    assert seen.read_text() == "gpu3"  # observe mode refuses nothing
    assert ("gpu3: observe mode (suspendguard mode): its guard only looked and would have "
            "refused (veto): pid 7 python3 ignores SIGINT") in err.getvalue()


def awake(conf: Path) -> tuple[int, dict[str, Any]]:
    code, out, err = cli("--config", str(conf), "slurm", "node", "awake")
    assert "Traceback" not in err, err
    return code, json.loads(out)


def test_a_node_awake_whose_device_logs_were_not_read_whole_is_unknown(
        conf: Path, tmp_path: Path) -> None:
    """A log the wake's read did not follow may hold the failure of a chip that reset while
    asleep, which npu-smi may not show: the answer is unknown, not allow."""
    slog = tmp_path / "slog"
    slog.mkdir()
    (slog / "device-0.log").write_text("[INFO] TSCH(-1,null):2024-01-01-00:00:00.000.000 up\n")
    (slog / "device-1.log").symlink_to(tmp_path / "elsewhere.log")
    conf.write_text(conf.read_text() + f'[logs]\npaths = ["{slog}/*.log"]\n')
    assert prepare(conf)["verdict"] == "allow"
    code, doc = awake(conf)
    assert (code, doc["verdict"]) == (5, "unknown"), doc
    [why] = doc["reason_details"]
    assert why["code"] == "health-unknown", doc
    assert why["text"] == (f"device logs since the suspend not read whole (device log {slog}/"
                           "device-1.log: symbolic link, not followed): a failure while asleep "
                           "would be missed")
    (slog / "device-1.log").unlink()
    assert awake(conf) == (0, {**doc, "verdict": "allow", "reasons": [],
                               "reason_details": []})


def test_health_drains_for_a_holder_outside_slurm_only_when_enforced(
        conf: Path, node: str, holders: Holders, tmp_path: Path) -> None:
    # The drain keeps the node from a suspend its guard would refuse: observe and off refuse
    # none, so the node stays in use, and the log says why it was not drained.
    fake = FakeSlurm(tmp_path, {"node1": slurm_node()})
    with conf.open("a") as f:
        f.write(f'[slurm]\nnode_name = "node1"\nscontrol = {json.dumps(str(fake.path))}\n')
    holders.start(node, mode="deaf")
    assert cli("--config", str(conf), "mode", "observe")[0] == 0
    code, out, err = cli("--config", str(conf), "slurm", "health")
    assert (code, fake.node("node1")) == (0, slurm_node()), (out, err)
    assert "the guard's mode is observe (suspendguard mode): not drained for pid " in err, err
    # Its one line says what it found, never that the accelerator is free.
    assert out.startswith("node1: leave: accelerator healthy; observe mode (suspendguard mode), "
                          "not acted on: suspendguard: held-outside-slurm: pid "), out
    assert cli("--config", str(conf), "mode", "enforce")[0] == 0
    code, out, err = cli("--config", str(conf), "slurm", "health")
    assert code == 1 and out.startswith("node1: drain: suspendguard: held-outside-slurm: pid "), err
    assert fake.node("node1")["reason"].startswith("suspendguard: held-outside-slurm: pid ")


def test_a_node_asked_as_another_does_nothing_and_answers_for_itself(
        conf: Path, node: str, holders: Holders) -> None:
    # A wrong ssh mapping reaches this host (node7) for node12: its own job is not drained
    # on node12's behalf, and the answer names this host, which the controller refuses.
    conf.write_text(conf.read_text() + '[slurm]\nnode_name = "node7"\n')
    proc, pid = holders.start(node)
    code, out, err = cli("--config", str(conf), "slurm", "node", "prepare", "--as", "node12")
    assert code == 5, (out, err)
    doc = json.loads(out)
    assert (doc["node"], doc["verdict"]) == ("node7", "unknown"), doc
    [why] = doc["reason_details"]
    assert why["code"] == "node-unreachable", doc
    assert why["text"] == ("asked as 'node12' but this is 'node7': slurm node prepare not run; "
                           "fix the controller's [slurm] remote mapping, or set [slurm] node_name "
                           "on this host if its host name is not its NodeName"), why
    assert doc["reasons"] == [why["text"]]
    assert holders.signals() == [] and proc.poll() is None
    assert not (conf.parent / "state" / "history.db").exists()  # not even looked
    # Asked as itself, it drains as before.
    code, out, err = cli("--config", str(conf), "slurm", "node", "prepare", "--as", "node7")
    assert (code, json.loads(out)["verdict"]) == (0, "allow"), (out, err)
    assert proc.wait(timeout=10) == 0 and holders.signals() == [f"{pid} SIGINT"]


@pytest.mark.parametrize("step", [["awake"], ["restart", "--attempt", "1"], ["rejoin", "--boot"]])
def test_every_node_step_asked_as_another_node_is_not_run(conf: Path, step: list[str]) -> None:
    # restart would start this host's stopped jobs, rejoin restart its slurmd.
    conf.write_text(conf.read_text() + '[slurm]\nnode_name = "node7"\n')
    code, out, err = cli("--config", str(conf), "slurm", "node", *step, "--as", "node12")
    assert (code, err) == (5, ""), out
    doc = json.loads(out)
    assert (doc["node"], doc["verdict"]) == ("node7", "unknown"), doc
    assert f"slurm node {step[0]} not run" in doc["reasons"][0], doc

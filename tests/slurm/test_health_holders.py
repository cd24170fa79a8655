"""``slurm health``, and ``slurm node awake`` after a wake: which holders of a node's accelerator
hold it outside Slurm.

Only what a suspend would meet drains the node: what the guard lets a suspend go with (a
``[policy] ignore`` rule, a tool on management nodes only) does not, and neither does a task
of a job, known by its job's cgroup or a root slurmstepd above it. The holders are real
processes; scontrol is the suite's stand-in (fake_slurm).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.cgroups import own_cgroup, set_control
from helpers.fake_slurm import FakeSlurm
from helpers.fake_slurm import node as slurm_node
from helpers.holders import Holders
from helpers.runners import cli
from helpers.wait import wait_for

from suspendguard.system.procfs import ProcFS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the health check runs as root")

# A parent that names itself slurmstepd, as slurmd's step daemon is named, and runs the rest
# (a python script: with its own interpreter, which user nobody can run where it runs).
STEPD = ("import ctypes, subprocess, sys; ctypes.CDLL(None).prctl(15, b'slurmstepd');"
         "sys.exit(subprocess.call([sys.executable, *sys.argv[2:]]))")


def uid_of(pid: int) -> int | None:
    status = ProcFS().status(pid)
    return status.uid if status else None


@pytest.fixture
def fake(tmp_path: Path) -> FakeSlurm:
    return FakeSlurm(tmp_path, {"node1": slurm_node()})


def health(conf: Path, fake: FakeSlurm, extra: str = "") -> tuple[int, str]:
    with conf.open("a") as f:
        f.write(f'{extra}[slurm]\nnode_name = "node1"\nscontrol = {json.dumps(str(fake.path))}\n')
    code, out, err = cli("--config", str(conf), "slurm", "health")
    assert "Traceback" not in err, err
    return code, out


def test_a_holder_the_policy_ignores_drains_nothing(conf: Path, node: str, holders: Holders,
                                                    fake: FakeSlurm) -> None:
    holders.start(node, mode="deaf")
    exe = os.path.realpath(sys.executable)
    code, out = health(conf, fake, f'[[policy.ignore]]\nuid = 0\nexe = "{exe}"\n')
    assert (code, out, fake.node("node1")) == (0, "node1: leave: accelerator free and healthy\n",
                                               slurm_node())


def test_a_tool_on_management_nodes_only_drains_nothing(tmp_path: Path, conf: Path,
                                                        holders: Holders, fake: FakeSlurm) -> None:
    manager = tmp_path / "davinci_manager"
    manager.write_bytes(b"")
    conf.write_text(conf.read_text().replace(
        "[devices]\n", f'[devices]\nmanagement = ["{manager}"]\n'))
    holders.start(str(manager), mode="deaf")
    code, out = health(conf, fake)
    assert (code, fake.node("node1")) == (0, slurm_node()), out


@pytest.fixture
def slice_cgroup() -> Iterator[str]:
    """A slice of the test's own, in which a test makes the cgroups a job runs in."""
    root = ProcFS().unified_root()
    if root is None:
        pytest.skip("no cgroup v2 tree here")
    with own_cgroup(root, "a cgroup", ".slice") as mine:
        try:
            yield mine
        finally:
            for path, _dirs, _files in sorted(os.walk(mine), key=lambda w: -len(w[0])):
                if path == mine:
                    continue
                with open(os.path.join(path, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        set_control(mine, "cgroup.procs", pid)
                os.rmdir(path)


def test_a_task_in_its_job_s_cgroup_drains_nothing(conf: Path, node: str, holders: Holders,
                                                  fake: FakeSlurm, slice_cgroup: str) -> None:
    # As slurmstepd names a job's cgroup: /system.slice/slurmstepd.scope/job_42.
    job = os.path.join(slice_cgroup, "slurmstepd.scope", "job_42")
    os.makedirs(job)
    _, pid = holders.start(node, mode="deaf")
    set_control(job, "cgroup.procs", str(pid))
    code, out = health(conf, fake)
    assert (code, fake.node("node1")) == (0, slurm_node()), out


def test_a_job_s_cgroup_name_in_a_delegated_subtree_is_no_job(
        conf: Path, node: str, holders: Holders, fake: FakeSlurm, slice_cgroup: str) -> None:
    # Any user may make cgroups below their user@UID.service (Delegate=): named as a
    # job's, they are the user's all the same, and the holder in them is outside Slurm.
    job = os.path.join(slice_cgroup, "user@1000.service", "slurmstepd.scope", "job_42")
    os.makedirs(job)
    _, pid = holders.start(node, mode="deaf")
    set_control(job, "cgroup.procs", str(pid))
    code, out = health(conf, fake)
    assert code == 1 and out.startswith(f"node1: drain: suspendguard: held-outside-slurm: pid {pid}"), out


def test_a_task_below_root_s_slurmstepd_drains_nothing(conf: Path, node: str, holders: Holders,
                                                      fake: FakeSlurm) -> None:
    holders.start(node, mode="deaf", argv_prefix=[sys.executable, "-c", STEPD])
    code, out = health(conf, fake)
    assert (code, fake.node("node1")) == (0, slurm_node()), out


def test_a_slurmstepd_that_is_not_root_s_is_no_job(conf: Path, node: str, holders: Holders,
                                                   fake: FakeSlurm) -> None:
    # Any user can name a process slurmstepd: this one starts the job, then runs as nobody.
    as_nobody = STEPD.replace("sys.exit(subprocess.call(", "p = subprocess.Popen(").replace(
        "]))", "]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534); "
        "sys.exit(p.wait())").replace("import ctypes,", "import ctypes, os,")
    job, pid = holders.start(node, mode="deaf", argv_prefix=[sys.executable, "-c", as_nobody])
    wait_for(lambda: uid_of(job.pid) == 65534, 10)
    code, out = health(conf, fake)
    assert code == 1 and out.startswith(f"node1: drain: suspendguard: held-outside-slurm: pid {pid}"), out
    assert fake.node("node1")["reason"].startswith(f"suspendguard: held-outside-slurm: pid {pid}")


def awake(conf: Path) -> tuple[int, dict[str, Any], str]:
    code, out, err = cli("--config", str(conf), "slurm", "node", "awake")
    assert "Traceback" not in err, err
    doc: dict[str, Any] = json.loads(out)
    return code, doc, err


def test_a_node_woken_with_a_holder_outside_slurm_is_refused_when_enforced(
        conf: Path, node: str, holders: Holders) -> None:
    # Awake while Slurm counts it powered down (its veto unit refused the suspend after the
    # guard allowed): the job that wakes it must not start beside that holder.
    _, pid = holders.start(node, mode="deaf")
    code, doc, err = awake(conf)
    assert (code, doc["verdict"]) == (1, "veto"), (doc, err)
    [held] = doc["reason_details"]
    assert held["code"] == "held-outside-slurm" and held["text"].startswith(f"pid {pid} "), doc
    # Observe and off mode refuse nothing: the node rejoins as before.
    for mode in ("observe", "off"):
        assert cli("--config", str(conf), "mode", mode)[0] == 0
        code, doc, err = awake(conf)
        assert (code, doc["verdict"], doc["reasons"]) == (0, "allow", []), (mode, doc, err)


def test_a_task_of_a_job_does_not_refuse_a_woken_node(
        conf: Path, node: str, holders: Holders) -> None:
    # A node that registered by itself may run the job that woke it by the time it answers.
    holders.start(node, mode="deaf", argv_prefix=[sys.executable, "-c", STEPD])
    code, doc, err = awake(conf)
    assert (code, doc["verdict"]) == (0, "allow"), (doc, err)


def test_the_resume_program_drains_a_node_woken_with_a_holder_outside_slurm(
        conf: Path, node: str, holders: Holders, tmp_path: Path) -> None:
    # As for a node woken unhealthy: drained before it rejoins, with the holder named, so
    # the node's own health check lifts the drain once the holder is gone.
    fake = FakeSlurm(tmp_path, {"node1": slurm_node()})
    guard = [sys.executable, "-m", "suspendguard", "--config", str(conf)]
    with conf.open("a") as f:
        f.write(f'[slurm]\nnode_name = "node1"\nscontrol = {json.dumps(str(fake.path))}\n'
                f'remote = ["/usr/bin/env"]\nguard = {json.dumps(guard)}\n'
                f"exclude_file = {json.dumps(str(tmp_path / 'exclude.conf'))}\n")
    _, pid = holders.start(node, mode="deaf")
    code, _, err = cli("--config", str(conf), "slurm", "resume", "node1")
    assert code == 1, err
    reason = fake.node("node1")["reason"]
    assert reason.startswith(f"suspendguard: held-outside-slurm: pid {pid} "), reason
    assert "DRAIN" in fake.node("node1")["flags"]
    assert f"node1: drained after its wake: {reason}" in err, err
    assert (tmp_path / "exclude.conf").read_text().endswith("SuspendExcNodes=node1\n")

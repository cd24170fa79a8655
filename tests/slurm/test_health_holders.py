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
import shutil
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES, FIXTURES
from helpers.cgroups import own_cgroup, set_control
from helpers.fake_slurm import FakeSlurm
from helpers.fake_slurm import node as slurm_node
from helpers.holders import Holders
from helpers.runners import cli
from helpers.slurm_cluster import critical
from helpers.wait import wait_for

from suspendguard.guard.inventory import FAMILY_NODES
from suspendguard.model import ScanResult
from suspendguard.slurm import node as slurm_node_side
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


# The guard's own drains: lifted by health alone, and only once their cause is gone.
UNHEALTHY = "suspendguard: unhealthy-after-resume: device npu 0 unhealthy: npu-smi health Critical"
HELD = "suspendguard: held-outside-slurm: pid 9 python3 (user ana) holds npu0, outside Slurm"


@pytest.fixture
def ascend_here(node: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test node, under an Ascend chip's name, stands for its device node: the family's
    device is on this host (its management nodes alone would not say so)."""
    chip = Path(node).with_name("davinci0")
    os.link(node, chip)
    monkeypatch.setitem(FAMILY_NODES, "ascend", {"compute": (str(chip),)})
    return str(chip)


def test_a_family_found_by_its_management_nodes_alone_is_no_device_left_unasked(
        tmp_path: Path, conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A driver with no device here (its GPUs passed to VMs, a login node's image): nothing
    # to ask, and nothing unknown.
    manager = tmp_path / "davinci_manager"
    if os.geteuid() == 0:
        os.mknod(manager, 0o666 | stat.S_IFCHR, os.makedev(1, 8))  # held by no process here
    else:
        manager.write_bytes(b"")
    monkeypatch.setitem(FAMILY_NODES, "ascend", {"management": (str(manager),)})
    fake = FakeSlurm(tmp_path, {"node1": slurm_node(("DRAIN",), UNHEALTHY)})
    with_ascend(conf, str(tmp_path / "npu-smi"))
    code, out = health(conf, fake)
    assert "no device checked" not in out, out
    assert (code, out) == (0, "node1: resume: accelerator free and healthy\n"), out


def with_ascend(conf: Path, npu_smi: str) -> None:
    """``conf`` with Ascend configured, ``npu_smi`` its npu-smi, and no CANN toolkit."""
    conf.write_text(conf.read_text().replace("families = []", 'families = ["ascend"]').replace(
        "[idle]\n", f'[idle]\nnpu_smi = "{npu_smi}"\n'
        f'ascend_env = "{conf.parent / "set_env.sh"}"\n'))


def test_a_family_here_that_no_tool_answers_for_keeps_the_guards_drain(
        tmp_path: Path, conf: Path, ascend_here: str) -> None:
    # slurmd runs health with no PATH: npu-smi unfound and no pyACL is no answer at all,
    # which must not read as healthy and lift the drain an unhealthy wake made.
    fake = FakeSlurm(tmp_path, {"node1": slurm_node(("DRAIN",), UNHEALTHY)})
    with_ascend(conf, str(tmp_path / "npu-smi"))  # no tool can ask its chips
    code, out = health(conf, fake)
    assert code == 5, out
    assert out.startswith("node1: keep: suspendguard: health-unknown: ascend: no device "
                          "checked, though its device nodes are here (npu-smi not asked: "), out
    assert fake.node("node1") == slurm_node(("DRAIN",), UNHEALTHY)
    assert not [c for c in fake.calls() if c[0] == "update"]


def test_a_failing_scontrol_still_says_what_health_could_not_read(
        tmp_path: Path, conf: Path, ascend_here: str) -> None:
    # scontrol failed, nothing was drained or resumed: the line says so, and what the check
    # found, never "accelerator free and healthy" for a chip no tool answered for.
    fake = FakeSlurm(tmp_path, {"node1": slurm_node()})
    fake.fail("show", "slurm_load_node error: Unable to contact slurm controller")
    with_ascend(conf, str(tmp_path / "npu-smi"))  # no tool can ask its chips
    code, out = health(conf, fake)
    assert code == 3, out
    assert out.startswith("node1: none: suspendguard: health-unknown: ascend: no device "
                          "checked, though its device nodes are here (npu-smi not asked: "), out
    assert out.endswith(f"; nothing done: scontrol show node -o node1: {fake.path}: exit "
                        "status 1: slurm_load_node error: Unable to contact slurm controller\n")
    assert "healthy" not in out, out


def test_health_run_with_no_path_finds_npu_smi_in_the_system_folders(
        tmp_path: Path, conf: Path, ascend_here: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # slurmd gives HealthCheckProgram SLURMD_NODENAME alone; the Ascend driver installs
    # npu-smi in /usr/local/sbin, which a missing PATH (/bin:/usr/bin) never searches.
    from suspendguard.system import runner
    default = runner.DEFAULT_PATH
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    shutil.copy(FAKES / "idle" / "npu-smi", sbin / "npu-smi")
    # This host's /usr/local/sbin is not the test's to fill: a folder of its own stands first.
    monkeypatch.setattr(runner, "DEFAULT_PATH", f"{sbin}:/usr/sbin:/usr/bin:/sbin:/bin")
    monkeypatch.delenv("PATH")
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(FIXTURES / "npu-smi" / "910b2c-hbm-one-process.txt"))
    monkeypatch.setenv("FAKE_NPU_SMI_LOG", str(tmp_path / "npu-smi.log"))
    fake = FakeSlurm(tmp_path, {"node1": slurm_node(("DRAIN",), UNHEALTHY)})
    with_ascend(conf, "npu-smi")
    code, out = health(conf, fake)
    log = tmp_path / "npu-smi.log"
    assert log.exists() and "info" in log.read_text().splitlines(), out
    assert (code, out) == (0, "node1: resume: accelerator free and healthy\n")
    assert fake.node("node1") == slurm_node()
    assert default.split(":")[:2] == ["/usr/local/sbin", "/usr/local/bin"]


def test_an_unhealthy_device_drains_the_node_with_a_code_of_its_own(
        tmp_path: Path, conf: Path, ascend_here: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The health check runs at any time: its drain names no wake ("unhealthy-after-resume" is
    # the check after a wake's), and a code is never reused for another meaning.
    info = tmp_path / "info.txt"
    info.write_text(critical((FIXTURES / "npu-smi" / "910b2c-hbm-one-process.txt").read_text()))
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(info))
    fake = FakeSlurm(tmp_path, {"node1": slurm_node()})
    with_ascend(conf, str(FAKES / "idle" / "npu-smi"))
    code, out = health(conf, fake)
    reason = ("suspendguard: device-unhealthy: device npu 0 unhealthy: npu-smi health Critical "
              "(health check)")
    assert (code, out.startswith(f"node1: drain: {reason}")) == (1, True), out
    assert fake.node("node1")["reason"] == reason


@pytest.mark.parametrize("late", [False, True])
def test_a_process_the_scan_could_not_read_keeps_the_guards_drain(
        tmp_path: Path, conf: Path, monkeypatch: pytest.MonkeyPatch, late: bool) -> None:
    # Any of them may be the holder the drain was made for: health answers unknown, and
    # the scan ends by its share of health's bound (a read of /proc may block behind a
    # process stuck in the driver).
    asked: list[float | None] = []

    def scan(*args: Any, until: float | None = None, **kw: Any) -> ScanResult:
        asked.append(until)
        return ScanResult((), 1, (42,), 10, late=(42,) if late else ())

    monkeypatch.setattr(slurm_node_side, "scan_holders", scan)
    fake = FakeSlurm(tmp_path, {"node1": slurm_node(("DRAIN",), HELD)})
    start = time.monotonic()
    code, out = health(conf, fake)
    assert (code, out) == (5, "node1: keep: suspendguard: uninspected: 1 process(es) could not "
                              "be inspected (pids 42): any of them may hold the accelerator\n")
    assert fake.node("node1") == slurm_node(("DRAIN",), HELD)
    [until] = asked
    assert until is not None and start < until <= time.monotonic() + slurm_node_side.SCAN_BOUND_S


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


def test_a_family_here_that_no_tool_answers_for_is_unknown_after_a_wake(
        tmp_path: Path, conf: Path, ascend_here: str) -> None:
    with_ascend(conf, str(tmp_path / "npu-smi"))  # no tool can ask its chips
    code, doc, err = awake(conf)
    assert (code, doc["verdict"]) == (5, "unknown"), (doc, err)
    [why] = doc["reason_details"]
    assert (why["code"], why["device"]) == ("health-unknown", "ascend"), doc


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


def test_a_chip_that_reset_while_asleep_is_refused_after_the_wake(
        tmp_path: Path, conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # npu-smi reads the chip healthy; the device log since the suspend began says it lost its
    # heartbeat (it reset): the check after the wake counts it, as the check after resume does.
    logs = tmp_path / "logs"
    logs.mkdir()
    with_ascend(conf, str(FAKES / "idle" / "npu-smi"))
    with conf.open("a") as f:
        f.write(f'[logs]\npaths = ["{logs}/**"]\n')
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(FIXTURES / "npu-smi" / "910b2c-hbm-one-process.txt"))
    code, out, err = cli("--config", str(conf), "slurm", "node", "prepare")
    assert (code, json.loads(out)["verdict"]) == (0, "allow"), err  # the controller's question
    code, doc, err = awake(conf)
    assert (code, doc["verdict"]) == (0, "allow"), (doc, err)
    # Stamped within the attempt: a line stamped before it is not the suspend's doing.
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S.000.000", time.localtime(time.time() + 1))
    (logs / "plog-4242_1.log").write_text(
        f"[ERROR] RUNTIME(4242,python3):{stamp} Device[0] lost heartbeat\n")
    code, doc, err = awake(conf)
    assert (code, doc["verdict"]) == (1, "veto"), (doc, err)
    [why] = doc["reason_details"]
    assert (why["code"], why["device"]) == ("unhealthy-after-resume", "ascend"), doc
    assert "the heartbeat-lost finding" in why["text"], why

"""The whole resume path under a real systemd, on a fake GPU: held while unhealthy, repaired, started.

One booted container (tests/helpers/systemd_harness.py). The job is a system
service holding a node of rdev 1:9 (/dev/urandom's number, which nothing
in the container holds); the guard, installed by ``suspendguard install``, drains it
on a real ``systemctl suspend``. Its resume unit checks the "GPU" after the
sleep: a fake libcuda.so.1 (tests/fakes/health/fake_cuda.c) answers cuInit
with 999 until the fake modprobe (tests/fakes/health/modprobe) has reloaded
nvidia_uvm, and a drop-in on the resume unit tells both fakes where to look.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES, REPO
from helpers.clib import build_shared
from helpers.systemd_harness import Container, container_marks, guard_config
from helpers.wait import wait_for

pytestmark = container_marks()

HOLDER = str(REPO / "tests" / "helpers" / "holder.py")
NODE = "/dev/suspendguard-rh/gpu0"
NODE_RDEV = "1 9"  # as test_supervised_container.py: a node nothing else holds
RUN = "/run/suspendguard-rh"
STATE_DIR = "/var/lib/suspendguard-rh"
MODPROBE = FAKES / "health" / "modprobe"
JOB = "rh-job.service"
DROPIN = "/etc/systemd/system/suspendguard-resume.service.d/fake-gpu.conf"


def resume_env(mode: str) -> str:
    return ("[Service]\n"
            f"Environment=FAKE_CUDA_RELOADED={RUN}/uvm-reloaded FAKE_MODPROBE_LOG={RUN}/calls.log "
            f"FAKE_CUDA_LOG={RUN}/calls.log FAKE_CUDA_MODE={mode}\n"
            f"ReadWritePaths={RUN}\n")


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    lib_dir = tmp_path_factory.mktemp("fake-gpu")
    lib = build_shared(FAKES / "health" / "fake_cuda.c", lib_dir, "libcuda.so.1")
    config = guard_config(NODE, state_dir=STATE_DIR, timeout_s=3.0).replace(
        "families = []", 'families = ["nvidia"]')
    config += (f'\n[resume]\ncuda_library = "{lib}"\nmodprobe = "{MODPROBE}"\n'
               "health_timeout_s = 10.0\n")
    with Container(REPO, extra_ro=[str(lib_dir)]) as container:
        container.sh(f"mkdir -p {Path(NODE).parent} {RUN} && mknod -m 666 {NODE} c {NODE_RDEV}")
        container.write("/etc/suspendguard/config.toml", config)
        container.suspendguard("install", "--force")
        yield container


def start_job(box: Container) -> None:
    box.write(f"/etc/systemd/system/{JOB}",
              f"[Service]\nExecStart={sys.executable} {HOLDER} --node {NODE} --mode graceful "
              f"--delay 0.1 --marker {RUN}/signals.log\n")
    box.run("systemctl", "daemon-reload")
    cursor = box.cursor()
    box.run("systemctl", "start", JOB)
    box.wait_journal(cursor, r"\bready\b", args=("-u", JOB, "-o", "cat"))


def set_gpu(box: Container, mode: str) -> None:
    box.write(DROPIN, resume_env(mode))
    box.run("systemctl", "daemon-reload")


def last_attempt(box: Container) -> dict[str, Any]:
    out = json.loads(box.suspendguard("history", "--json", "-n", "3").stdout)["attempts"]
    found: dict[str, Any] = next(a for a in out if a["origin"] == "unit")
    return found


def calls(box: Container) -> list[str]:
    return box.run("cat", f"{RUN}/calls.log", check=False).stdout.split("\n")


def test_drained_service_is_held_while_the_gpu_is_unhealthy_and_started_after_the_repair(
        box: Container) -> None:
    box.reset_power()
    box.sh(f"rm -f {RUN}/uvm-reloaded {RUN}/calls.log")
    set_gpu(box, "broken")  # 999 even after the reload
    start_job(box)
    journal = box.suspend()
    assert box.power_state().startswith("mem"), journal
    # After resume: checked, repaired (the reload ran), checked again, still 999: held.
    box.wait_idle()
    assert not box.unit_active(JOB), journal
    reason = "device nvidia unhealthy: CUDA init error 999 (CUDA_ERROR_UNKNOWN) after reload"
    a = last_attempt(box)
    [stop] = a["stopped"]
    assert (stop["name"], stop["result"], stop["why"]) == (JOB, "held", reason), a
    steps = [(e["phase"], e["note"]) for e in a["events"] if e["phase"] in ("health", "repair")]
    assert [p for p, _ in steps] == ["health", "repair", "repair", "health"], steps
    assert steps[1][1].startswith("nvidia: reloaded nvidia_uvm"), steps
    assert "nvidia-persistenced.service does not run here" in steps[2][1], steps
    assert "modprobe -r nvidia_uvm" in calls(box) and "modprobe nvidia_uvm" in calls(box)
    status = box.suspendguard("status").stdout
    assert status.splitlines()[0] == f"1 jobs held after resume: {reason}", status
    resume_log = box.run("journalctl", "-u", "suspendguard-resume.service", "-o", "cat").stdout
    assert "1 jobs held after resume" in resume_log
    assert box.run("journalctl", "MESSAGE_ID=6f1c1d8e3b1a4f5e9a0d2c7b8e4f1a20", "-o", "cat",
                   "--no-pager").stdout.strip().startswith("1 jobs held after resume")

    # The GPU now recovers with a reload: the resume unit again repairs, then starts the job.
    box.sh(f"rm -f {RUN}/uvm-reloaded {RUN}/calls.log")
    set_gpu(box, "")
    box.run("systemctl", "start", "suspendguard-resume.service", check=False)
    assert box.unit_active(JOB) or box.run("systemctl", "is-active", JOB,
                                            check=False).stdout.strip() == "active"
    a = last_attempt(box)
    [stop] = a["stopped"]
    assert stop["result"] == "started", a
    steps = [(e["phase"], e["note"]) for e in a["events"] if e["phase"] in ("health", "repair")]
    assert [p for p, _ in steps[4:]] == ["health", "repair", "repair", "health"], steps
    assert steps[-1][1] == "nvidia again: gpu 0 healthy", steps
    order = [c for c in calls(box) if c.startswith(("modprobe", "cuInit"))]
    assert order == ["cuInit 0", "modprobe -r nvidia_uvm", "modprobe nvidia_uvm", "cuInit 0"]
    status = box.suspendguard("status").stdout
    assert "jobs held after resume" not in status, status
    box.run("systemctl", "stop", JOB, check=False)


def test_status_leads_with_the_check_and_a_shell_restore_brings_the_held_job_back(
        box: Container) -> None:
    """Held after resume, then ``restore`` from a root shell: status says the check runs and
    who waits for it, then the job comes back: a stop of this boot, whatever sandbox read it."""
    box.reset_power()
    box.sh(f"rm -f {RUN}/uvm-reloaded {RUN}/calls.log {RUN}/restore.out")
    set_gpu(box, "broken")
    start_job(box)
    journal = box.suspend()
    assert box.power_state().startswith("mem"), journal
    box.wait_idle()
    assert not box.unit_active(JOB), journal
    lead = box.suspendguard("status").stdout.splitlines()[0]
    assert lead.startswith("1 jobs held after resume: device nvidia unhealthy"), lead

    # The GPU now recovers with a reload, and the reload waits for the test: meanwhile the
    # shell's restore is checking the device, and status leads with that.
    hold = f"{RUN}/hold-modprobe"
    box.sh(f"rm -f {RUN}/uvm-reloaded && : > {hold}")
    env = (f"FAKE_CUDA_RELOADED={RUN}/uvm-reloaded FAKE_MODPROBE_LOG={RUN}/calls.log "
           f"FAKE_CUDA_LOG={RUN}/calls.log FAKE_CUDA_MODE= FAKE_MODPROBE_HOLD={hold}")
    box.sh(f"(env {env} {sys.executable} -m suspendguard restore > {RUN}/restore.out 2>&1; "
           f"echo $? >> {RUN}/restore.out) < /dev/null > /dev/null 2>&1 &")
    status = ""

    def checking() -> bool:
        nonlocal status
        status = box.suspendguard("status").stdout
        return status.startswith("checking the devices after resume since ")

    assert wait_for(checking, 20.0, interval=0.2), status
    lines = status.splitlines()
    assert f"1 job waits for it: {JOB}" in lines[0], lines[0]
    assert status.split("\n\n")[1].startswith("1 jobs held after resume: "), status
    assert any(line.strip().startswith(f"systemd-service:{JOB}")
               and line.endswith("; waiting for the check after resume") for line in lines), status

    box.run("rm", "-f", hold)
    assert wait_for(lambda: box.run("tail", "-n", "1", f"{RUN}/restore.out",
                                    check=False).stdout.strip() == "0", 60.0, interval=0.2), \
        box.run("cat", f"{RUN}/restore.out", check=False).stdout
    assert box.unit_active(JOB)
    [stop] = [s for s in last_attempt(box)["stopped"] if s["name"] == JOB]
    assert stop["result"] == "started", stop  # not "left": the same boot, inside and out
    status = box.suspendguard("status").stdout
    assert not status.startswith(("checking", "1 jobs held")), status
    box.run("systemctl", "stop", JOB, check=False)

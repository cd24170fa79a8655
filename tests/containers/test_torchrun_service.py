"""A torchrun job run as a systemd service, drained by a real suspend and started again after it.

The service has systemd's default ``KillMode=control-group``: a stop job
would send its kill signal to every process of the cgroup at once, the
elastic agent and its ranks alike (measured: the checkpoint was lost). The
guard keeps the unit down with its drop-in and signals torchrun's agent
alone, which forwards SIGINT once to each rank (tests/helpers/torch_job.py,
2 ranks, 2 forked DataLoader workers each, rank 0 saving on SIGINT). After
resume the unit runs again.
"""

from __future__ import annotations

import json

import pytest
from helpers import REPO
from helpers.frameworks import need
from helpers.systemd_harness import Boot, Container, container_marks, guard_config
from helpers.wait import wait_for

pytestmark = container_marks()

JOB = str(REPO / "tests" / "helpers" / "torch_job.py")
NODE = "/dev/suspendguard-tr/accel0"
NODE_RDEV = "1 9"  # /dev/urandom's number, which nothing in the booted container holds
OUT = "/run/suspendguard-tr"
STATE_DIR = "/var/lib/suspendguard-tr"
UNIT = "tr-train.service"


@pytest.fixture(scope="module")
def box(boot: Boot) -> Container:
    need("torch")
    # torch loads libblas.so.3 through Debian's alternatives links.
    container = boot(NODE, NODE_RDEV, f"{OUT}/job", extra_ro=["/etc/alternatives"],
                     config=guard_config(NODE, state_dir=STATE_DIR, timeout_s=25.0, deadline_s=60.0))
    host = container.run("hostname").stdout.strip()
    container.write("/etc/hosts", f"127.0.0.1 localhost {host}\n")
    # getaddrinfo's AI_ADDRCONFIG answers nothing while only loopback has an
    # address: give the private network a documentation-range one (nothing is sent).
    container.sh("ip tuntap add dev sg0 mode tun && ip addr add 192.0.2.1/32 dev sg0 && "
                 "ip link set sg0 up")
    return container


def ranks_ready(box: Container, timeout: float = 90.0) -> list[int]:
    def ranks() -> list[int]:
        got = box.sh(f"cat {OUT}/job/ready-0 {OUT}/job/ready-1 2>/dev/null", check=False).stdout
        return [int(got.split()[0]), int(got.split()[2])] if len(got.split()) == 4 else []

    return wait_for(ranks, timeout, interval=0.2, message=lambda: box.run(
        "journalctl", "-u", UNIT, "--no-pager", check=False).stdout)


def test_a_torchrun_service_saves_its_checkpoint_and_comes_back(box: Container) -> None:
    box.write(f"/etc/systemd/system/{UNIT}", (
        "[Service]\nRestart=always\nEnvironment=OMP_NUM_THREADS=1\n"
        "ExecStart=/usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 --nnodes 1 "
        "--nproc_per_node 2 --master_addr 127.0.0.1 --master_port 29533 "
        f"{JOB} --node {NODE} --out {OUT}/job --save-s 3\n"))
    box.run("systemctl", "daemon-reload")
    box.run("systemctl", "start", UNIT)
    ranks = ranks_ready(box)
    agent = int(box.run("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout)
    box.sh(f"rm -f {OUT}/job/ready-*")
    journal = box.suspend()
    assert box.power_state().startswith("mem"), journal
    signals = box.sh(f"cat {OUT}/job/signals.log", check=False).stdout.splitlines()
    got = sorted(int(line.split()[1]) for line in signals if line.startswith("sigint"))
    assert got == sorted(ranks), (signals, journal)  # one each, none for the workers
    assert box.run("test", "-f", f"{OUT}/job/ckpt.pt", check=False).returncode == 0, \
        (signals, journal)
    assert box.run("test", "-e", f"{OUT}/job/ckpt.tmp", check=False).returncode != 0
    attempt = json.loads(box.suspendguard("history", "--json", "-n", "1").stdout)["attempts"][0]
    assert attempt["verdict"] == "allow", attempt
    # Back after resume: a new agent with new ranks.
    again = ranks_ready(box)
    assert not set(again) & set(ranks)
    assert int(box.run("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout) != agent
    box.run("systemctl", "stop", UNIT, check=False)

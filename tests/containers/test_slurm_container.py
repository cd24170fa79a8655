"""Slurm's power saving asks each node's guard first: a real Slurm 22.05 cluster, booted.

One cluster for the module (tests/helpers/slurm_cluster.py): a controller
``ctl`` and two compute nodes, each a booted systemd container with a fake
/sys/power, the guard installed on each node, ``suspendguard slurm
suspend|resume`` as SuspendProgram and ResumeProgram (as SlurmUser, through
ssh to root on the nodes), ``slurm health`` as HealthCheckProgram and
``slurm sync`` on the controller every 3 s. A node that suspends itself
writes "mem" into its fake /sys/power/state; its "wake" is nothing (the
fake sleep returns at once), and ``slurm resume`` then makes its slurmd
register again.

The tests run in order, each from where the last left the cluster:

1. node1's device is held by a job outside Slurm that ignores SIGINT
   (its health check off, so that the hold comes from SuspendProgram
   alone): node1 is not powered down, drained ``suspendguard:
   sigint-ignored``, and not asked again; node2, free, sleeps.
2. The job ends: node1's health check resumes it, sync takes it out of
   SuspendExcNodes, and Slurm suspends it.
3. A job for node1 wakes it and runs.
4. node2's npu-smi says Critical while it sleeps: the job that wakes it
   does not run there, and node2 is drained ``unhealthy-after-resume``.
5. ``slurm health`` drains an awake node whose device is held outside
   Slurm, resumes it once free, and leaves a drain of anyone else's alone.
6. node2's sshd stops: the controller cannot ask node2's guard, so node2 is
   not powered down and is held ``suspendguard: node-unreachable``; once
   sshd is back, node2's health check resumes it and Slurm suspends it.
7. No run of the guard's programs crashed.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest
from helpers import REPO
from helpers.slurm_cluster import GUARD_LOG, MARKER, NODE, REMOTE, SLURM_UID, SlurmCluster, restart
from helpers.systemd_harness import container_marks

pytestmark = container_marks()

SUSPEND_TIME = 5
SUSPEND_TIMEOUT = 15
RESUME_TIMEOUT = 60
HEALTH_INTERVAL = 5
SYNC_INTERVAL = 3
HOLDER = "sg-test-deaf.service"
AS_SLURM = ("setpriv", f"--reuid={SLURM_UID}", f"--regid={SLURM_UID}", "--clear-groups")
TIMES: dict[str, float] = {}  # what each step took, printed at the module's end (-s)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    missing = [t for t in ("slurmctld-wlm", "slurmd-wlm", "munged", "sshd")
               if shutil.which(t, path="/usr/sbin:/usr/bin") is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (packages slurmctld slurmd "
                    "slurm-client munge openssh-server)")
    began = time.monotonic()
    with SlurmCluster(REPO, suspend_time=SUSPEND_TIME, suspend_timeout=SUSPEND_TIMEOUT,
                      resume_timeout=RESUME_TIMEOUT, health_interval=HEALTH_INTERVAL) as c:
        TIMES["boot"] = c.boot_s
        # Step 1's job holds node1's device before node1 first registers, and node1's
        # health check stays off until step 1 has seen SuspendProgram's hold.
        c.set_health("node1", on=False)
        c.node("node1").start_holder("deaf", "deaf", node=NODE, marker=MARKER)
        c.start_sync(SYNC_INTERVAL)
        c.start_daemons()
        c.wait_registered(want=lambda state: "IDLE" in state)
        TIMES["up"] = time.monotonic() - began
        yield c
        TIMES["module"] = time.monotonic() - began
        print("\nslurm cluster timings (s): "
              + ", ".join(f"{k} {v:.1f}" for k, v in TIMES.items()))


def powered(c: SlurmCluster, name: str) -> str:
    """The first word of node ``name``'s fake /sys/power/state: "mem" once it slept ("" while
    systemd-sleep writes it)."""
    return (c.node(name).power_state().split() or [""])[0]


def undrain(c: SlurmCluster, name: str) -> None:
    """A drain an earlier step's failure left on node ``name`` lifted (said with -s), so that
    a step proves what it checks by itself."""
    state = c.node_state(name)
    if "DRAIN" in state:
        print(f"\n{name} was left {state} ({c.sinfo_reasons().get(name)!r}): resumed first")
        c.ctl.run("scontrol", "update", f"nodename={name}", "state=resume")


def awake(c: SlurmCluster, name: str) -> None:
    """Node ``name`` woken if Slurm powered it down, and waited for until it is IDLE."""
    if "POWER" in c.node_state(name):
        c.wait(lambda: "POWERING" not in c.node_state(name), SUSPEND_TIMEOUT + 10,
               f"{name} done powering down or up")
        if "POWERED_DOWN" in c.node_state(name):
            c.ctl.run("scontrol", "update", f"nodename={name}", "state=power_up")
    c.wait(lambda: c.node_state(name) == "IDLE", RESUME_TIMEOUT, f"{name} awake and IDLE")


def reasons_set(c: SlurmCluster, name: str) -> list[str]:
    """slurmctld's log lines that set node ``name``'s reason."""
    log = c.ctl.run("cat", "/var/log/slurm/slurmctld.log", check=False).stdout
    return [line for line in log.splitlines() if f"node {name} reason set to" in line]


def test_the_controller_reaches_each_node_as_slurm_user(cluster: SlurmCluster) -> None:
    """SlurmUser runs the SuspendProgram: its remote (ssh, no home) reaches root on each node,
    and it can run the checkout's interpreter."""
    for name in ("node1", "node2"):
        remote = [a.replace("{node}", name) for a in REMOTE]
        got = cluster.ctl.run(*AS_SLURM, *remote, "hostname", check=False)
        assert got.returncode == 0 and got.stdout.strip() == name, got
    got = cluster.ctl.run(*AS_SLURM, cluster.python, "-m", "suspendguard", "--help", check=False)
    assert got.returncode == 0, got


def test_1_a_node_held_outside_slurm_is_not_powered_down_and_not_asked_again(
        cluster: SlurmCluster) -> None:
    c = cluster
    began = time.monotonic()
    try:
        c.wait(lambda: c.sinfo_reasons().get("node1", "").startswith(
            "suspendguard: sigint-ignored"), SUSPEND_TIME + 40,
            "node1 drained with suspendguard: sigint-ignored")
        TIMES["1: held node drained"] = time.monotonic() - began
        c.wait(lambda: powered(c, "node2") == "mem", SUSPEND_TIME + 40, "node2 slept")
        TIMES["1: free node slept"] = time.monotonic() - began
        assert len(c.calls("suspend", "node1")) == 1, c.account()
    finally:
        # Over the next three SuspendTimes Slurm does not choose node1 again, even with its
        # health check on (which keeps the guard's drain: the job still holds the device).
        c.set_health("node1", on=True)
    time.sleep(3 * SUSPEND_TIME + 2)
    account = c.account()
    assert len(c.calls("suspend", "node1")) == 1, account
    assert powered(c, "node1") != "mem", account
    assert c.node("node1").unit_active(HOLDER), account
    assert c.sinfo_reasons().get("node1", "").startswith("suspendguard: sigint-ignored"), account
    state = c.node_state("node1")
    assert "DRAIN" in state and "POWER" not in state, (state, account)
    assert "node1" in c.exclude_text(), (c.exclude_text(), account)
    assert "POWERED_DOWN" in c.node_state("node2"), account


def test_2_once_the_job_outside_slurm_ends_the_node_is_suspended(cluster: SlurmCluster) -> None:
    c = cluster
    node1 = c.node("node1")
    node1.run("systemctl", "stop", HOLDER)
    ended = time.monotonic()
    c.wait(lambda: powered(c, "node1") == "mem",
           HEALTH_INTERVAL + SYNC_INTERVAL + SUSPEND_TIME + 40, "node1 slept after the job ended")
    TIMES["2: free again -> slept"] = time.monotonic() - ended
    account = c.account()
    assert "node1" not in c.sinfo_reasons(), account
    assert "node1" not in c.exclude_text(), (c.exclude_text(), account)
    assert len(c.calls("suspend", "node1")) == 2, account
    c.wait(lambda: "POWERED_DOWN" in c.node_state("node1"), SUSPEND_TIMEOUT + 10,
           "node1 POWERED_DOWN")


def test_3_a_job_wakes_the_node_and_runs(cluster: SlurmCluster) -> None:
    c = cluster
    node1 = c.node("node1")
    undrain(c, "node1")  # this step checks the wake by itself, whatever step 2 left
    node1.run("rm", "-f", "/tmp/ran")
    node1.reset_power()
    began = time.monotonic()
    job = c.submit("-w", "node1", "--wrap", "echo ran > /tmp/ran")
    c.wait(lambda: c.job_state(job) == "COMPLETED", RESUME_TIMEOUT,
           f"job {job} on node1 COMPLETED")
    TIMES["3: submit -> completed"] = time.monotonic() - began
    account = c.job(job) + c.account()
    assert node1.run("cat", "/tmp/ran", check=False).stdout == "ran\n", account
    assert c.calls("resume", "node1"), account
    assert powered(c, "node1") != "mem", account  # woken by Slurm, not put back to sleep yet


def test_4_a_node_unhealthy_after_its_wake_is_drained_and_the_job_does_not_run_there(
        cluster: SlurmCluster) -> None:
    c = cluster
    node2 = c.node("node2")
    assert "POWERED_DOWN" in c.node_state("node2"), c.account()
    node2.run("rm", "-f", "/tmp/ran")
    c.set_npu_health("node2", healthy=False)
    began = time.monotonic()
    job = c.submit("-w", "node2", "--wrap", "echo ran > /tmp/ran")
    try:
        c.wait(lambda: c.sinfo_reasons().get("node2", "").startswith(
            "suspendguard: unhealthy-after-resume"), RESUME_TIMEOUT + 20,
            "node2 drained with suspendguard: unhealthy-after-resume")
        TIMES["4: submit -> drained unhealthy"] = time.monotonic() - began
        time.sleep(HEALTH_INTERVAL)
        account = c.job(job) + c.account()
        assert c.job_state(job) in ("PENDING", "REQUEUED", "REQUEUE_HOLD"), account
        assert node2.run("test", "-e", "/tmp/ran", check=False).returncode != 0, account
        assert "DRAIN" in c.node_state("node2"), account
        assert c.calls("resume", "node2"), account
        print("\nnode2's reasons:\n" + "\n".join(reasons_set(c, "node2")))
    finally:
        c.ctl.run("scancel", str(job), check=False)
        c.set_npu_health("node2", healthy=True)


def test_5_health_drains_a_held_awake_node_resumes_it_and_leaves_a_foreign_drain_alone(
        cluster: SlurmCluster) -> None:
    c = cluster
    node1 = c.node("node1")
    undrain(c, "node1")
    # node1 out of power saving for this test ([slurm] exclude), and awake.
    c.set_ctl_slurm('exclude = ["node1"]\n')
    c.wait(lambda: "node1" in c.exclude_text(), SYNC_INTERVAL + 10, "node1 in SuspendExcNodes")
    awake(c, "node1")
    try:
        node1.start_holder("held", "graceful", node=NODE, marker=MARKER)
        began = time.monotonic()
        c.wait(lambda: c.sinfo_reasons().get("node1", "").startswith("suspendguard:"),
               2 * HEALTH_INTERVAL + 10, "node1 drained by its health check")
        TIMES["5: held -> drained"] = time.monotonic() - began
        reason = c.sinfo_reasons()["node1"]
        assert reason.startswith("suspendguard: held-outside-slurm"), (reason, c.account())
        node1.run("systemctl", "stop", "sg-test-held.service")
        began = time.monotonic()
        c.wait(lambda: "node1" not in c.sinfo_reasons() and c.node_state("node1") == "IDLE",
               2 * HEALTH_INTERVAL + 10, "node1 resumed by its health check")
        TIMES["5: free -> resumed"] = time.monotonic() - began

        # Someone else's drain: the device is free, and health leaves it as it is.
        c.ctl.run("scontrol", "update", "nodename=node1", "state=drain", "reason=maintenance")
        time.sleep(3 * HEALTH_INTERVAL)
        account = c.account()
        assert c.sinfo_reasons().get("node1") == "maintenance", account
        assert "DRAIN" in c.node_state("node1"), account
        # Held again under that drain: health finds the problem, and still leaves the
        # drain and its reason to their owner.
        node1.start_holder("held-again", "graceful", node=NODE, marker=MARKER)
        time.sleep(2 * HEALTH_INTERVAL)
        account = c.account()
        assert c.sinfo_reasons().get("node1") == "maintenance", account
        assert "DRAIN" in c.node_state("node1"), account
    finally:
        node1.stop_jobs()
        c.ctl.run("scontrol", "update", "nodename=node1", "state=resume", check=False)
        c.set_ctl_slurm("")


def test_6_a_node_whose_guard_does_not_answer_is_not_powered_down(cluster: SlurmCluster) -> None:
    c = cluster
    node2 = c.node("node2")
    undrain(c, "node2")
    awake(c, "node2")
    node2.reset_power()
    asked = len(c.calls("suspend", "node2"))
    node2.run("systemctl", "stop", "ssh.service")
    try:
        began = time.monotonic()
        c.wait(lambda: any("suspendguard: node-unreachable" in line for line in reasons_set(c, "node2")),
               SUSPEND_TIME + 40, "node2 held with suspendguard: node-unreachable")
        TIMES["6: unreachable -> held"] = time.monotonic() - began
        # While its guard stays out of reach, node2 is never powered down, however often
        # its health check lifts the drain and Slurm chooses it again.
        time.sleep(2 * SUSPEND_TIME + HEALTH_INTERVAL)
        account = c.account()
        assert len(c.calls("suspend", "node2")) > asked, account
        assert powered(c, "node2") != "mem", account
        assert "POWERED_DOWN" not in c.node_state("node2") or "DRAIN" in c.node_state("node2"), account
    finally:
        restart(node2, "ssh.service")
    began = time.monotonic()
    c.wait(lambda: powered(c, "node2") == "mem",
           2 * (HEALTH_INTERVAL + SYNC_INTERVAL + SUSPEND_TIME) + 40,
           "node2 slept once its guard answered again")
    TIMES["6: reachable -> slept"] = time.monotonic() - began
    account = c.account()
    assert "node2" not in c.sinfo_reasons(), account
    assert "node2" not in c.exclude_text(), (c.exclude_text(), account)


def test_7_no_guard_program_crashed(cluster: SlurmCluster) -> None:
    """Every run of the guard's Slurm programs above, on every machine, ended without a
    traceback (their output: /var/log/slurm/suspendguard.log; the journal)."""
    for name, box in cluster.boxes.items():
        log = box.run("cat", GUARD_LOG, check=False).stdout
        journal = box.run("journalctl", "--no-pager", "-o", "cat", check=False).stdout
        for where, text in (("log", log), ("journal", journal)):
            assert "Traceback" not in text, f"{name} {where}:\n{text[-6000:]}"

"""Slurm's power saving asks each node's guard first: a real Slurm 22.05 cluster, booted.

One cluster for the module (tests/helpers/slurm_cluster.py): a controller and
two compute nodes, each a booted systemd container.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from helpers import REPO
from helpers.slurm_cluster import REMOTE, SlurmCluster
from helpers.systemd_harness import container_marks, unavailable_reason

pytestmark = container_marks()


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    if unavailable_reason() is None and not all(
            __import__("shutil").which(t) for t in ("slurmctld-wlm", "slurmd-wlm", "munged")):
        pytest.skip("Slurm (slurmctld slurmd slurm-client) and munge are not installed")
    began = time.monotonic()
    with SlurmCluster(REPO, suspend_time=600) as c:
        c.start_daemons()
        c.wait_registered()
        print(f"cluster up in {time.monotonic() - began:.1f} s (boot {c.boot_s:.1f} s)")
        yield c


def test_a_job_runs_on_a_node(cluster: SlurmCluster) -> None:
    got = cluster.ctl.run("srun", "-w", "node1", "hostname", check=False, timeout=60)
    assert got.stdout.strip() == "node1", (got, cluster.account())


def test_the_controller_reaches_each_node_as_slurm_user(cluster: SlurmCluster) -> None:
    """SlurmUser runs the SuspendProgram: its remote (ssh, no home) reaches root on each node,
    and it can run the checkout's interpreter."""
    as_slurm = ("setpriv", "--reuid=64030", "--regid=64030", "--clear-groups")
    for name in ("node1", "node2"):
        remote = [a.replace("{node}", name) for a in REMOTE]
        got = cluster.ctl.run(*as_slurm, *remote, "hostname", check=False)
        assert got.returncode == 0 and got.stdout.strip() == name, got
    got = cluster.ctl.run(*as_slurm, cluster.python, "-m", "suspendguard", "--help", check=False)
    assert got.returncode == 0, got

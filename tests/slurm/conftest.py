"""The Slurm tests' shared fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from suspendguard.slurm.scontrol import Scontrol


@pytest.fixture
def real_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Scontrol:
    """Debian's scontrol, reading a configuration of the test's own (show hostnames asks no
    slurmctld)."""
    path = shutil.which("scontrol")
    if path is None:
        pytest.skip("scontrol is not installed")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=n[1-2] CPUs=1\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return Scontrol(path)

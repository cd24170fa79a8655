"""``slurm node rejoin --boot`` where its one-start drop-in cannot be written (not run as root):
one answer naming the drop-in, slurmd not restarted, no traceback.

The command runs for real as user nobody (or as the suite's own user, when that is not
root); systemctl is a stand-in on PATH that answers ``show`` as systemd does and notes
every call: nothing here may restart this host's slurmd.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO
from helpers.users import nobody_prefix, python_for_nobody

DROPIN = "/run/systemd/system/slurmd.service.d/suspendguard-boot.conf"
SHOW = "{ path=/usr/sbin/slurmd ; argv[]=/usr/sbin/slurmd -D -s ; ignore_errors=no ; }"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder user nobody may enter (pytest's tmp_path is root's, mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="suspendguard-rejoin-"))
    try:
        folder.chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_nobody(argv: list[str], path: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SUSPENDGUARD_CONFIG"}
    env["PATH"] = path
    prefix: list[str] = []
    python: str | None = sys.executable
    if os.geteuid() == 0:
        prefix = nobody_prefix() or []
        if not prefix:
            pytest.skip("root, and neither setpriv nor runuser to drop to nobody")
        dirs = [p for p in sys.path if p and os.path.isdir(p)]
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *dirs])
        python = python_for_nobody(prefix, env)
        if python is None:
            pytest.skip("no python interpreter that user nobody can run imports suspendguard")
    assert python is not None
    return subprocess.run([*prefix, python, "-m", "suspendguard", *argv], capture_output=True,
                          text=True, timeout=60, env=env, cwd="/", check=False)


def test_rejoin_with_b_whose_drop_in_cannot_be_written_is_one_answer(shared: Path) -> None:
    if os.access("/run/systemd/system", os.W_OK) and os.geteuid() != 0:
        pytest.skip("this user may write /run/systemd/system")
    calls = shared / "calls"
    calls.write_text("")
    calls.chmod(0o666)
    systemctl = shared / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                         f'[ "$1" = show ] && echo "{SHOW}"\nexit 0\n')
    systemctl.chmod(0o755)
    conf = shared / "config.toml"
    conf.write_text(f'[state]\ndir = "{shared / "state"}"\n[slurm]\nnode_name = "node1"\n')
    conf.chmod(0o644)
    done = as_nobody(["--config", str(conf), "slurm", "node", "rejoin", "--boot"],
                     f"{shared}:/usr/bin:/bin")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, (done.stdout, done.stderr)  # a veto: slurmd not restarted
    doc = json.loads(done.stdout)
    assert done.stdout.count("\n") == 1 and doc["verdict"] == "veto", doc
    [why] = doc["reason_details"]
    assert why["code"] == "power-action-failed", why
    assert why["text"].startswith(f"{DROPIN}: not written ("), why
    assert why["text"].endswith("): slurmd.service not restarted"), why
    assert calls.read_text() == "show -p ExecStart --value slurmd.service\n"

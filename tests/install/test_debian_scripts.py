"""The Debian package's maintainer scripts, run as dpkg runs them, on folders of the test's own.

Each run is in a mount namespace of its own where the test's folders are bound over /etc
and /var/lib: what the script removes is the test's (the purge branch runs no systemctl).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO

POSTRM = REPO / "debian" / "suspendguard.postrm"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="binding folders over /etc and /var/lib needs root")


def postrm(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binds = {"etc": "/etc", "var_lib": "/var/lib"}
    mounts = " && ".join(f"mount --bind {tmp_path / ours} {theirs}"
                         for ours, theirs in binds.items())
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f'{mounts} && exec sh "$0" "$@"', str(POSTRM), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """The package's history, its empty config folder and an empty unit folder."""
    (tmp_path / "etc" / "systemd" / "system").mkdir(parents=True)
    (tmp_path / "etc" / "suspendguard").mkdir()
    (tmp_path / "var_lib" / "suspendguard").mkdir(parents=True)
    (tmp_path / "var_lib" / "suspendguard" / "history.db").write_text("")
    return tmp_path


def test_purge_removes_the_history(host: Path) -> None:
    done = postrm(host, "purge")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert not (host / "var_lib" / "suspendguard").exists()
    assert not (host / "etc" / "suspendguard").exists()  # empty: dpkg took the conffile


def test_purge_keeps_the_record_of_an_install_of_the_guard_s_own(host: Path) -> None:
    """The package removed, `suspendguard install` from a venv, then the package purged:
    that install's manifest and history are in the same folder."""
    (host / "var_lib" / "suspendguard" / "installed.json").write_text("{}")
    (host / "etc" / "systemd" / "system" / "suspendguard@.service").write_text("[Service]\n")
    done = postrm(host, "purge")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (host / "var_lib" / "suspendguard").iterdir()) == [
        "history.db", "installed.json"]
    assert done.stderr.startswith("suspendguard: an install of the guard's own is in "
                                  "/etc/systemd/system: /var/lib/suspendguard kept; run its "
                                  "'suspendguard install' again"), done.stderr

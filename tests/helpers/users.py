"""Running a command as another user (nobody), for the non-root paths."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.holders import Holders


def nobody_prefix() -> list[str] | None:
    if os.geteuid() != 0:
        return None
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    return None


def python_for_nobody(prefix: list[str], env: dict[str, str]) -> str | None:
    """An interpreter user nobody can run that imports this checkout.

    The test's own interpreter may live under /root (pyenv): then the system
    python3 of the same version, with this interpreter's import path, stands in.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, shutil.which(version), f"/usr/bin/{version}"):
        if not python:
            continue
        probe = subprocess.run([*prefix, python, "-c", "import suspendguard.cli"],
                               env=env, capture_output=True, text=True, cwd="/", timeout=60)
        if probe.returncode == 0:
            return python
    return None


@contextmanager
def shared_with_nobody(node: str, holders: Holders, prefix: str) -> Iterator[tuple[Path, Path, int]]:
    """A node anyone may open, held by a root job, and a config anyone may read, in a folder
    user nobody can enter (pytest's tmp_path is root's, mode 0700): (folder, config, pid)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        folder.chmod(0o755)
        shared_node = folder / "npu0"
        os.mknod(shared_node, 0o666 | 0o020000, os.stat(node).st_rdev)
        shared_node.chmod(0o666)
        _, pid = holders.start(str(shared_node))
        conf = folder / "config.toml"
        conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{shared_node}"]\n'
                        f'[state]\ndir = "{folder / "state"}"\n[idle]\nbackends = []\n')
        conf.chmod(0o644)
        yield folder, conf, pid
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def unknown_uid() -> int:
    """A uid no account of this host has."""
    def known(uid: int) -> bool:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return False
        return True

    return next(u for u in range(60000, 65000) if not known(u))

"""Running a command as another user (nobody), for the non-root paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


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

"""What the fault tests share: running the CLI in-process, a folder user nobody can reach."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from helpers.holders import Holders

from suspendguard.cli import main


def cli(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one in-process run."""
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err, environ=environ or {"PATH": os.defpath})
    return status, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def open_dir(mode: int = 0o755) -> Iterator[Path]:
    """A root-owned folder under /tmp that others can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="suspendguard-fault-", dir="/tmp"))
    path.chmod(mode)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def one_line(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err


def guard_mid_drain(tmp_path: Path, node: str, holders: Holders, *argv: str
                    ) -> tuple[subprocess.Popen[str], int, Path]:
    """A real ``drain --yes`` (plus ``argv``) that has just sent SIGINT to a slow job.

    Returns the guard's process, the job's pid and the state folder; the
    caller ends the guard.
    """
    state = tmp_path / "state"
    conf = tmp_path / "guard.toml"
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\ndir = "{state}"\n'
                    '[idle]\nbackends = []\n[drain]\ntimeout_s = 20\n')
    _slow, pid = holders.start(node, mode="slow")
    guard = subprocess.Popen([sys.executable, "-m", "suspendguard", "--config", str(conf),
                              "drain", "--yes", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    for _ in range(500):
        if holders.signals():
            break
        time.sleep(0.02)
    return guard, pid, state

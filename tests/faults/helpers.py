"""What the fault tests share: running the CLI in-process, a folder user nobody can reach."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

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

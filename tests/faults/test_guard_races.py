"""Issue 15 items 2, 3, 4: races around who holds the node, and who may signal it."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import needs_root

from suspendguard.cli import main
from suspendguard.guard.pipeline import run
from suspendguard.system.log import Logger

HERE = Path(__file__).resolve().parent


def scene(script: str, *args: str) -> dict[str, object]:
    """Run a scene as PID 1 of a PID namespace (and /proc) of its own; its JSON line."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
         sys.executable, str(HERE / script), *args],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def cli(*argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one in-process run."""
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err, environ={"PATH": os.defpath})
    return status, out.getvalue(), err.getvalue()


# -- item 3: a recycled PID never gets the signal ------------------------------

@needs_root
def test_a_pid_taken_over_mid_scan_is_not_signalled(node: str, tmp_path: Path) -> None:
    result = scene("scene_pid_reuse.py", node, str(tmp_path / "marks"))
    assert result["marks"] == [], result
    assert result["holders"] == [], result  # the holder was gone; the innocent holds nothing
    assert result["verdict"] == "allow"


# -- item 2: holders whose fds only a thread's own table shows -----------------

@pytest.fixture(scope="module")
def threads_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed (tools/test installs it)")
    out = tmp_path_factory.mktemp("bin") / "threads"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(out), str(HERE / "threads.c")],
                   check=True)
    return str(out)


@pytest.mark.parametrize("how", ["leader-exit", "unshare-files"])
def test_a_node_held_by_a_thread_only_is_found_and_drained(
        how: str, threads_bin: str, node: str, make_config: Any) -> None:
    job = subprocess.Popen([threads_bin, node, how], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        assert job.stdout.readline().split() == ["ready", str(job.pid)]
        report = run(make_config(), dry_run=False, action="suspend", origin="test",
                     idle_check=None, log=Logger(io.StringIO(), {}), record=False)
        found = {h.decision.holder.pid: h.outcome.kind for h in report.holders}
        assert found == {job.pid: "exited"}, report.verdict
        assert report.verdict.kind == "allow"
        assert job.wait(timeout=5) == 0
    finally:
        job.kill()
        job.wait()


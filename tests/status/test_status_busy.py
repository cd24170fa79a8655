"""``status`` while the guard works: the check after resume, and a drain, lead the report."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.records import ended

from suspendguard.cli import main
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.store import progress
from suspendguard.store.history import History


def status(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["status", *argv], out=out, err=err, environ={})
    return code, out.getvalue()


@pytest.fixture
def stopped(conf: Path) -> Path:
    """A history with one job the guard stopped and has not started again."""
    state = conf.parent / "state"
    with History.open(str(state)) as h:
        attempt = h.begin("suspend", "unit", False, "digest", time.time() - 60)
        h.finish(ended(attempt, "allow", finished=time.time() - 58, stops=[
            Stop(Owner("systemd-service", "train.service"), 0, time.time() - 59)]))
    return state


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this test's own that stands for the resume unit's check."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def write_check(state: Path, proc: subprocess.Popen[bytes], start_time: int | None = None) -> None:
    """The file the check writes, as another process (``proc``) wrote it."""
    stat = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    doc = {"what": "nvidia (the CUDA probe, NVML, the kernel log)", "since": time.time() - 5,
           "until": time.time() + 55, "jobs": ["train.service"], "pid": proc.pid,
           "start_time": int(stat[19]) if start_time is None else start_time}
    (state / progress.NAME).write_text(json.dumps(doc))


def test_the_check_after_resume_leads_and_the_job_waits_for_it(
        conf: Path, no_bus: str, stopped: Path,
        other_process: subprocess.Popen[bytes]) -> None:
    write_check(stopped, other_process)
    code, out = status("--config", str(conf))
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("checking the devices after resume since "), out
    assert "at the latest): nvidia (the CUDA probe, NVML, the kernel log); 1 job waits for it: " \
           "train.service" in first
    row = next(line for line in out.splitlines() if line.strip().startswith("systemd-service:train"))
    assert row.endswith("pending; waiting for the check after resume"), out
    code, out = status("--config", str(conf), "--json")
    doc = json.loads(out)
    assert doc["checking_after_resume"]["jobs"] == ["train.service"]
    assert doc["checking_after_resume"]["pid"] == other_process.pid


def test_a_check_whose_process_is_gone_is_not_shown(conf: Path, no_bus: str, stopped: Path,
                                                     other_process: subprocess.Popen[bytes]) -> None:
    # The same pid, but not the process that wrote the file (its start time differs).
    write_check(stopped, other_process, start_time=1)
    _code, out = status("--config", str(conf))
    assert not out.startswith("checking the devices"), out
    row = next((line for line in out.splitlines() if line.strip().startswith("systemd-service:train")),
               out)
    assert row.endswith("pending"), out
    assert json.loads(status("--config", str(conf), "--json")[1])["checking_after_resume"] is None


def test_the_check_writes_down_what_it_does_and_removes_it(tmp_path: Path) -> None:
    with progress.checking(str(tmp_path), "ascend (npu-smi)", 10.0, 70.0, ["job.service"]):
        found = progress.current(str(tmp_path))
        assert found is not None and found.pid == os.getpid()
        assert (found.what, found.since, found.until, found.jobs) == \
            ("ascend (npu-smi)", 10.0, 70.0, ("job.service",))
    assert progress.current(str(tmp_path)) is None
    assert not (tmp_path / progress.NAME).exists()


def test_a_state_folder_that_cannot_take_it_changes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder"
    with progress.checking(str(missing), "nvidia", 1.0, 2.0, []):
        assert progress.current(str(missing)) is None


def test_a_drain_in_progress_leads_with_its_attempt_and_time_left(conf: Path,
                                                                    no_bus: str) -> None:
    state = conf.parent / "state"
    with History.open(str(state)) as h:
        # Begun by this very process, which still runs: the attempt is running.
        attempt = h.begin("suspend", "unit", False, "digest", time.time() - 10)
    _code, out = status("--config", str(conf))
    first = out.splitlines()[0]
    assert first.startswith(f"attempt {attempt} (suspend) is draining since "), out
    # [drain] deadline_s is 100 by default: 90 s of it are left.
    left = int(first.split(", for ")[1].split(" s more")[0])
    assert 85 <= left <= 90, first
    assert json.loads(status("--config", str(conf), "--json")[1])["draining_attempt"] == attempt

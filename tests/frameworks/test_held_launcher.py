"""A launcher that kills the other ranks when one fails (msrun's shape) is stopped while they leave.

``[[drain.launchers]]`` names it with ``stop = "hold"``: each rank gets
SIGINT from the guard while the launcher is stopped (SIGSTOP), so the rank
that fails at once cannot get the one still saving killed; the launcher is
continued once both left. Without the rule the same job loses the save,
which is what makes the hold worth its risk.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.frameworks import wait_gone
from helpers.runners import cli

LAUNCHER = str(Path(__file__).parent.parent / "helpers" / "msrun_like.py")
HOLD = '[[drain.launchers]]\ncmdline = "msrun_like[.]py"\nstop = "hold"\nname = "msrun-like"\n'


def drain(tmp_path: Path, node: str, held: bool) -> tuple[dict[str, object], str, str]:
    conf = tmp_path / "config.toml"
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n[idle]\nbackends = []\n'
                    '[drain]\ntimeout_s = 10\n' + (HOLD if held else ""))
    (tmp_path / "state").mkdir(mode=0o700, exist_ok=True)
    out = tmp_path / "codes"
    job = subprocess.Popen([sys.executable, LAUNCHER, "--node", node, "--out", str(out)],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert job.stdout is not None
        assert job.stdout.readline().startswith("ready")
        _code, text, err = cli("--config", str(conf), "drain", "--yes", "--json")
        assert wait_gone(job.pid, 10)
    finally:
        job.kill()
        job.wait()
    return json.loads(text), out.read_text(), err


@pytest.mark.parametrize("held", [True, False], ids=["held", "not-held"])
def test_the_saving_rank_is_not_killed_while_the_launcher_is_held(tmp_path: Path, node: str,
                                                                 held: bool) -> None:
    report, codes, err = drain(tmp_path, node, held)
    assert report["verdict"] == "allow", (report, err)
    if held:
        assert codes == "0 0\n1 1\n", codes  # rank 0 finished its save
        assert "stopped msrun-like" in err and "continued msrun-like" in err, err
    else:
        assert codes == "0 -9\n1 1\n", codes  # killed by the launcher mid-save


@contextlib.contextmanager
def held_job(tmp_path: Path, node: str, drain_section: str,
             *launcher_args: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any], str]]:
    """The msrun-like launcher (``launcher_args``), held by the rule, and ``drain --yes``
    under ``drain_section``: the job, the report and what the guard said; the job is
    killed whole at the end."""
    conf = tmp_path / "config.toml"
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n[idle]\nbackends = []\n'
                    f"[drain]\n{drain_section}{HOLD}")
    (tmp_path / "state").mkdir(mode=0o700)
    job = subprocess.Popen([sys.executable, LAUNCHER, "--node", node, "--out",
                            str(tmp_path / "codes"), *launcher_args],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert job.stdout is not None
        assert job.stdout.readline().startswith("ready")
        _code, text, err = cli("--config", str(conf), "drain", "--yes", "--json")
        yield job, json.loads(text), err
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def test_a_held_launcher_that_would_start_its_ranks_again_vetoes(tmp_path: Path,
                                                                 node: str) -> None:
    """An elastic launcher restarts its ranks once it notices they left, later than any
    rescan looks: still running once continued, it is a veto, never an allow with a job
    coming back onto the device during the sleep."""
    with held_job(tmp_path, node, "timeout_s = 4\n", "--save-s", "0.5",
                  "--restart-after", "2") as (job, report, err):
        assert report["verdict"] == "veto", (report, err)
        [reason] = report["reason_details"]
        assert (reason["code"], reason["pid"]) == ("launcher-running", job.pid), reason
        # the save was whole: the hold did its part
        assert (tmp_path / "codes").read_text() == "0 0\n1 1\n"


def test_a_held_launcher_whose_ranks_left_after_escalation_is_given_time_to_exit(
        tmp_path: Path, node: str) -> None:
    """Its ranks gone only at the escalation, past the wait after the signal: the launcher,
    continued a moment ago, still gets its seconds to exit, and the suspend goes on."""
    with held_job(tmp_path, node, 'timeout_s = 1\nescalate = ["SIGTERM:3"]\n',
                  "--save-s", "30") as (job, report, err):
        assert report["verdict"] == "allow", (report, err)
        assert wait_gone(job.pid, 10)

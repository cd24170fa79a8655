"""The sleep hook's ``pre`` after a resume: the unit's attempt of a sleep that resumed already is
no later sleep's, however soon that sleep comes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from suspendguard.cli import main
from suspendguard.config import load
from suspendguard.guard.pipeline import run
from suspendguard.store.history import History
from suspendguard.system.log import Logger


@pytest.fixture
def conf(tmp_path: Path, node: str) -> Path:
    (tmp_path / "logs").mkdir()
    path = tmp_path / "config.toml"
    path.write_text(
        f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
        '[idle]\nbackends = []\n[drain]\ntimeout_s = 5\n'
        f'[logs]\npaths = ["{tmp_path / "logs"}/**"]\n')
    return path


def hook(conf: Path, *argv: str) -> str:
    err = io.StringIO()
    code = main(["sleep-hook", *argv, "--config", str(conf)], out=io.StringIO(), err=err,
                environ={"JOURNAL_STREAM": "8:1"})
    assert code == 0  # a hook never vetoes
    return err.getvalue()


def test_a_second_sleep_soon_after_a_resume_is_not_filed_under_the_first_s_attempt(
        conf: Path) -> None:
    """The veto unit ran for the first sleep; the second, seconds after its resume, had no
    unit (systemd-sleep run by hand): its pre says so, and its post reads nothing for it."""
    report = run(load(str(conf)), dry_run=False, action="suspend", origin="unit",
                 idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
    assert f"attempt {report.attempt.id}: system going down" in hook(conf, "pre", "suspend")
    hook(conf, "post", "suspend")

    err = hook(conf, "pre", "suspend")
    assert "the veto unit did not run before this suspend: nothing was drained" in err, err
    assert f"attempt {report.attempt.id}" not in err, err
    assert "no suspend attempt was recorded" in hook(conf, "post", "suspend")
    with History.open(str(conf.parent / "state"), readonly=True) as h:
        attempt = h.attempt(report.attempt.id)
        events = h.events()
    assert attempt is not None and [e.phase for e in attempt.events] == ["pre", "post"]
    assert [(e.phase, e.attempt_id) for e in reversed(events)] == [
        ("pre", report.attempt.id), ("post", report.attempt.id), ("pre", None), ("post", None)]

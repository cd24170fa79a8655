"""A run's opening: what a killed run left is put right before the look, and a first aid
that breaks leaves neither the guard lock nor the history held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.records import drained_unit
from helpers.runners import guard

from suspendguard.store import lock as guard_lock
from suspendguard.store.history import History
from suspendguard.supervise.dropin import DROPIN_NAME, MARKER_NAME
from suspendguard.supervise.managers import ManagersAndEngines


class LeftoversBreak:
    """Supervisors whose clean-up of a killed run's leftovers fails (the manager went away)."""

    def __init__(self) -> None:
        self.asked = 0

    def clean_leftovers(self) -> list[str]:
        self.asked += 1
        raise OSError("the manager went away")


def test_a_first_aid_that_breaks_releases_the_guard_lock(make_config: Any) -> None:
    config = make_config()
    supervisors = LeftoversBreak()
    with pytest.raises(OSError, match="the manager went away"):
        guard(config, supervisors=supervisors)
    assert supervisors.asked == 1
    # Held by this very process it would refuse a second take: flock is per open file.
    again = guard_lock.take(config.state.dir, 0.0)
    try:
        assert not again.refused, again.refused
    finally:
        again.release()


def _the_attempt(config: Any) -> tuple[str, list[str], list[str]]:
    with History.open(config.state.dir, readonly=True) as h:
        [attempt] = h.attempts(5)
    return (attempt.result, [r.code for r in attempt.verdict.reasons], list(attempt.reasons))


def test_a_first_aid_that_breaks_ends_the_attempt_with_its_error_not_as_a_kill(
        make_config: Any) -> None:
    config = make_config()
    with pytest.raises(OSError):
        guard(config, supervisors=LeftoversBreak())
    assert _the_attempt(config) == (
        "interrupted", ["guard-failed"],
        ["the guard failed before it gave a verdict: OSError: the manager went away"])


def test_a_run_that_breaks_after_its_look_ends_the_attempt_with_its_error(
        make_config: Any) -> None:
    def broken_backend(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the backend broke")

    config = make_config()
    with pytest.raises(RuntimeError):
        guard(config, idle_check=broken_backend)
    assert _the_attempt(config) == (
        "interrupted", ["guard-failed"],
        ["the guard failed before it gave a verdict: RuntimeError: the backend broke"])


def test_a_dry_run_gives_no_first_aid(make_config: Any) -> None:
    supervisors = LeftoversBreak()
    report = guard(make_config(), dry_run=True, record=False, supervisors=supervisors)
    assert supervisors.asked == 0 and report.verdict.kind == "allow"


def test_what_keeps_a_held_job_down_stays_and_only_a_killed_run_s_leftover_goes(
        make_config: Any, tmp_path: Path) -> None:
    # Held after resume (its device unhealthy): the next restore owns its drop-in and
    # marker, which tells it whether an operator started the unit meanwhile.
    held, left = "train.service", "infer.service"
    drained_unit(tmp_path, held)
    with History.open(str(tmp_path / "state")) as h:
        [stop] = h.pending_stops()
        h.record_hold(stop.id, "device nvidia unhealthy")
    killed = tmp_path / "run" / f"{left}.d"  # a drop-in no stop row owns
    killed.mkdir()
    (killed / DROPIN_NAME).write_text("[Service]\nRestart=no\n")
    supervisors = ManagersAndEngines(dropin_root=str(tmp_path / "run"), environ={},
                                     bus_address=f"unix:path={tmp_path / 'no-bus'}",
                                     state_dir=str(tmp_path / "state"))
    report = guard(make_config(), supervisors=supervisors)
    kept = tmp_path / "run" / f"{held}.d"
    assert (kept / DROPIN_NAME).exists() and (kept / MARKER_NAME).exists()
    assert not killed.exists()
    [note] = [w for w in report.verdict.warnings if "killed guard run" in w]
    assert left in note and held not in note, note

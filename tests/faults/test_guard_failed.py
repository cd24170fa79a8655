"""A guard that ends with an error: the veto unit fails, so the sleep does not happen in
enforce mode, and the person who asked for it is told; observe mode lets the sleep go on.
Either way the attempt ends with the error, never read later as a guard killed.

The error is injected where the look begins; the session is a fake logind's on a private
bus, its terminal a real pseudo-terminal that the test reads.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import PrivateBus
from helpers.runners import cli
from helpers.ttys import tty_session, written

from suspendguard.guard import pipeline
from suspendguard.store import mode as guard_mode
from suspendguard.store.history import History

INJECTED = "the guard failed before it gave a verdict: RuntimeError: the look broke"


@pytest.fixture
def broken_look(monkeypatch: pytest.MonkeyPatch) -> None:
    def look(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the look broke")

    monkeypatch.setattr(pipeline, "look", look)


@pytest.fixture
def terminal_session(bus: PrivateBus, fakes: Callable[..., subprocess.Popen[str]]
                     ) -> Iterator[int]:
    """A text session of this user on a real pseudo-terminal (mesg y): its master fd."""
    with tty_session() as (master, session):
        fakes({"sessions": [session]}, services=["logind"])
        yield master


def _attempt(state_dir: Path) -> tuple[str, list[str], list[str]]:
    with History.open(str(state_dir), readonly=True) as h:
        [attempt] = h.attempts(5)
    return attempt.result, [r.code for r in attempt.verdict.reasons], list(attempt.reasons)


@pytest.mark.usefixtures("broken_look")
def test_an_enforced_run_that_breaks_tells_the_user_and_ends_its_attempt_with_the_error(
        tmp_path: Path, conf: Path, terminal_session: int) -> None:
    with pytest.raises(RuntimeError, match="the look broke"):
        cli("--config", str(conf), "pre-sleep", "suspend")
    told = written(terminal_session)
    assert "Message from suspendguard" in told, told
    assert f"Suspend refused by suspendguard: {INJECTED}" in told, told
    assert _attempt(tmp_path / "state") == ("interrupted", ["guard-failed"], [INJECTED])


@pytest.mark.usefixtures("broken_look")
def test_the_same_refusal_asked_again_at_once_is_told_once(
        tmp_path: Path, conf: Path, terminal_session: int) -> None:
    # With the lid closed logind asks again by itself about every 30 s: one message, not one
    # a try; the journal keeps each.
    for _ in range(2):
        with pytest.raises(RuntimeError):
            cli("--config", str(conf), "pre-sleep", "suspend")
    assert written(terminal_session).count("Suspend refused by suspendguard") == 1
    with History.open(str(tmp_path / "state"), readonly=True) as h:
        assert [a.result for a in h.attempts(5)] == ["interrupted", "interrupted"]
    # Another refusal is told at once.
    with pytest.raises(RuntimeError):
        cli("--config", str(conf), "pre-sleep", "hibernate")
    assert "Hibernate refused by suspendguard" in written(terminal_session)


@pytest.mark.usefixtures("broken_look")
def test_an_observed_look_that_breaks_lets_the_sleep_go_on_and_tells_nobody(
        tmp_path: Path, conf: Path, terminal_session: int) -> None:
    (tmp_path / "state").mkdir(mode=0o700)
    guard_mode.write(str(tmp_path / "state"), "observe")
    status, _, err = cli("--config", str(conf), "pre-sleep", "suspend")
    assert status == 0, err
    assert f"observe mode (suspendguard mode): {INJECTED}; the suspend goes on" in err, err
    assert written(terminal_session) == ""
    assert _attempt(tmp_path / "state") == ("interrupted", ["guard-failed"], [INJECTED])


def test_a_configuration_that_cannot_be_loaded_is_told_once_where_the_unit_keeps_state(
        conf: Path, tmp_path: Path, terminal_session: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # It refuses every sleep until fixed: logind's asks with the lid closed would tell every
    # user again every 30 s. The note is kept in the unit's StateDirectory= (here a stand-in).
    state = tmp_path / "unit-state"
    state.mkdir()
    monkeypatch.setattr(guard_mode, "UNIT_STATE_DIR", str(state))
    conf.write_text(conf.read_text() + "[drain]\ntimeout_s = 'soon'\n")
    for _ in range(2):
        code, _, err = cli("--config", str(conf), "pre-sleep", "suspend")
        assert code == 2, err
    assert written(terminal_session).count("Suspend refused by suspendguard") == 1
    assert (state / "told.json").exists()


def test_a_configuration_that_cannot_be_loaded_is_told_as_the_refusal_it_is(
        conf: Path, tmp_path: Path, terminal_session: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The unit fails at every sleep while it cannot be loaded: whoever asked is told why. The
    # note of it goes to the unit's own folder: a stand-in here, never the host's.
    monkeypatch.setattr(guard_mode, "UNIT_STATE_DIR", str(tmp_path / "unit-state"))
    conf.write_text(conf.read_text() + "[drain]\ntimeout_s = 'soon'\n")
    code, _, err = cli("--config", str(conf), "pre-sleep", "suspend")
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(f"suspendguard: {conf}"), err
    told = written(terminal_session)
    assert "Suspend refused by suspendguard: the guard failed before it gave a verdict: " in told
    assert str(conf) in told, told


def test_the_off_switch_works_while_the_configuration_cannot_be_loaded(
        conf: Path, tmp_path: Path, terminal_session: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A typo refuses every sleep; `mode off` is the way out meanwhile, kept in the unit's own
    # folder (here a stand-in), which the veto unit reads while the file cannot be loaded.
    state = tmp_path / "unit-state"
    monkeypatch.setattr(guard_mode, "UNIT_STATE_DIR", str(state))
    conf.write_text(conf.read_text() + "[drain]\ntimeout_s = 'soon'\n")
    code, _, err = cli("--config", str(conf), "pre-sleep", "suspend")
    assert code == 2, err  # enforced: refused
    code, out, err = cli("--config", str(conf), "mode", "off")
    assert code == 0 and out.startswith("off: "), err
    assert f"the mode is {state}'s" in err and str(conf) in err, err
    assert guard_mode.read(str(state)).name == "off"
    code, _, err = cli("--config", str(conf), "pre-sleep", "suspend")
    assert code == 0, err
    assert "the guard's mode is off (suspendguard mode): the suspend goes on, not guarded" in err
    assert str(conf) in err
    code, out, _ = cli("--config", str(conf), "mode")
    assert code == 0 and out.startswith("off: ")
    code, _, _ = cli("--config", str(conf), "mode", "enforce")
    code, _, err = cli("--config", str(conf), "pre-sleep", "suspend")
    assert code == 2, err

"""``suspendguard suspend`` against fake logind and systemd1 on a real private dbus-daemon.

The fake logind answers Suspend(false) and starts suspend.target through the
fake systemd1, whose job runs what the units ordered before the sleep would
run here: the real guard (``pre-sleep``) on real holders, then the sleep
hook's ``pre`` and ``post``. The booted-systemd version of the same is in
tests/containers/test_systemd_container.py.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import PrivateBus, dbus_daemon, fake_service
from helpers.holders import Holders
from helpers.runners import cli

from suspendguard.cli import main
from suspendguard.store import mode
from suspendguard.store.history import History
from suspendguard.system.terminal import when

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")


def guard(conf: Path, *argv: str) -> list[str]:
    return [sys.executable, "-m", "suspendguard", *argv, "--config", str(conf)]


def sleep_path(conf: Path, action: str = "suspend") -> dict[str, Any]:
    """The fake systemd's job for ACTION.target: the veto unit's step, then the hooks."""
    return {"jobs": {f"{action}.target": [
        guard(conf, "pre-sleep", action),
        guard(conf, "sleep-hook", "pre", action),
        guard(conf, "sleep-hook", "post", action),
    ]}}


def suspend(bus: PrivateBus, conf: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["suspend", *argv, "--config", str(conf)], out=out, err=err,
                environ={"DBUS_SYSTEM_BUS_ADDRESS": bus.address}, stdin=io.StringIO())
    return code, out.getvalue(), err.getvalue()


def unit_attempts(conf: Path) -> list[Any]:
    with History.open(str(conf.parent / "state"), readonly=True) as h:
        return [a for a in h.attempts(10) if a.origin == "unit"]


def test_allowed_sleep_says_when_it_went_down_and_came_back(
        bus: PrivateBus, conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node)
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf)
    assert code == 0, out + err
    first, *rest = out.splitlines()
    [attempt] = unit_attempts(conf)
    # The hook's records, each time in the one form every command shows, its zone with it.
    down, up = attempt.events
    assert [down.phase, up.phase] == ["pre", "post"]
    assert first == f"suspended at {when(down.time)}, resumed at {when(up.time)}", out
    assert f"  attempt {attempt.id}: the guard allowed it, 1 holder(s) drained" in rest
    assert proc.wait(timeout=5) == 0 and holders.signals() == [f"{pid} SIGINT"]


def test_vetoed_sleep_is_exit_1_with_the_reason(bus: PrivateBus, conf: Path, node: str,
                                                 holders: Holders) -> None:
    proc, pid = holders.start(node, mode="deaf")
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf)
    assert code == 1, out + err
    first = out.splitlines()[0]
    assert first.startswith(f"vetoed: pid {pid} ") and "SIGINT" in first, out
    [attempt] = unit_attempts(conf)
    assert attempt.result == "veto" and attempt.events == ()  # the hooks never ran
    # The command it names shows this attempt whole, the config it ran with included.
    [more] = [line for line in out.splitlines() if line.startswith(f"  attempt {attempt.id}; ")]
    assert more.startswith(f"  attempt {attempt.id}; more: suspendguard --config {conf} "
                           f"history {attempt.id}, journalctl -u "), more
    whole = io.StringIO()
    assert main(more.split(", ")[0].split()[4:], out=whole, err=io.StringIO(), environ={}) == 0
    assert whole.getvalue().startswith(f"attempt {attempt.id}: suspend, ")
    assert proc.poll() is None


def test_hibernate_asks_logind_to_hibernate(bus: PrivateBus, conf: Path) -> None:
    with fake_service(bus, sleep_path(conf, "hibernate")):
        code, out, err = suspend(bus, conf, "--hibernate")
    assert code == 0, out + err
    assert out.startswith("hibernated at ")
    assert [a.action for a in unit_attempts(conf)] == ["hibernate"]


def test_logind_refusing_is_exit_3_in_one_line(bus: PrivateBus, conf: Path) -> None:
    state = {**sleep_path(conf), "sleep_error": [
        "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
        "Interactive authentication required."]}
    with fake_service(bus, state):
        code, out, err = suspend(bus, conf)
    assert code == 3 and out == ""
    last = err.splitlines()[-1]
    assert last.startswith("suspendguard: suspend: ") and "InteractiveAuthorizationRequired" in last
    assert not (conf.parent / "state" / "history.db").exists()  # nothing ran


def test_no_logind_on_the_bus_is_exit_3(bus: PrivateBus, conf: Path) -> None:
    with fake_service(bus, sleep_path(conf), services=("systemd",)):
        code, _, err = suspend(bus, conf)
    assert code == 3 and "org.freedesktop.login1 is not on the system bus" in err


def test_a_sleep_that_fails_after_the_guard_allowed_is_exit_3(bus: PrivateBus,
                                                              conf: Path) -> None:
    state = {"jobs": {"suspend.target": [guard(conf, "pre-sleep", "suspend"), ["false"]]}}
    with fake_service(bus, state):
        code, out, err = suspend(bus, conf)
    assert code == 3, out + err
    [attempt] = unit_attempts(conf)
    assert out.startswith(f"the suspend failed after the guard allowed it (attempt {attempt.id})")
    assert "result 'dependency'" in out and "journalctl -b -u systemd-suspend.service" in out


def test_a_sleep_a_failed_unit_kept_from_happening_names_the_veto_unit(
        bus: PrivateBus, conf: Path) -> None:
    # The veto unit failed and recorded nothing (say, its history could not be written):
    # systemd-suspend.service never ran, so its journal has nothing to say.
    with fake_service(bus, {"jobs": {"suspend.target": [["false"]]}}):
        code, out, err = suspend(bus, conf)
    assert code == 3, out + err
    assert out.startswith("the suspend did not happen: a unit it needs failed"), out
    assert out.rstrip().endswith("see journalctl -b -u suspendguard@suspend.service"), out


def test_a_sleep_without_the_guard_says_so(bus: PrivateBus, conf: Path) -> None:
    with fake_service(bus, {"jobs": {}}):
        code, out, _ = suspend(bus, conf)
    assert code == 0
    assert out.startswith("suspended, resumed at ")
    assert "no history yet" in out and "(is it installed? suspendguard status)" in out
    (conf.parent / "state").mkdir()
    with History.open(str(conf.parent / "state")):
        pass  # a history, but no attempt in it
    with fake_service(bus, {"jobs": {}}):
        code, out, _ = suspend(bus, conf)
    assert code == 0 and "the guard recorded no attempt for this suspend" in out


def test_observe_mode_says_the_guard_only_looked_and_what_it_would_have_done(
        bus: PrivateBus, conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node, mode="deaf")
    mode.write(str(conf.parent / "state"), "observe")
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf)
    assert code == 0, out + err
    [attempt] = unit_attempts(conf)
    assert attempt.dry_run and attempt.result == "veto"
    first, said = out.splitlines()
    # The sleep hook's records are the look's: when it went down is known.
    assert first.startswith("suspended at ") and ", resumed at " in first, out
    assert [e.phase for e in attempt.events] == ["pre", "post"]
    assert said.startswith(f"  ! observe mode (suspendguard mode): the guard only looked "
                           f"(attempt {attempt.id}) and would have vetoed it: pid {pid} "), out
    assert said.endswith("; it signalled nobody and refused nothing"), out
    assert proc.poll() is None and holders.signals() == []


def test_off_mode_says_the_guard_did_not_look(bus: PrivateBus, conf: Path) -> None:
    mode.write(str(conf.parent / "state"), "off")
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf)
    assert code == 0, out + err
    assert out.splitlines()[1] == ("  ! the guard is off (suspendguard mode): it did not look "
                                   "at this suspend (suspendguard mode enforce turns it on)")


def test_dry_run_shows_the_check_report_and_asks_nothing(bus: PrivateBus, conf: Path,
                                                         node: str, holders: Holders) -> None:
    proc, pid = holders.start(node, mode="deaf")
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf, "--dry-run")
    assert code == 1, err
    assert out.startswith("verdict: VETO (dry run)") and f"pid {pid} " in out
    assert out.rstrip().endswith("logind: CanSuspend says yes; dry run: no suspend asked for")
    assert not (conf.parent / "state" / "history.db").exists()  # no attempt: no sleep started
    assert proc.poll() is None and holders.signals() == []


def protect(conf: Path, pid: int) -> None:
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    conf.write_text(conf.read_text() + f'[[policy.protect]]\ncomm = "{comm}"\n')


def test_when_ready_sleeps_once_a_slow_holder_left_by_itself(
        bus: PrivateBus, conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node, leave_after=2.0)
    protect(conf, pid)  # never signalled: only its own exit clears the veto
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf, "--when-ready=30")
    assert code == 0, out + err
    assert f"waiting (up to 30 s more) for: pid {pid} " in err and "(protected)" in err
    assert f"pid {pid} " in err and " has left (" in err
    assert out.startswith("suspended at "), out
    assert proc.wait(timeout=5) == 0 and holders.signals() == []
    [attempt] = unit_attempts(conf)
    assert attempt.result == "allow" and attempt.holders == ()  # it had left before the sleep


def test_when_ready_gives_up_after_its_bound_naming_the_holder(
        bus: PrivateBus, conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node)
    protect(conf, pid)
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf, "--when-ready", "1.5")
    assert code == 1, out + err
    first = out.splitlines()[0]
    assert first.startswith("gave up waiting to suspend: still there after 1.5 s: "
                            f"pid {pid} "), out
    assert first.endswith("(protected)") and "no suspend asked for" in out
    assert not (conf.parent / "state" / "history.db").exists()  # no sleep was asked for
    assert proc.poll() is None and holders.signals() == []


def test_when_ready_does_not_wait_for_holders_the_drain_stops(
        bus: PrivateBus, conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node)
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf, "--when-ready=30")
    assert code == 0 and "waiting (up to" not in err, out + err
    assert proc.wait(timeout=5) == 0 and holders.signals() == [f"{pid} SIGINT"]


# A process name (any 15 bytes, ESC included) that clears the screen where it is printed.
HOSTILE = "ev\x1b[2Jil"
SHOWN = "ev\\e[2Jil"


def named(folder: Path, name: str) -> str:
    """This interpreter under a link called ``name``: the process name of what it runs."""
    link = folder / "bin" / name
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(os.path.realpath(sys.executable))
    return str(link)


def test_when_ready_shows_a_process_name_escaped(bus: PrivateBus, conf: Path, node: str,
                                                 holders: Holders, tmp_path: Path) -> None:
    _, pid = holders.start(node, mode="deaf", python=named(tmp_path, HOSTILE))
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf, "--when-ready=1")
    assert code == 1, out + err
    assert f"suspendguard: waiting (up to 1 s more) for: pid {pid} {SHOWN} (sigint-ignored)" \
        in err.splitlines(), err
    assert out.startswith(f"gave up waiting to suspend: still there after 1 s: pid {pid} "
                          f"{SHOWN} (sigint-ignored)\n"), out
    assert "\x1b" not in out + err


def test_a_sleep_that_did_not_happen_shows_the_looks_reason_escaped(
        bus: PrivateBus, conf: Path, node: str, holders: Holders, tmp_path: Path) -> None:
    _, pid = holders.start(node, mode="deaf", python=named(tmp_path, HOSTILE))
    mode.write(str(conf.parent / "state"), "observe")
    # The guard's look lets it go; a unit beside it fails, so the sleep never happens.
    state = {"jobs": {"suspend.target": [guard(conf, "pre-sleep", "suspend"), ["false"]]}}
    with fake_service(bus, state):
        code, out, err = suspend(bus, conf)
    assert code == 3, out + err
    assert f"and would have vetoed it: pid {pid} {SHOWN} " in out, out
    assert "\x1b" not in out


@pytest.mark.parametrize("bound", ["nan", "inf", "-5"])
def test_when_ready_refuses_a_bound_that_never_passes(bus: PrivateBus, conf: Path,
                                                      bound: str) -> None:
    """nan made the wait's bound never pass (every 'left <= 0' False): it waited forever."""
    out, err = io.StringIO(), io.StringIO()
    code = main(["suspend", f"--when-ready={bound}", "--config", str(conf)], out=out, err=err,
                environ={"DBUS_SYSTEM_BUS_ADDRESS": bus.address}, stdin=io.StringIO())
    assert code == 2, out.getvalue() + err.getvalue()
    assert not (conf.parent / "state" / "history.db").exists()  # no sleep was asked for


def test_when_ready_waits_for_a_job_still_saving_after_an_earlier_attempts_sigint(
        bus: PrivateBus, conf: Path, node: str, holders: Holders) -> None:
    """The suspend's drain would send it no second SIGINT, only wait for it within its
    timeout, and veto: so the wait is here, and the sleep asked once it left."""
    proc, pid = holders.start(node, delay=4.0)  # on SIGINT, 4 s of saving
    short = conf.parent / "short.toml"
    short.write_text(conf.read_text().replace("timeout_s = 5", "timeout_s = 1"))
    code, out, err = cli("--config", str(short), "drain", "--yes")
    assert code == 1 and "still running" in out + err, out + err
    with fake_service(bus, sleep_path(conf)):
        code, out, err = suspend(bus, conf, "--when-ready=30")
    assert code == 0, out + err
    assert f"for: pid {pid} " in err and "(timeout-after-sigint)" in err and " has left (" in err, err
    assert out.startswith("suspended at "), out
    assert proc.wait(timeout=5) == 0 and holders.signals() == [f"{pid} SIGINT"]


# Another client of the bus: sends systemd's JobRemoved for suspend.target, "done", to every
# connection by its unique name, as any user of the system bus may send a signal.
FORGER = """
import asyncio, sys
from dbus_next.aio import MessageBus
from dbus_next.constants import MessageType
from dbus_next.message import Message
async def main():
    bus = await MessageBus(bus_address=sys.argv[1]).connect()
    while True:
        names = await bus.call(Message(destination="org.freedesktop.DBus",
                                       path="/org/freedesktop/DBus",
                                       interface="org.freedesktop.DBus", member="ListNames"))
        for name in names.body[0]:
            if name.startswith(":") and name != bus.unique_name:
                await bus.send(Message(
                    destination=name, path="/org/freedesktop/systemd1",
                    interface="org.freedesktop.systemd1.Manager", member="JobRemoved",
                    message_type=MessageType.SIGNAL, signature="uoss",
                    body=[4242, "/org/freedesktop/systemd1/job/4242", "suspend.target", "done"]))
        await asyncio.sleep(0.05)
asyncio.run(main())
"""


def test_a_job_end_another_client_sends_is_no_sleep(bus: PrivateBus) -> None:
    """Only systemd's own JobRemoved ends the wait: a forged one would read as a sleep done."""
    from suspendguard.system.dbus.logind import SleepJob, request_sleep

    forger = subprocess.Popen([sys.executable, "-c", FORGER, bus.address])
    try:
        with fake_service(bus, {"jobs": {"suspend.target": [["sleep", "30"]]}}):
            answer = request_sleep("suspend", 3.0, bus.address)
    finally:
        forger.kill()
        forger.wait()
    assert not isinstance(answer, SleepJob), answer
    assert answer.reason.endswith("waiting for Manager.JobRemoved timed out after 3 s"), answer

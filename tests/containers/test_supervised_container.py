"""Supervised jobs under a real systemd: signalled by the guard, kept down by systemd, started again.

One booted container for the module (tests/helpers/systemd_harness.py). The jobs are
system services (unit files in /etc/systemd/system) running
tests/helpers/holder.py on a node of rdev 1:9, as the guard's veto unit and
resume unit, installed by ``suspendguard install``, see them during a real
``systemctl suspend``. A sleep hook sorted before the guard's records, at the
moment systemd-sleep runs (the fake /sys/power state is written right
after), whether anything holds the node and whether the service runs.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.systemd_harness import HOLDER, Boot, Container, at_sleep_hook, container_marks, guard_config
from helpers.wait import wait_for

pytestmark = container_marks()

NODE = "/dev/suspendguard-sv/accel0"
NODE_RDEV = "1 9"  # /dev/urandom's number: not 1:7 nor the other container module's 1:8
MARKER = "/run/suspendguard-sv/signals.log"
SEEN = "/run/suspendguard-sv/at-sleep.log"
STATE_DIR = "/var/lib/suspendguard-sv"
CONFIG = guard_config(NODE, state_dir=STATE_DIR, timeout_s=3.0)
# Runs inside systemd-sleep, after the veto unit, just before the state is written.
AT_SLEEP = at_sleep_hook(
    NODE, SEEN, f'echo "held=$held active=$(systemctl is-active sv-job.service)" >> {SEEN}')


USER, UID = "sv-alice", 1234
USER_UNIT = "sv-user.service"
USER_MARKER = "/run/suspendguard-sv-user/signals.log"


def service(restart: str, extra: str = "", mode: str = "graceful") -> str:
    return (f"[Service]\nRestart={restart}\nRestartSec=100ms\n"
            f"ExecStart={sys.executable} {HOLDER} --node {NODE} --mode {mode} --delay 0.1 "
            f"--marker {MARKER}\n{extra}")


@pytest.fixture(scope="module")
def box(boot: Boot) -> Container:
    container = boot(NODE, NODE_RDEV, "/run/suspendguard-sv", config=CONFIG)
    container.add_hook("00-at-sleep", AT_SLEEP)
    return container


@pytest.fixture
def clean(box: Container) -> Iterator[Container]:
    box.reset_power()
    box.sh(f"rm -f {MARKER} {SEEN}")
    yield box
    for unit in ("sv-job.service", "sv-deaf.service", "sv-job.timer"):
        box.run("systemctl", "stop", unit, check=False)
        box.run("systemctl", "reset-failed", unit, check=False)
    box.sh("rm -f /etc/systemd/system/sv-* && systemctl daemon-reload")


def start(box: Container, unit: str, text: str) -> int:
    box.write(f"/etc/systemd/system/{unit}", text)
    box.run("systemctl", "daemon-reload")
    cursor = box.cursor()
    box.run("systemctl", "start", unit)
    box.wait_journal(cursor, r"\bready\b", args=("-u", unit, "-o", "cat"))
    return main_pid(box, unit)


def main_pid(box: Container, unit: str) -> int:
    return int(box.run("systemctl", "show", "-p", "MainPID", "--value", unit).stdout)


def as_user(box: Container, *argv: str, check: bool = True) -> str:
    return box.as_user(UID, *argv, check=check).stdout


@pytest.fixture
def lingering(box: Container) -> Iterator[Container]:
    """A lingering user (its manager runs with no login) with a Restart=always user service."""
    box.reset_power()
    box.sh(f"rm -f {MARKER} {SEEN}")
    box.lingering_user(USER, UID)
    box.sh(f"mkdir -p {Path(USER_MARKER).parent} && chmod 1777 {Path(USER_MARKER).parent} && "
           f"rm -f {USER_MARKER}")
    unit = (f"[Service]\nRestart=always\nRestartSec=100ms\nExecStart=/usr/bin/python3 {HOLDER} "
            f"--node {NODE} --mode graceful --delay 0.1 --marker {USER_MARKER}\n")
    box.sh(f"install -d -o {USER} /home/{USER}/.config /home/{USER}/.config/systemd "
           f"/home/{USER}/.config/systemd/user")
    box.write(f"/home/{USER}/.config/systemd/user/{USER_UNIT}", unit)
    as_user(box, "systemctl", "--user", "daemon-reload")
    as_user(box, "systemctl", "--user", "start", USER_UNIT)
    yield box
    as_user(box, "systemctl", "--user", "stop", USER_UNIT, check=False)


def user_main_pid(box: Container) -> int:
    return int(as_user(box, "systemctl", "--user", "show", "-p", "MainPID", "--value", USER_UNIT))


def wait_user_active(box: Container, timeout: float = 15.0) -> bool:
    return wait_for(lambda: as_user(box, "systemctl", "--user", "is-active", USER_UNIT,
                                    check=False).strip() == "active" and user_main_pid(box) != 0,
                    timeout, interval=0.1)


def attempt(box: Container) -> dict[str, Any]:
    out = json.loads(box.suspendguard("history", "--json", "-n", "3").stdout)["attempts"]
    found: dict[str, Any] = next(a for a in out if a["origin"] == "unit")
    return found


def test_restart_always_stays_stopped_through_the_sleep_and_runs_after_resume(
        clean: Container) -> None:
    box = clean
    first = start(box, "sv-job.service", service("always"))
    journal = box.suspend()
    assert box.power_state().startswith("mem"), journal
    # at the moment of the sleep nothing held the node and the service was down
    assert box.run("cat", SEEN).stdout.split() == ["held=0", "active=inactive"], journal
    assert f"{first} SIGINT" in box.run("cat", MARKER).stdout  # the drain signal, via systemd
    assert box.wait_active("sv-job.service"), journal
    assert main_pid(box, "sv-job.service") != first
    a = attempt(box)
    assert a["verdict"] == "allow"
    [stop] = a["stopped"]
    assert (stop["owner"], stop["result"]) == ("systemd-service:sv-job.service", "started"), a
    [holder] = a["holders"]
    assert holder["owner_key"] == "systemd-service:sv-job.service"
    # the drain drop-in is gone again: the next stop is the unit's own
    assert box.run("systemctl", "show", "-p", "KillSignal", "--value",
                   "sv-job.service").stdout.strip() == "15"
    assert "Started suspendguard-resume.service" in journal or \
        "Finished suspendguard-resume.service" in journal


def test_restart_no_with_exec_stop_is_restored(clean: Container) -> None:
    box = clean
    stop_mark = "/run/suspendguard-sv/execstop.log"
    box.sh(f"rm -f {stop_mark}")
    start(box, "sv-job.service", service("no", f"ExecStop=/bin/sh -c 'echo ran >> {stop_mark}'\n"))
    journal = box.suspend()
    assert box.power_state().startswith("mem"), journal
    assert box.run("cat", stop_mark).stdout.split() == ["ran"]
    assert box.wait_active("sv-job.service"), journal
    assert attempt(box)["stopped"][0]["result"] == "started"


def test_veto_after_a_drain_restarts_the_drained_service_at_once(clean: Container) -> None:
    box = clean
    start(box, "sv-job.service", service("always"))
    # too slow to exit: it takes SIGINT, then sleeps on past [drain] timeout_s
    start(box, "sv-deaf.service", service("no", "TimeoutStopSec=6\n", mode="slow"))
    journal = box.suspend()
    assert box.power_state() == "freeze mem disk\n", journal
    a = attempt(box)
    assert a["verdict"] == "veto"
    assert any("sv-deaf.service" in r for r in a["reasons"]), a["reasons"]
    assert box.unit_active("sv-job.service"), journal
    by_name = {s["name"]: s for s in a["stopped"]}
    assert by_name["sv-job.service"]["result"] == "started", a["stopped"]
    # still in its SIGINT handler: left to end on its own, with its own settings again, its
    # stop pending: the first restore that finds its job gone starts it again
    assert by_name["sv-deaf.service"]["result"] == "pending", a["stopped"]
    assert by_name["sv-deaf.service"]["why"].startswith("still draining after the guard's "
                                                        "signal"), a["stopped"]


def test_a_timer_that_brings_the_job_back_is_caught(clean: Container) -> None:
    box = clean
    box.write("/etc/systemd/system/sv-job.timer",
              "[Timer]\nOnUnitInactiveSec=300ms\nAccuracySec=1ms\n")
    start(box, "sv-job.service", service("no"))
    box.run("systemctl", "start", "sv-job.timer")
    journal = box.suspend()
    assert box.power_state() == "freeze mem disk\n", journal
    a = attempt(box)
    assert a["verdict"] == "veto"
    assert any("sv-job.service was started again" in r and "sv-job.timer" in r
               for r in a["reasons"]), a["reasons"]


def test_a_unit_the_operator_ran_meanwhile_is_not_started_again(clean: Container) -> None:
    box = clean
    start(box, "sv-job.service", service("always"))
    operator = box.hooks / "01-operator"
    operator.write_text("#!/bin/sh\n[ \"$1\" = pre ] || exit 0\n"
                        "systemctl start sv-job.service; sleep 0.5; systemctl stop sv-job.service\n")
    operator.chmod(0o755)
    try:
        journal = box.suspend()
    finally:
        operator.unlink()
    assert box.power_state().startswith("mem"), journal
    time.sleep(1)
    assert not box.unit_active("sv-job.service"), json.dumps(attempt(box)["stopped"]) + journal
    [stop] = attempt(box)["stopped"]
    assert stop["result"] == "skipped" and "someone else" in stop["why"], stop


def test_user_service_of_a_lingering_user_is_stopped_through_its_manager_and_restored(
        lingering: Container) -> None:
    box = lingering
    assert wait_user_active(box)
    wait_for(lambda: "ready" in as_user(box, "journalctl", "--user", "-u", USER_UNIT, "-o", "cat",
                                        check=False), 15.0, interval=0.1)
    first = user_main_pid(box)
    journal = box.suspend()
    assert box.power_state().startswith("mem"), journal
    # nothing held the node while the machine slept: Restart=always did not fire
    assert box.run("cat", SEEN).stdout.split()[0] == "held=0", journal
    assert f"{first} SIGINT" in box.run("cat", USER_MARKER).stdout  # the drain signal
    assert wait_user_active(box), journal
    assert user_main_pid(box) != first
    a = attempt(box)
    assert a["verdict"] == "allow", a
    [stop] = a["stopped"]
    assert (stop["owner"], stop["result"]) == (f"user-service:{UID}:{USER_UNIT}", "started"), a
    [holder] = a["holders"]
    assert holder["owner_key"] == f"user-service:{UID}:{USER_UNIT}"
    unit_log = box.run("journalctl", "-u", "suspendguard@suspend.service", "-o", "cat").stdout
    assert f"keeping user {UID}'s service {USER_UNIT} (restart always) down through the " \
        f"manager of uid {UID} until restore; its holders get SIGINT from the guard" in unit_log
    # the drain drop-in is gone from the user's runtime unit folder
    assert box.run("test", "-e", f"/run/user/{UID}/systemd/user/{USER_UNIT}.d",
                   check=False).returncode != 0
    assert as_user(box, "systemctl", "--user", "show", "-p", "KillSignal", "--value",
                   USER_UNIT).strip() == "15"



def test_a_user_service_of_two_holders_with_kill_mode_mixed_is_drained_whole(
        lingering: Container) -> None:
    """A main process and a worker it started, both on the node: each gets SIGINT, the
    unit stays down through the sleep and comes back whole."""
    box = lingering
    both = (f"/usr/bin/python3 {HOLDER} --node {NODE} --mode graceful --delay 0.1 "
            f"--marker {USER_MARKER}")
    box.write(f"/home/{USER}/.config/systemd/user/{USER_UNIT}",
              f"[Service]\nRestart=always\nRestartSec=100ms\nKillMode=mixed\n"
              f"ExecStart=/bin/sh -c '{both} & exec {both}'\n")
    as_user(box, "systemctl", "--user", "daemon-reload")
    as_user(box, "systemctl", "--user", "restart", USER_UNIT)

    def pids() -> list[int]:
        cgroup = as_user(box, "systemctl", "--user", "show", "-p", "ControlGroup", "--value",
                         USER_UNIT).strip()
        # unified, or the hybrid layout's v2 or name=systemd tree
        procs = box.sh(f"cat /sys/fs/cgroup{cgroup}/cgroup.procs /sys/fs/cgroup/unified{cgroup}"
                       f"/cgroup.procs /sys/fs/cgroup/systemd{cgroup}/cgroup.procs 2>/dev/null; "
                       "true").stdout
        return sorted({int(p) for p in procs.split()}) if cgroup else []

    def ready(pid: int) -> bool:
        """``pid`` holds the node and catches SIGINT: past holder.py's open and its handler
        (the one the shell started with ``&`` begins with SIGINT ignored)."""
        out = box.sh(f"readlink /proc/{pid}/fd/*; grep '^SigCgt:' /proc/{pid}/status; true",
                     check=False).stdout
        caught = re.search(r"^SigCgt:\s*([0-9a-f]+)$", out, re.M)
        return (NODE in out.splitlines() and caught is not None
                and int(caught.group(1), 16) >> (signal.SIGINT - 1) & 1 == 1)

    def both_ready() -> list[int]:
        now = pids()
        return now if len(now) == 2 and all(ready(pid) for pid in now) else []

    before = wait_for(both_ready, 15.0, interval=0.1,
                      message=lambda: f"{USER_UNIT}: not two holders of {NODE} ready: {pids()}")
    journal = box.suspend()
    assert box.power_state().startswith("mem"), journal
    assert box.run("cat", SEEN).stdout.split()[0] == "held=0", journal  # both drained
    signalled = box.run("cat", USER_MARKER).stdout
    assert all(f"{pid} SIGINT" in signalled for pid in before), (signalled, journal)
    assert wait_user_active(box), journal
    wait_for(lambda: len(pids()) >= 2, 15.0, interval=0.1)
    after = pids()
    assert len(after) == 2 and not set(after) & set(before), (before, after)
    a = attempt(box)
    assert a["verdict"] == "allow", a
    [stop] = a["stopped"]
    assert (stop["owner"], stop["result"]) == (f"user-service:{UID}:{USER_UNIT}", "started"), a

# As the guard's units ask it: root, over the manager's private socket, on
# fresh connections (systemd 252 left the first message of one in 26 of 40
# unread, bus.py's nudge); every one must answer.
READ_USER_STATE = """
import json, sys, time
from suspendguard.supervise.user_services import UserServices
from suspendguard.model import Owner
took = []
for _ in range(40):
    t = time.monotonic()
    states = UserServices(time.monotonic).states(Owner("user-service", sys.argv[1],
                                                       uid=int(sys.argv[2])))
    took.append(time.monotonic() - t)
    if not isinstance(states, dict):
        sys.exit(states.reason)
st = states[sys.argv[1]]
print(json.dumps({"restart": st.restart, "restart_delay_s": st.restart_delay_s,
                  "timeout_stop_s": st.timeout_stop_s, "main_pid": st.main_pid,
                  "triggered_by": st.triggered_by, "next_elapse": st.next_elapse,
                  "now": time.monotonic(), "slowest_s": max(took)}))
"""


def test_root_reads_the_user_managers_spans_as_numbers_over_its_private_socket(
        lingering: Container) -> None:
    box = lingering
    assert wait_user_active(box)
    timer = "sv-user.timer"
    box.write(f"/home/{USER}/.config/systemd/user/{timer}",
              f"[Timer]\nOnActiveSec=1h\nUnit={USER_UNIT}\n")
    as_user(box, "systemctl", "--user", "daemon-reload")
    as_user(box, "systemctl", "--user", "start", timer)
    try:
        read = json.loads(box.run(sys.executable, "-c", READ_USER_STATE, USER_UNIT,
                                  str(UID)).stdout)
        # what systemctl --user prints as "100ms", "1min 30s" and the timer's next elapse
        assert (read["restart"], read["restart_delay_s"], read["timeout_stop_s"]) == \
            ("always", 0.1, 90.0), read
        assert read["main_pid"] == user_main_pid(box)
        assert read["triggered_by"] == [timer]
        assert 3590 < read["next_elapse"][timer] - read["now"] <= 3600, read
        assert read["slowest_s"] < 1.0, read  # a Hello left unread would wait the 2 s timeout
    finally:
        as_user(box, "systemctl", "--user", "stop", timer, check=False)
        box.run("rm", "-f", f"/home/{USER}/.config/systemd/user/{timer}")
        as_user(box, "systemctl", "--user", "daemon-reload")

"""suspendguard-watch.service in a real booted systemd with a real logind: the block is seen
by ``systemd-inhibit --list`` while a job ignores SIGINT, gone within 2 s once it ends, and
a suspend then goes through.

One boot. ``install --watch`` renders, enables and starts the unit as an
operator's install does; the unit's sandbox is the shipped one, so the look
(the /proc scan, inotify on the node, D-Bus to logind) runs under its
hardening. The job is a transient service (helpers/holder.py, deaf: SIGINT
ignored), stopped with ``systemctl stop`` (SIGTERM, which it obeys).
"""

from __future__ import annotations

import re
import time

import pytest
from helpers.systemd_harness import Boot, Container, container_marks, guard_config
from helpers.wait import wait_for

pytestmark = container_marks()

NODE = "/dev/suspendguard-watch/accel0"  # /run is nodev in the container: /dev is not
MARKER = "/run/suspendguard-test/signals.log"
WATCH = "suspendguard-watch.service"
RELEASE_S = 2.0


@pytest.fixture(scope="module")
def box(boot: Boot) -> Container:
    container = boot(NODE, "1 7", "/run/suspendguard-test")
    container.write("/etc/suspendguard/config.toml", guard_config(NODE))
    out = container.suspendguard("install", "--force", "--watch").stdout
    assert f"started: {WATCH}" in out, out
    return container


def inhibitors(box: Container) -> str:
    """``systemd-inhibit --list``, wide enough that no reason is cut."""
    return box.run("systemd-inhibit", "--list", "--no-pager", "--no-legend",
                   env={"COLUMNS": "2000"}).stdout


def ours(box: Container) -> list[str]:
    return [line for line in inhibitors(box).splitlines() if line.split()[:1] == ["suspendguard"]]


def test_the_watch_shows_a_certain_veto_and_lets_the_suspend_go_once_it_is_gone(
        box: Container) -> None:
    assert box.unit_active(WATCH), box.run("systemctl", "status", WATCH, check=False).stdout
    assert ours(box) == [], inhibitors(box)
    with box.cleaned(MARKER):
        pid = box.start_holder("deaf", "deaf", node=NODE, marker=MARKER)
        lines = wait_for(lambda: ours(box), 10, message=lambda: "no block: " + inhibitors(box)
                         + box.run("journalctl", "-u", WATCH, "-o", "cat").stdout[-2000:])
        [line] = lines
        assert re.search(r"\bsleep\b", line) and line.rstrip().endswith("block"), line
        assert "shutdown" not in line, line
        assert str(pid) in line and "SIGINT" in line, line  # the reason: this job ignores it
        status = box.run("systemctl", "show", "-p", "StatusText", "--value", WATCH).stdout
        assert status.startswith("blocking sleep: ") and str(pid) in status, status

        box.run("systemctl", "stop", "sg-test-deaf.service")
        ended = time.monotonic()
        wait_for(lambda: ours(box) == [], RELEASE_S, interval=0.05,
                 message=lambda: f"still blocked {time.monotonic() - ended:.2f} s after the "
                                 f"job ended: {inhibitors(box)}")
        assert box.run("sh", "-c", f"cat {MARKER} 2>/dev/null || :").stdout == ""  # never signalled

        journal = box.suspend()
        assert box.power_state().splitlines()[0] == "mem", journal[-3000:]
    assert box.unit_active(WATCH)
    assert "Traceback" not in box.run("journalctl", "-u", WATCH, "-o", "cat").stdout

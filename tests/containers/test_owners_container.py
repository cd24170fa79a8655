"""Every shape a job runs in under a real systemd: each holder gets the drain signal itself.

One booted container for the module (tests/helpers/systemd_harness.py), one
real ``systemctl suspend`` for the whole matrix and one for its veto:

- ``KillMode=control-group``, ``mixed``, ``process``, ``none``, each a
  torchrun-like launcher (tests/helpers/launcher.py) whose two workers hold
  the node and exit 0.5 s after SIGINT, and which exits with them; all
  ``Restart=always``: a stop job would have signalled the launcher only;
- a cron-like launcher (``KillMode=process``): it holds nothing and
  outlives its job, so it must be left running;
- a hardened unit with an escaped name (``DynamicUser=``,
  ``ProtectSystem=strict``, ``PrivateTmp=``), ``TimeoutStopSec=`` shorter
  than ``[drain] timeout_s``;
- a transient unit (``systemd-run -p Restart=always``), made again after resume.

A sleep hook sorted before the guard's records, at the moment systemd-sleep
runs, how many processes hold the node and each unit's state.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO
from helpers.systemd_harness import Container, at_sleep_hook, guard_config, unavailable_reason
from helpers.wait import wait_for

from suspendguard.supervise.managers import LEFT_RUNNING_FILE

pytestmark = [
    pytest.mark.systemd,
    pytest.mark.root,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

# The system's interpreter: a DynamicUser= unit may not enter the checkout's venv.
PYTHON = "/usr/bin/python3"
HOLDER = str(REPO / "tests" / "helpers" / "holder.py")
# The hardened unit runs with PrivateTmp=, so a checkout under /tmp (as in CI)
# is not visible to it: it gets a copy in the container's own /opt.
HARD_HOLDER = "/opt/suspendguard-own/holder.py"
LAUNCHER = str(REPO / "tests" / "helpers" / "launcher.py")
NODE = "/dev/suspendguard-own/accel0"
NODE_RDEV = "1 5"  # /dev/zero's number: not the 1:7, 1:8, 1:9 of the other modules
MARKS = "/run/suspendguard-own"  # one marker per unit: who got which signal
SEEN = "/run/suspendguard-own-at-sleep.log"
STATE_DIR = "/var/lib/suspendguard-own"
TIMEOUT_S = 4.0
CONFIG = guard_config(NODE, state_dir=STATE_DIR, timeout_s=TIMEOUT_S)

TORCHRUN = {f"sv-{mode}.service": mode for mode in ("control-group", "mixed", "process", "none")}
CRON = "sv-cron.service"
HARD = "sv\\x2dhard.service"  # systemd-escape: "sv-hard" as a path component
ADHOC = "sv-adhoc.service"
UNITS = (*TORCHRUN, CRON, HARD, ADHOC)
WORKERS = {**dict.fromkeys(TORCHRUN, 2), CRON: 1, HARD: 1, ADHOC: 1}


def marker(unit: str) -> str:
    return f"{MARKS}/{unit.replace(chr(92), '_')}.log"


def launcher_unit(unit: str, shape: str, kill_mode: str, restart: str) -> str:
    return (f"[Service]\nRestart={restart}\nRestartSec=100ms\nKillMode={kill_mode}\n"
            f"ExecStart={PYTHON} {LAUNCHER} --node {NODE} --shape {shape} "
            f"--marker {marker(unit)}\n")


HARD_UNIT = (f"[Service]\nRestart=always\nRestartSec=100ms\nDynamicUser=yes\n"
             f"ProtectSystem=strict\nPrivateTmp=yes\nReadWritePaths={MARKS}\nTimeoutStopSec=1s\n"
             f"ExecStart={PYTHON} {HARD_HOLDER} --node {NODE} --delay 0.5 "
             f"--marker {marker(HARD)}\n")
# Runs inside systemd-sleep, after the veto unit, just before the state is written.
AT_SLEEP = at_sleep_hook(NODE, SEEN, f"""echo "held=$held" >> {SEEN}
for u in {' '.join(u.replace(chr(92), chr(92) * 2) for u in UNITS)}; do
    echo "$u $(systemctl is-active "$u")" >> {SEEN}
done
echo "hard-timeout $(systemctl show -p TimeoutStopUSec --value '{HARD}')" >> {SEEN}""")


@pytest.fixture(scope="module")
def box() -> Iterator[Container]:
    with Container(REPO) as container:
        container.sh(f"mkdir -p {Path(NODE).parent} && mknod -m 666 {NODE} c {NODE_RDEV}")
        held = container.sh("ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c ' -> /dev/zero$' || :")
        assert held.stdout.strip() == "0", "something in the container holds /dev/zero"
        container.write("/etc/suspendguard/config.toml", CONFIG)
        container.suspendguard("install", "--force")
        hook = container.hooks / "00-at-sleep"
        hook.write_text(AT_SLEEP)
        hook.chmod(0o755)
        for unit, mode in TORCHRUN.items():
            container.write(f"/etc/systemd/system/{unit}",
                            launcher_unit(unit, "torchrun", mode, "always"))
        container.write(f"/etc/systemd/system/{CRON}",
                        launcher_unit(CRON, "cron", "process", "on-failure"))
        container.sh(f"mkdir -p -m 755 {Path(HARD_HOLDER).parent} && "
                     f"install -m 644 {HOLDER} {HARD_HOLDER}")
        container.write(f"/etc/systemd/system/{HARD}", HARD_UNIT)
        container.run("systemctl", "daemon-reload")
        yield container


@pytest.fixture
def matrix(box: Container) -> Iterator[Container]:
    """Every unit running, each holder ready; all stopped after the test."""
    box.reset_power()
    box.sh(f"rm -rf {MARKS} {SEEN} && mkdir -m 1777 {MARKS}")
    cursor = box.cursor()
    for unit in UNITS:
        if unit == ADHOC:
            box.run("systemd-run", f"--unit={ADHOC}", "-p", "Restart=always",
                    "-p", "RestartSec=100ms", "-p", "Environment=SG_TAG=adhoc",
                    "-p", "WorkingDirectory=/tmp", "--", PYTHON, HOLDER, "--node", NODE,
                    "--delay", "0.5", "--marker", marker(ADHOC))
        else:
            box.run("systemctl", "start", unit)
    for unit in UNITS:
        box.wait_journal(cursor, r"\bready\b", args=("-u", unit, "-o", "cat"))
    yield box
    for unit in (*UNITS, "sv-slow.service"):
        # KillMode=process and none leave the workers behind a stop: end them all.
        box.run("systemctl", "kill", "--kill-whom=all", "--signal=SIGKILL", unit, check=False)
        box.run("systemctl", "stop", unit, check=False)
        box.run("systemctl", "reset-failed", unit, check=False)


def prop(box: Container, unit: str, name: str) -> str:
    return box.run("systemctl", "show", "-p", name, "--value", unit).stdout.strip()


def sigints(box: Container, unit: str) -> int:
    out = box.run("cat", marker(unit), check=False).stdout
    return sum(1 for line in out.splitlines() if line.endswith(" SIGINT"))


def attempt(box: Container) -> dict[str, Any]:
    out = json.loads(box.suspendguard("history", "--json", "-n", "3").stdout)["attempts"]
    found: dict[str, Any] = next(a for a in out if a["origin"] == "unit")
    return found


def wait_all_active(box: Container, units: tuple[str, ...], timeout: float = 20.0) -> list[str]:
    """The units not active within ``timeout``."""
    def down() -> list[str]:
        return [u for u in units if not box.unit_active(u)]

    wait_for(lambda: not down(), timeout, interval=0.2)
    return down()


def test_a_launcher_left_running_and_stopped_by_hand_after_the_drain_stays_down(
        box: Container) -> None:
    """The drain leaves a cron-like launcher running, its marker in place; an operator's
    ``systemctl stop`` after that removes no marker (no start ran), and systemd keeps no
    trace of who stopped it but when: its ``InactiveEnterTimestampMonotonic``, kept while the unit
    is loaded (enabled, as cron.service is), which restore asks for."""
    unit = "sv-cron-kept.service"
    box.write(f"/etc/systemd/system/{unit}", launcher_unit(unit, "cron", "process", "on-failure")
              + "[Install]\nWantedBy=multi-user.target\n")
    box.run("systemctl", "daemon-reload")
    box.run("systemctl", "enable", unit)
    try:
        cursor = box.cursor()
        box.run("systemctl", "start", unit)
        box.wait_journal(cursor, r"\bready\b", args=("-u", unit, "-o", "cat"))
        pid = box.run("systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
        drained = box.suspendguard("drain", "--yes", "--json", check=False)
        assert json.loads(drained.stdout)["verdict"] == "allow", drained.stdout
        box.wait_journal(cursor, r"job ended", args=("-u", unit, "-o", "cat"))
        assert box.unit_active(unit)  # the launcher, left running
        assert box.run("systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip() == pid
        # The drain's end saw it running; the stop below comes a minute after that, not as a
        # launcher that noticed its job's end would go down.
        left = f"{STATE_DIR}/{LEFT_RUNNING_FILE}"
        [(key, [stopped, seen, boot])] = json.loads(box.run("cat", left).stdout).items()
        assert key == f"systemd-service:{unit}"
        box.write(left, json.dumps({key: [stopped, seen - 60, boot]}))
        box.run("systemctl", "stop", unit)  # the operator's, before restore
        wait_for(lambda: not box.unit_active(unit), 10)

        restored = box.suspendguard("restore", "--json", check=False)
        [done] = json.loads(restored.stdout)["restored"]
        assert restored.returncode == 0, restored.stderr
        assert done["result"] == "skipped", done
        assert "was stopped by someone else after the drain" in done["why"], done
        assert not box.unit_active(unit)  # as the operator left it
    finally:
        box.run("systemctl", "disable", "--now", unit, check=False)


def test_every_holder_is_signalled_the_launcher_kept_and_all_back_after_resume(
        matrix: Container) -> None:
    box = matrix
    cron_pid = prop(box, CRON, "MainPID")
    check = box.suspendguard("check", "--dry-run").stdout
    assert f"started by systemd service {CRON}" in check, check
    assert f"run by systemd service {HARD}" in check, check
    assert "a transient unit (systemd-run): made again after resume" in check, check

    journal = box.suspend()
    assert box.power_state().startswith("mem"), journal
    seen = box.run("cat", SEEN).stdout.splitlines()
    states = dict(line.split(" ", 1) for line in seen[1:])
    assert seen[0] == "held=0", seen  # nothing held the node while the machine slept
    for unit in (*TORCHRUN, HARD, ADHOC):
        assert states[unit] in ("inactive", "failed"), seen  # down, not restarted
    assert states[CRON] == "active", seen  # the launcher was left running
    assert states["hard-timeout"] == f"{TIMEOUT_S + 1:g}s", seen  # raised for the drain
    for unit in UNITS:  # every holder, worker or not, got the signal itself, once
        assert sigints(box, unit) == WORKERS[unit], (unit, box.run("cat", marker(unit)).stdout)

    a = attempt(box)
    assert a["verdict"] == "allow", a
    assert {h["outcome"]["kind"] for h in a["holders"]} == {"exited"}, a["holders"]
    assert len(a["holders"]) == sum(WORKERS.values())
    results = {s["name"]: (s["result"], s["why"]) for s in a["stopped"]}
    assert results[CRON][0] == "skipped" and "still running since the drain" in results[CRON][1]
    assert results[ADHOC][0] == "started" and "transient" in results[ADHOC][1], results
    assert {results[u][0] for u in (*TORCHRUN, HARD)} == {"started"}, results
    assert wait_all_active(box, UNITS) == []
    assert prop(box, CRON, "MainPID") == cron_pid  # never stopped
    # each unit with its own settings again: the drain drop-ins are gone
    for unit in TORCHRUN:
        assert prop(box, unit, "Restart") == "always"
        assert prop(box, unit, "KillSignal") == "15"
    assert prop(box, HARD, "TimeoutStopUSec") == "1s"
    assert prop(box, ADHOC, "Restart") == "always"
    assert prop(box, ADHOC, "Environment") == "SG_TAG=adhoc"
    assert prop(box, ADHOC, "WorkingDirectory") == "/tmp"


def test_after_a_veto_every_shape_runs_again_at_once(matrix: Container) -> None:
    box = matrix
    cron_pid = prop(box, CRON, "MainPID")
    cursor = box.cursor()
    # takes SIGINT, then sleeps on past [drain] timeout_s: the veto
    box.run("systemd-run", "--unit=sv-slow.service", "--", PYTHON, HOLDER, "--node",
            NODE, "--mode", "slow", "--marker", marker("sv-slow.service"))
    box.wait_journal(cursor, r"\bready\b", args=("-u", "sv-slow.service", "-o", "cat"))
    journal = box.suspend()
    assert box.power_state() == "freeze mem disk\n", journal
    a = attempt(box)
    assert a["verdict"] == "veto", a
    assert any("sv-slow.service" in r for r in a["reasons"]), a["reasons"]
    for unit in UNITS:
        assert sigints(box, unit) == WORKERS[unit], unit
    assert wait_all_active(box, UNITS) == [], a["stopped"]
    assert prop(box, CRON, "MainPID") == cron_pid
    assert prop(box, ADHOC, "Environment") == "SG_TAG=adhoc"


def test_a_hardened_unit_started_by_an_operator_meanwhile_is_not_started_again(
        box: Container) -> None:
    # The marker's ExecStartPre= runs as root whatever the unit's sandbox:
    # under DynamicUser= and ProtectSystem=strict a plain "-/bin/rm" failed
    # silently, and restore started what the operator had stopped.
    box.reset_power()
    box.sh(f"rm -rf {MARKS} {SEEN} && mkdir -m 1777 {MARKS}")
    cursor = box.cursor()
    box.run("systemctl", "start", HARD)
    box.wait_journal(cursor, r"\bready\b", args=("-u", HARD, "-o", "cat"))
    operator = box.hooks / "01-operator"
    operator.write_text(f"#!/bin/sh\n[ \"$1\" = pre ] || exit 0\nsystemctl start '{HARD}'; "
                        f"sleep 0.5; systemctl stop '{HARD}'\n")
    operator.chmod(0o755)
    try:
        journal = box.suspend()
    finally:
        operator.unlink()
        box.run("systemctl", "stop", HARD, check=False)
    assert box.power_state().startswith("mem"), journal
    [stop] = attempt(box)["stopped"]
    assert stop["result"] == "skipped" and "someone else" in stop["why"], stop
    assert not box.unit_active(HARD)


"""The guard under a real systemd and logind: systemd-nspawn, fake /sys/power.

One container is booted for the module (about two seconds here); every
scenario asks for a real sleep with ``systemctl suspend`` (or ``hibernate``)
and logind, sleep.target, the veto unit, systemd-sleep and the hooks all run
for real. Only the last step differs: systemd-sleep writes "mem" (or "disk")
into a plain file bound at /sys/power instead of putting the machine to
sleep. See tests/systemd_harness.py for how the container is proven safe
before anything asks it to sleep.

The test jobs are transient system services inside the container
(systemd-run) holding a device node made with mknod (rdev 1:8), running
tests/helpers/holder.py: "graceful" exits on KeyboardInterrupt, "deaf" ignores
SIGINT (signal.SIG_IGN), and each signal a job handles is appended to a marker
file.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO
from helpers.systemd_harness import Boot, Container, HarnessError, container_marks, guard_config

pytestmark = container_marks()

NODE = "/dev/suspendguard-test/accel0"  # /run is nodev in the container: /dev is not
# 1:8 (as /dev/random): a node the container's device policy lets a job open,
# and not the 1:7 the other tests use: a guard running on the host sees the
# container's processes too, and matches nodes by rdev, so a shared number
# would let another test's guard signal these jobs (seen: a SIGINT out of nowhere).
NODE_RDEV = "1 8"
MARKER = "/run/suspendguard-test/signals.log"
LOG_DIR = "/var/log/suspendguard-test"
STATE_DIR = "/var/lib/suspendguard-test-state"  # not the default: ReadWritePaths= must work
DEADLINE_S = 20
CONFIG = guard_config(NODE, state_dir=STATE_DIR, deadline_s=DEADLINE_S, log_dir=LOG_DIR)
NVIDIA_LOG = "/run/suspendguard-test/nvidia.log"
# Shaped like the NVIDIA driver's own unit (Before= and RequiredBy= the sleep
# step), standing in for it: the GPU's preparation must come after the drain
# and must not happen at all when the guard vetoes.
NVIDIA_SUSPEND = f"""\
[Unit]
Description=NVIDIA system suspend actions (test stand-in)
Before=systemd-suspend.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo suspend >> {NVIDIA_LOG}'

[Install]
RequiredBy=systemd-suspend.service
"""
SUSPEND_FAILED = r"Dependency failed for \S*\s*-?\s*System Suspend"
HIBERNATE_FAILED = r"Dependency failed for \S*\s*-?\s*System Hibernate"
SHARED = "/run/suspendguard-shared"  # a folder its group may change: 0775


@pytest.fixture(scope="module")
def box(boot: Boot) -> Container:
    container = boot(NODE, NODE_RDEV, "/run/suspendguard-test", LOG_DIR, unheld="/dev/random")
    container.write("/etc/systemd/system/nvidia-suspend.service", NVIDIA_SUSPEND)
    container.run("systemctl", "daemon-reload")
    container.run("systemctl", "enable", "nvidia-suspend.service")
    return container


@pytest.fixture(scope="module")
def installed(box: Container) -> Container:
    box.install(CONFIG)
    return box


@pytest.fixture
def clean(installed: Container) -> Iterator[Container]:
    """Each scenario starts from an untouched /sys/power and no marker, and stops its jobs."""
    with installed.cleaned(MARKER, NVIDIA_LOG) as box:
        yield box


start_holder = functools.partial(Container.start_holder, node=NODE, marker=MARKER)


def signals(box: Container) -> list[str]:
    return box.run("sh", "-c", f"cat {MARKER} 2>/dev/null || :").stdout.splitlines()


def nvidia_ran(box: Container) -> list[str]:
    return box.run("sh", "-c", f"cat {NVIDIA_LOG} 2>/dev/null || :").stdout.splitlines()


def history(box: Container) -> list[dict[str, Any]]:
    out = box.suspendguard("history", "--json", "-n", "5").stdout
    attempts: list[dict[str, Any]] = json.loads(out)["attempts"]
    return attempts


def newest_unit_attempt(box: Container, action: str) -> dict[str, Any]:
    for attempt in history(box):
        if attempt["origin"] == "unit" and attempt["action"] == action:
            return attempt
    raise AssertionError(f"no attempt of the unit for {action} in {history(box)}")


def phases(attempt: dict[str, Any]) -> list[str]:
    return [e["phase"] for e in attempt["events"]]


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


# --- the harness itself -----------------------------------------------------------


def test_harness_fake_power_and_logind(box: Container) -> None:
    """Proves the harness before the guard is in: a real suspend lands in the plain file."""
    assert box.run("stat", "-f", "-c", "%T", "/sys/power/state").stdout.strip() != "sysfs"
    assert box.can("Suspend") == "yes"
    box.reset_power()
    journal = box.suspend()
    assert "Entering sleep state 'suspend'" in journal
    assert first_line(box.power_state()) == "mem"
    box.reset_power()


class _Decoy(Container):
    """Binds another folder with the same files at /sys/power: as if the bind were wrong."""

    def command_line(self) -> list[str]:
        decoy = self.workdir / "decoy"
        decoy.mkdir()
        for name in ("state", "mem_sleep", "disk"):
            (decoy / name).write_text((self.power / name).read_text())
        return [a.replace(f"--bind={self.power}:", f"--bind={decoy}:")
                for a in super().command_line()]


def test_boot_refuses_without_the_fake_power() -> None:
    box = _Decoy(REPO)
    with pytest.raises(HarnessError, match="refusing to run"), box:
        pass
    assert box.proc is None and not box.workdir.exists()


# --- installed for real ---------------------------------------------------------------


def test_install_inside(installed: Container) -> None:
    box = installed
    state = json.loads(box.run(sys.executable, "-c",
                               "import json; from suspendguard.install.installed import read_installation;"
                               " print(json.dumps(read_installation().to_json()))").stdout)
    assert state["installed"], state
    assert state["unit"]["timeout_start_s"] == DEADLINE_S + 20
    # systemctl enable made from RequiredBy=systemd-%i.service the links install expects
    for action in ("suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate"):
        assert box.run("systemctl", "is-enabled", f"suspendguard@{action}.service").stdout.strip() \
            == "enabled"
    deps = box.run("systemctl", "show", "-p", "Requires", "-p", "After",
                   "systemd-suspend.service").stdout
    assert "suspendguard@suspend.service" in deps
    assert box.run("test", "-d", STATE_DIR, check=False).returncode == 0


def test_graceful_job_is_drained_and_the_suspend_goes_on(clean: Container) -> None:
    box = clean
    pid = start_holder(box, "graceful", "graceful")
    journal = box.suspend()
    assert first_line(box.power_state()) == "mem", journal
    assert f"{pid} SIGINT" in signals(box)
    finished = journal.index("Finished suspendguard@suspend.service")
    assert finished < journal.index("Starting nvidia-suspend.service"), journal
    assert nvidia_ran(box) == ["suspend"]
    attempt = newest_unit_attempt(box, "suspend")
    assert attempt["verdict"] == "allow", attempt
    # a transient unit (systemd-run) is gone once drained: restore made it again
    assert [(st["name"], st["result"]) for st in attempt["stopped"]] == \
        [("sg-test-graceful.service", "started")], attempt["stopped"]
    [holder] = [h for h in attempt["holders"] if h["pid"] == pid] or [attempt]
    assert holder["action"] == "drain" and holder["outcome"]["kind"] == "exited", (
        json.dumps(attempt, indent=1) + journal)
    assert "pre" in phases(attempt) and "post" in phases(attempt), attempt["events"]


def test_deaf_job_vetoes_and_nobody_is_signalled(clean: Container) -> None:
    box = clean
    graceful = start_holder(box, "bystander", "graceful")
    deaf = start_holder(box, "deaf", "deaf")
    journal = box.suspend()
    assert re.search(SUSPEND_FAILED, journal), journal
    assert "Entering sleep state" not in journal  # systemd-sleep never ran
    assert box.power_state() == "freeze mem disk\n"
    assert box.unit_active("sg-test-bystander.service")
    assert box.unit_active("sg-test-deaf.service")
    assert signals(box) == []  # the graceful job was not signalled either
    assert re.search(r"Dependency failed for nvidia-suspend\.service", journal), journal
    assert nvidia_ran(box) == []  # the GPU was not prepared for a sleep that did not come
    attempt = newest_unit_attempt(box, "suspend")
    assert attempt["verdict"] == "veto", attempt
    assert any(str(deaf) in reason for reason in attempt["reasons"]), attempt["reasons"]
    assert "pre" not in phases(attempt) and "post" not in phases(attempt)
    errors = box.run("journalctl", "-p", "err", "-u", "suspendguard@suspend.service",
                     "--no-pager", "-o", "cat").stdout
    assert re.search(rf"attempt {attempt['id']} \(suspend\): veto: .*{deaf}", errors), errors
    assert graceful != deaf


def test_hwts_busy_during_the_sleep_is_recorded(clean: Container) -> None:
    """A hook sorted before ours writes the device's refusal while "asleep"; post finds it."""
    box = clean
    fake = box.hooks / "00-fake-hwts"
    fake.write_text(
        "#!/bin/sh\n"
        '[ "$1" = pre ] || exit 0\n'
        f"mkdir -p {LOG_DIR}/device-0\n"
        'ts=$(date +%Y-%m-%d-%H:%M:%S.%3N.000)\n'
        'echo "[ERROR] TSCH(-1,null):$ts 1 (dieid:0,cpuid:0) device_management_plat.c:563 '
        'suspend_ack: suspend pre check fail, hwts is busy" '
        f">> {LOG_DIR}/device-0/device-4242_$(date +%Y%m%d%H%M%S).log\n"
    )
    fake.chmod(0o755)
    try:
        journal = box.suspend()
    finally:
        fake.unlink()
    assert first_line(box.power_state()) == "mem", journal
    attempt = newest_unit_attempt(box, "suspend")
    assert attempt["verdict"] == "allow"
    rules = [f["rule"] for f in attempt["findings"]]
    assert "hwts-busy-suspend" in rules, attempt
    assert "post" in phases(attempt)
    assert "hwts" in journal  # the post step says so in the journal too


def test_a_suspend_asked_while_the_last_restore_ran_gets_its_own_restore(
        clean: Container) -> None:
    """systemd merges the sleep's start of the resume unit into the start job already
    running, the last restore's: that restore had read no stop yet, so this sleep's drained
    job stays down unless the hook's post queues the unit again. Here the last restore holds
    the guard lock 3 s after its run (flock, as a slow check after resume does), and the
    veto unit waits for it."""
    box = clean
    dropin = "/run/systemd/system/suspendguard-resume.service.d/slow.conf"
    held = "/run/suspendguard-test/restore-holds-the-lock"
    box.write(dropin, f"[Service]\nExecStartPost=/usr/bin/flock {STATE_DIR}/guard.lock "
                      f"sh -c 'touch {held}; sleep 3'\n")
    box.run("systemctl", "daemon-reload")
    try:
        start_holder(box, "graceful", "graceful")
        box.run("systemctl", "start", "--no-block", "suspendguard-resume.service")
        box.sh(f"for i in $(seq 100); do [ -e {held} ] && exit 0; sleep 0.1; done; exit 1")
        journal = box.suspend()
    finally:
        box.run("rm", "-f", dropin, held)
        box.run("systemctl", "daemon-reload")
    assert first_line(box.power_state()) == "mem", journal
    attempt = newest_unit_attempt(box, "suspend")
    assert attempt["verdict"] == "allow", attempt
    assert [(st["name"], st["result"]) for st in attempt["stopped"]] == \
        [("sg-test-graceful.service", "started")], (attempt["stopped"], journal)


def test_hibernate_through_the_same_guard(clean: Container) -> None:
    """``systemctl hibernate`` itself, through logind, not ``systemctl start hibernate.target``.

    logind refuses to hibernate without swap, and a real swapon would change
    the host kernel: the harness binds a /proc/swaps listing an unused block
    node into systemd-logind and systemd-hibernate only (fake_swap), so
    logind says CanHibernate "yes" and systemd-sleep writes "disk" into the
    fake state file.
    """
    box = clean
    box.fake_swap()
    pid = start_holder(box, "hib-graceful", "graceful")
    journal = box.suspend("hibernate")
    assert first_line(box.power_state()) == "disk", journal
    assert "Finished suspendguard@hibernate.service" in journal
    assert f"{pid} SIGINT" in signals(box)
    attempt = newest_unit_attempt(box, "hibernate")
    assert attempt["verdict"] == "allow"
    assert "pre" in phases(attempt) and "post" in phases(attempt)

    box.reset_power()
    start_holder(box, "hib-deaf", "deaf")
    journal = box.suspend("hibernate")
    assert re.search(HIBERNATE_FAILED, journal), journal
    assert box.power_state().startswith("freeze mem disk")
    assert newest_unit_attempt(box, "hibernate")["verdict"] == "veto"


def test_hybrid_sleep_through_the_same_guard(clean: Container) -> None:
    box = clean
    box.fake_swap()
    pid = start_holder(box, "hybrid-graceful", "graceful")
    journal = box.suspend("hybrid-sleep")
    assert first_line(box.power_state()) == "disk", journal
    assert first_line((box.power / "disk").read_text()) == "suspend"
    assert f"{pid} SIGINT" in signals(box)
    assert newest_unit_attempt(box, "hybrid-sleep")["verdict"] == "allow"


def test_suspend_command_reports_an_allowed_sleep(clean: Container) -> None:
    """``suspendguard suspend`` through the real logind and systemd: it slept, and says when."""
    box = clean
    pid = start_holder(box, "cmd-graceful", "graceful")
    result = box.suspendguard("suspend", check=False)
    assert result.returncode == 0, result.stdout + result.stderr + box.log_tail()
    assert first_line(box.power_state()) == "mem"
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (UTC|[+-]\d{4})"
    assert re.match(f"suspended at {stamp}, resumed at {stamp}", result.stdout), result.stdout
    attempt = newest_unit_attempt(box, "suspend")
    assert f"attempt {attempt['id']}: the guard allowed it, 1 holder(s) drained" in result.stdout
    assert f"{pid} SIGINT" in signals(box)
    box.wait_idle()


def test_suspend_command_reports_a_veto(clean: Container) -> None:
    """Where ``systemctl suspend`` says nothing and exits 0, ``suspendguard suspend`` exits 1."""
    box = clean
    deaf = start_holder(box, "cmd-deaf", "deaf")
    result = box.suspendguard("suspend", check=False)
    assert result.returncode == 1, result.stdout + result.stderr + box.log_tail()
    assert box.power_state() == "freeze mem disk\n"
    assert result.stdout.startswith(f"vetoed: pid {deaf} "), result.stdout
    assert "SIGINT" in first_line(result.stdout)
    assert newest_unit_attempt(box, "suspend")["verdict"] == "veto"
    assert box.unit_active("sg-test-cmd-deaf.service")
    box.wait_idle()


def test_unit_settings_as_systemd_loaded_them(installed: Container) -> None:
    props = installed.run("systemctl", "show", "suspendguard@suspend.service", "-p",
                          "TimeoutStartUSec", "-p", "ProtectSystem", "-p", "Type",
                          "-p", "RequiredBy", "-p", "Before", "-p", "ExecStart").stdout
    assert f"TimeoutStartUSec={DEADLINE_S + 20}s" in props
    assert "ProtectSystem=strict" in props and "Type=oneshot" in props
    assert re.search(r"^RequiredBy=.*\bsystemd-suspend\.service", props, re.M)
    assert re.search(r"^RequiredBy=.*\bnvidia-suspend\.service", props, re.M)
    assert re.search(r"^Before=.*\bsystemd-suspend\.service", props, re.M)
    assert re.search(r"^Before=.*\bnvidia-suspend\.service", props, re.M)
    assert f"path={sys.executable} ; argv[]={sys.executable} -I -m suspendguard pre-sleep suspend" \
        in props
    # The resume unit waits for NVIDIA's resume where it exists; here it does not, and
    # systemd loads the ordering all the same.
    resume = installed.run("systemctl", "show", "suspendguard-resume.service", "-p", "After",
                           "-p", "LoadState").stdout
    assert "LoadState=loaded" in resume
    assert re.search(r"^After=.*\bnvidia-resume\.service", resume, re.M), resume


def test_an_interpreter_others_could_change_is_refused_and_reported(
        installed: Container) -> None:
    """Root runs the units' interpreter at every suspend: a live install refuses one that a
    group may replace (exit 4, one line), --force takes it with one warning line, and
    doctor reports the installed one."""
    box = installed
    venv = Path(sys.executable).parent.parent  # bound read-only at its own path
    if not (venv / "pyvenv.cfg").is_file():
        pytest.skip("the suite does not run in a virtual environment")
    box.sh(f"mkdir -m 0775 {SHARED} && ln -s {venv} {SHARED}/venv")
    python = f"{SHARED}/venv/bin/python"
    why = f"the units' interpreter {python} ({SHARED}): group-writable (mode 0775)"
    try:
        refused = box.suspendguard("install", "--python", python, check=False)
        assert (refused.returncode, refused.stdout) == (4, ""), refused.stderr
        assert refused.stderr.count("\n") == 1 and why in refused.stderr, refused.stderr
        unit = box.run("cat", "/etc/systemd/system/suspendguard@.service").stdout
        assert f"ExecStart={sys.executable} -I " in unit  # nothing changed

        forced = box.suspendguard("install", "--force", "--python", python)
        assert [line for line in forced.stderr.splitlines() if python in line] == [
            f"suspendguard: install: warning: {why}: root runs it at every suspend, so "
            "whoever can change it runs as root; install the guard into an interpreter only "
            "root can change (root's pip, a system package)"], forced.stderr
        doctor = json.loads(box.suspendguard("doctor", "--json", check=False).stdout)
        [found] = [f for f in doctor["findings"] if f["id"] == "guard-interpreter-untrusted"]
        assert found["severity"] == "error" and found["text"].startswith(why), found
        assert python in found["fix"], found
    finally:
        box.suspendguard("install", "--force")
        box.sh(f"rm -rf {SHARED}")


def test_uninstall_live(installed: Container) -> None:
    """Last: uninstall from the running system, then the suspend no longer runs the guard."""
    box = installed
    box.reset_power()
    out = box.suspendguard("uninstall").stdout
    assert "removed /etc/systemd/system/suspendguard@.service" in out
    for action in ("suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate"):
        assert box.run("systemctl", "is-enabled", f"suspendguard@{action}.service",
                       check=False).returncode != 0
        assert "suspendguard" not in box.run("systemctl", "show", "-p", "Requires",
                                             f"systemd-{action}.service").stdout
    assert box.run("test", "-e", "/usr/lib/systemd/system-sleep/suspendguard",
                   check=False).returncode != 0
    box.sh(f"rm -f {NVIDIA_LOG}")
    journal = box.suspend()
    assert "suspendguard@" not in journal and first_line(box.power_state()) == "mem"
    # no link left behind: nvidia-suspend.service would fail on a removed unit, and the suspend
    assert nvidia_ran(box) == ["suspend"], journal
    # the config and the history stay, until --purge
    assert box.run("test", "-f", "/etc/suspendguard/config.toml", check=False).returncode == 0
    assert history(box)
    box.suspendguard("uninstall", "--purge")
    assert box.run("test", "-e", "/etc/suspendguard/config.toml", check=False).returncode != 0
    assert box.run("test", "-e", STATE_DIR, check=False).returncode != 0
    box.reset_power()

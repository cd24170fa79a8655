"""``suspendguard doctor`` on fixture hosts: every finding on a host that has it, none on a clean one."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.runners import cli

from suspendguard.config import DEFAULT_STATE_DIR, Config, build
from suspendguard.doctor.checks import doctor
from suspendguard.doctor.host import Host, timespan_s
from suspendguard.doctor.units import health_budget_s, unusable_interpreter
from suspendguard.install import templates
from suspendguard.install.interpreter import probe
from suspendguard.model import SLEEP_ACTIONS, Unavailable

CONFIG = build({})
GiB = 1024 * 1024 * 1024


def write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def link(root: Path, relative: str, target: str = "/dev/null") -> None:
    path = root / relative.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def clean_host(root: Path) -> Path:
    """A host set up right: the guard installed for every sleep kind, NVIDIA's units and
    preservation together, swap and a resume device for hibernation, Ascend's daemons."""
    unit = f"[Service]\nTimeoutStartSec={templates.timeout_start_s(CONFIG)}\n"
    write(root, templates.UNIT_PATH, unit)
    write(root, templates.RESUME_PATH, f"[Service]\nTimeoutStartSec={health_budget_s(CONFIG) + 60}\n")
    for action in SLEEP_ACTIONS:
        link(root, templates.enable_link(action), templates.UNIT_PATH)
    write(root, "proc/driver/nvidia/params",
          'ResmanDebugLevel: 4294967295\nPreserveVideoMemoryAllocations: 1\n'
          f'TemporaryFilePath: "{root / "var/tmp"}"\n'.replace(str(root), ""))
    (root / "var/tmp").mkdir(parents=True)
    for unit_name, target in (("nvidia-suspend.service", "systemd-suspend.service"),
                              ("nvidia-resume.service", "systemd-suspend.service"),
                              ("nvidia-hibernate.service", "systemd-hibernate.service")):
        link(root, f"etc/systemd/system/{target}.wants/{unit_name}")
    write(root, "sys/power/state", "freeze mem disk\n")
    write(root, "sys/power/resume", "8:2\n")
    write(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1\n")
    write(root, "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 12000000 kB\n"
                                "SwapTotal: 8000000 kB\n")
    write(root, "usr/lib/systemd/system/fine.service",
          "[Unit]\nDefaultDependencies=no\nBefore=sleep.target\n[Service]\nType=oneshot\n")
    write(root, "etc/systemd/logind.conf.d/10-delay.conf", "[Login]\nInhibitDelayMaxSec=30\n")
    write(root, "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so")
    write(root, "usr/local/Ascend/driver/version.info", "Version=24.1.0\n")
    write(root, "proc/101/comm", "dmp_daemon\n")
    write(root, "proc/102/comm", "slogd\n")
    return root


def ids(root: Path, vram_mb: float | None = 1.0) -> list[str]:
    return [f.id for f in doctor(Host(str(root)), CONFIG, vram_mb)]


def test_clean_host_has_no_finding(tmp_path: Path) -> None:
    assert ids(clean_host(tmp_path)) == []


def _no_units(root: Path) -> None:
    for wants in (root / "etc/systemd/system").glob("*.wants/nvidia-*"):
        wants.unlink()
    (root / "etc/systemd/system/systemd-hibernate.service.wants").rmdir()


def _modprobe_preserve_only(root: Path) -> None:
    (root / "proc/driver/nvidia/params").unlink()
    write(root, "etc/modprobe.d/nvidia-power.conf",
          "options nvidia NVreg_PreserveVideoMemoryAllocations=1\n")
    (root / "etc/systemd/system/systemd-suspend.service.wants/nvidia-resume.service").unlink()


def _modprobe_preserve_for_nvidia_current(root: Path) -> None:
    # Debian's driver: the module is nvidia-current, and its options file names it so.
    _modprobe_preserve_only(root)
    write(root, "etc/modprobe.d/nvidia-power.conf",
          "options nvidia-current NVreg_PreserveVideoMemoryAllocations=1\n")


def test_an_unreadable_modprobe_file_is_passed_over(tmp_path: Path) -> None:
    # A dangling link or a folder in modprobe.d, as modprobe itself passes them over:
    # the other files are still read, and doctor (and status, which runs it) go on.
    root = clean_host(tmp_path)
    link(root, "etc/modprobe.d/00-gone.conf", str(tmp_path / "gone.conf"))
    (root / "etc/modprobe.d/01-folder.conf").mkdir()
    _modprobe_preserve_only(root)
    assert ids(root) == ["nvidia-preserve-without-units"]
    code, _, err = cli("doctor", "--root", str(root))
    assert code == 1 and err == ""


def _preserve_off(root: Path) -> None:
    write(root, "proc/driver/nvidia/params", "PreserveVideoMemoryAllocations: 0\n")


def _unit_default_deps(root: Path) -> None:
    write(root, "etc/systemd/system/lock-screen.service",
          "[Unit]\nBefore=sleep.target\n[Service]\nExecStart=/bin/true\n")


def _guard_missing_hibernate(root: Path) -> None:
    (root / templates.enable_link("hibernate").lstrip("/")).unlink()


def _guard_short_timeout(root: Path) -> None:
    write(root, templates.UNIT_PATH, "[Service]\nTimeoutStartSec=60\n")


def _resume_short_timeout(root: Path) -> None:
    write(root, templates.RESUME_PATH, "[Service]\nTimeoutStartSec=1min\n")


def _guard_dropin_shortens_one_instance(root: Path) -> None:
    write(root, f"run/systemd/system/{templates.instance('hibernate')}.d/50-short.conf",
          "[Service]\nTimeoutStartSec=1min 30s\n")


def _guard_dropin_timeout_sec(root: Path) -> None:
    # TimeoutSec= sets the start timeout too; a later TimeoutStartSec= would win over it.
    write(root, f"etc/systemd/system/{templates.UNIT_TEMPLATE}.d/30-both.conf",
          "[Service]\nTimeoutStartSec=900\nTimeoutSec=30\n")


def _resume_dropin_overridden_by_a_later_name(root: Path) -> None:
    budget = health_budget_s(CONFIG)
    write(root, f"etc/systemd/system/{templates.RESUME_UNIT}.d/10-long.conf",
          f"[Service]\nTimeoutStartSec={budget + 60}\n")
    write(root, f"usr/lib/systemd/system/{templates.RESUME_UNIT}.d/20-short.conf",
          "[Service]\nTimeoutStartSec=30s\n")


def _resume_dropin_outside_its_section(root: Path) -> None:
    # systemd ignores an assignment before any section header: the short timeout stands.
    _resume_short_timeout(root)
    write(root, f"etc/systemd/system/{templates.RESUME_UNIT}.d/override.conf",
          f"TimeoutStartSec={health_budget_s(CONFIG) + 60}\n")


def _timeouts_of_zero(root: Path) -> None:
    # TimeoutStartSec=0 is no limit, as TimeoutSec=0 is.
    write(root, f"etc/systemd/system/{templates.UNIT_TEMPLATE}.d/none.conf",
          "[Service]\nTimeoutStartSec=0\n")
    write(root, f"etc/systemd/system/{templates.RESUME_UNIT}.d/none.conf",
          "[Service]\nTimeoutSec=0\n")


def _instance_masked(root: Path) -> None:
    link(root, f"etc/systemd/system/{templates.instance('hibernate')}", "/dev/null")


def _instance_masked_at_runtime_by_an_empty_file(root: Path) -> None:
    write(root, f"run/systemd/system/{templates.instance('suspend')}", "")


def _unit_gone_links_left(root: Path) -> None:
    (root / templates.UNIT_PATH.lstrip("/")).unlink()


def _unit_never_installed(root: Path) -> None:
    _unit_gone_links_left(root)
    for action in SLEEP_ACTIONS:
        (root / templates.enable_link(action).lstrip("/")).unlink()


def _resume_masked(root: Path) -> None:
    (root / templates.RESUME_PATH.lstrip("/")).unlink()
    link(root, templates.RESUME_PATH, "/dev/null")


def _no_resume_unit(root: Path) -> None:
    (root / templates.RESUME_PATH.lstrip("/")).unlink()


def _delay_conflict(root: Path) -> None:
    write(root, "etc/systemd/logind.conf", "[Login]\nInhibitDelayMaxSec=5\n")


def _small_swap(root: Path) -> None:
    write(root, "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 2000000 kB\n"
                                "SwapTotal: 8000000 kB\n")


def _no_resume_device(root: Path) -> None:
    write(root, "sys/power/resume", "0:0\n")


def _no_dmp_daemon(root: Path) -> None:
    (root / "proc/101/comm").unlink()


def _comm_cut_mid_character(root: Path) -> None:
    # The kernel keeps 15 bytes of a name: a Chinese one is cut inside a character.
    (root / "proc/103").mkdir()
    (root / "proc/103/comm").write_bytes("a训练任务六".encode()[:15] + b"\n")


def _systemd_257(root: Path) -> None:
    (root / "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so").unlink()
    write(root, "usr/lib/systemd/libsystemd-shared-257.so")


CASES: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    # NVIDIA's preservation and its units
    "preserve-without-units": (_no_units, ["nvidia-preserve-without-units"]),
    "preserve-from-modprobe-d": (_modprobe_preserve_only, ["nvidia-preserve-without-units"]),
    "preserve-from-debians-module": (_modprobe_preserve_for_nvidia_current,
                                     ["nvidia-preserve-without-units"]),
    "units-without-preserve": (_preserve_off, ["nvidia-units-without-preserve"]),
    # the host's other units and processes
    "unit-before-sleep": (_unit_default_deps, ["unit-before-sleep-default-deps"]),
    "comm-cut-mid-character": (_comm_cut_mid_character, []),
    # the guard's veto unit: enabled, given its time
    "guard-unit-missing": (_guard_missing_hibernate, ["guard-unit-missing"]),
    "guard-timeout-short": (_guard_short_timeout, ["guard-timeout-short"]),
    "guard-dropin-short": (_guard_dropin_shortens_one_instance, ["guard-timeout-short"]),
    "guard-dropin-timeout-sec": (_guard_dropin_timeout_sec, ["guard-timeout-short"]),
    "timeouts-of-zero": (_timeouts_of_zero, []),
    # the veto unit as systemd loads it: a sleep that requires one it cannot load fails
    "guard-instance-masked": (_instance_masked, ["guard-unit-masked"]),
    "guard-instance-empty": (_instance_masked_at_runtime_by_an_empty_file, ["guard-unit-masked"]),
    "guard-unit-gone": (_unit_gone_links_left, ["guard-unit-gone"]),
    "guard-not-installed": (_unit_never_installed, ["guard-not-installed"]),
    # the resume unit
    "resume-timeout-short": (_resume_short_timeout, ["resume-timeout-short"]),
    "resume-dropin-short": (_resume_dropin_overridden_by_a_later_name,
                            ["resume-timeout-short"]),
    "resume-dropin-outside-section": (_resume_dropin_outside_its_section,
                                      ["resume-timeout-short"]),
    "resume-unit-missing": (_no_resume_unit, ["resume-unit-missing"]),
    "resume-unit-masked": (_resume_masked, ["resume-unit-missing"]),
    # logind, hibernation, Ascend, systemd's version
    "inhibit-delay-conflict": (_delay_conflict, ["inhibit-delay-conflict"]),
    "swap-too-small": (_small_swap, ["hibernate-swap-too-small"]),
    "no-resume-device": (_no_resume_device, ["hibernate-no-resume-device"]),
    "ascend-daemon-missing": (_no_dmp_daemon, ["ascend-daemon-missing"]),
    "systemd-257": (_systemd_257, ["systemd-freezes-sessions",
                                   "systemd-block-inhibitors-bind-root"]),
}


@pytest.mark.parametrize("case", CASES)
def test_each_finding_on_a_host_that_has_it(tmp_path: Path, case: str) -> None:
    root = clean_host(tmp_path)
    change, expected = CASES[case]
    change(root)
    assert ids(root) == expected


RULES = build({"policy": {"protect": [{"user": "trainer"}, {"user": "trianer"}],
                          "ignore": [{"user": "1000"}],
                          "drain": [{"user": "ckpt", "timeout_s": 60}]}})


def test_a_rule_naming_a_user_the_host_does_not_know_is_a_finding(tmp_path: Path) -> None:
    """A misspelt protect rule matches no process: its job is drained at the next suspend."""
    root = clean_host(tmp_path)
    write(root, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
          "trainer:x:1001:1001::/home/trainer:/bin/sh\n")
    found = doctor(Host(str(root)), RULES, 1.0)
    assert [(f.id, f.severity, f.text) for f in found] == [
        ("policy-user-unknown", "warning", "[policy] protect #2 (user='trianer') names a user "
         "this host does not know: it matches no process, so the job it should protect is "
         "signalled at the next suspend"),
        ("policy-user-unknown", "warning", "[policy] drain #1 (user='ckpt') names a user this "
         "host does not know: it matches no process, so its jobs get [drain] timeout_s, not "
         "the rule's own")]
    assert found[0].fix.startswith("correct the name (getent passwd trianer finds it")
    write(root, "etc/passwd", "trainer:x:1001:1001::/:/bin/sh\ntrianer:x:1:1::/:/bin/sh\n"
          "ckpt:x:1002:1002::/:/bin/sh\n")
    assert doctor(Host(str(root)), RULES, 1.0) == []


def test_on_this_host_users_are_asked_of_nss() -> None:
    assert Host("/").knows_user("root")
    assert not Host("/").knows_user("sg-no-such-user-x")
    assert not Host("/").knows_user("ro\0ot")  # no user's: never a traceback


def test_a_user_name_with_control_characters_is_shown_escaped(tmp_path: Path) -> None:
    odd = build({"policy": {"protect": [{"user": "x\n\x1b[2Jy"}]}})
    [found] = doctor(Host(str(clean_host(tmp_path))), odd, 1.0)
    assert "\x1b" not in found.text + found.fix and "\n" not in found.text + found.fix, found


def packaged(root: Path, unit_dir: str = "lib/systemd/system") -> Path:
    """The guard as the .deb (debian/rules, suspendguard.links) or the RPM lays it out: the
    units in the distribution's unit folder, the instances enabled by links beside them."""
    etc = root / "etc/systemd/system"
    for action in SLEEP_ACTIONS:
        (root / templates.enable_link(action).lstrip("/")).unlink()
    for name in (templates.UNIT_TEMPLATE, templates.RESUME_UNIT):
        write(root, f"{unit_dir}/{name}", (etc / name).read_text())
        (etc / name).unlink()
    for action in SLEEP_ACTIONS:
        for wanting in templates.required_by(action):
            link(root, f"{unit_dir}/{wanting}.requires/{templates.instance(action)}",
                 f"/{unit_dir}/{templates.UNIT_TEMPLATE}")
    return root


@pytest.mark.parametrize("unit_dir", ["lib/systemd/system", "usr/lib/systemd/system"])
def test_a_packaged_guard_is_installed(tmp_path: Path, unit_dir: str) -> None:
    root = packaged(clean_host(tmp_path), unit_dir)
    assert ids(root) == []
    # its timeout is still read, drop-ins under /etc included
    write(root, f"etc/systemd/system/{templates.UNIT_TEMPLATE}.d/short.conf",
          "[Service]\nTimeoutStartSec=30\n")
    assert ids(root) == ["guard-timeout-short"]


def test_a_packaged_guard_with_a_short_timeout_is_fixed_by_a_drop_in(tmp_path: Path) -> None:
    """Not by suspendguard install: its /etc unit and links would outlive the package (apt
    remove leaves them requiring a guard that is gone) and its hook overwrites dpkg's."""
    root = packaged(clean_host(tmp_path))
    config = build({"drain": {"deadline_s": 200}})
    [short] = [f for f in doctor(Host(str(root)), config, 1.0) if f.id == "guard-timeout-short"]
    assert "suspendguard install" not in short.fix, short.fix
    assert f"systemctl edit {templates.UNIT_TEMPLATE}" in short.fix
    assert "TimeoutStartSec=220" in short.fix


def test_a_packaged_guard_not_enabled_is_fixed_by_systemctl_not_install(tmp_path: Path) -> None:
    """install refuses beside a package's unit: the fix for a disabled instance is to enable
    it, and a missing resume unit is the package's to put back."""
    root = packaged(clean_host(tmp_path))
    for wanting in templates.required_by("hibernate"):
        (root / f"lib/systemd/system/{wanting}.requires/{templates.instance('hibernate')}").unlink()
    (root / f"lib/systemd/system/{templates.RESUME_UNIT}").unlink()
    found = {f.id: f.fix for f in doctor(Host(str(root)), CONFIG, 1.0)}
    assert found["guard-unit-missing"] == f"systemctl enable {templates.instance('hibernate')}"
    assert found["resume-unit-missing"] == "reinstall the package"


def test_a_drop_in_that_lengthens_the_timeout_is_what_counts(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    _resume_short_timeout(root)
    # what the finding's fix says: systemctl edit writes an override drop-in
    write(root, f"etc/systemd/system/{templates.RESUME_UNIT}.d/override.conf",
          f"[Service]\nTimeoutStartSec={health_budget_s(CONFIG) + 60}\n")
    assert ids(root) == []
    # the same file name in a folder read later is hidden by /etc's
    write(root, f"usr/lib/systemd/system/{templates.RESUME_UNIT}.d/override.conf",
          "[Service]\nTimeoutStartSec=10s\n")
    assert ids(root) == []


def test_the_short_instance_is_named(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    _guard_dropin_shortens_one_instance(root)
    [found] = doctor(Host(str(root)), CONFIG, None)
    assert found.text.startswith(f"{templates.instance('hibernate')} has TimeoutStartSec=90 s")


@pytest.mark.parametrize(("text", "seconds"), [
    ("120", 120.0), ("1min 30s", 90.0), ("2h 5min", 7500.0), ("250ms", 0.25),
    ("infinity", None)])
def test_spans_are_read_by_systemds_own_parser(text: str, seconds: float | None) -> None:
    assert timespan_s(text) == seconds


def test_a_span_systemd_refuses_is_unavailable_with_its_words() -> None:
    answer = timespan_s("soon")
    assert isinstance(answer, Unavailable)
    assert answer.reason == "Failed to parse time span 'soon': Invalid argument"


def test_without_systemd_analyze_the_timeouts_are_a_note(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root = clean_host(tmp_path)
    _guard_short_timeout(root)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    found = doctor(Host(str(root)), CONFIG, None)
    assert [(f.id, f.severity) for f in found] == [("timeout-unreadable", "note")] * 2
    assert found[0].text.startswith(
        f"cannot read TimeoutStartSec=60 of {templates.UNIT_TEMPLATE}: systemd-analyze")


def test_tempfile_smaller_than_the_vram_in_use(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    write(root, "sys/power/state", "freeze mem\n")  # no hibernation: only the save file counts
    free = os.statvfs(root / "var/tmp").f_bavail * os.statvfs(root / "var/tmp").f_frsize
    assert ids(root, vram_mb=free / 1024 / 1024 + 1024) == ["nvidia-tempfile-too-small"]
    assert ids(root, vram_mb=1.0) == []
    assert ids(root, vram_mb=None) == []  # NVML could not say: nothing claimed


def test_preserved_vram_counts_in_the_swap_needed(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    # 4 GB in use and 8 GB of swap: enough, until 6 GiB of preserved VRAM is added
    assert ids(root, vram_mb=1.0) == []
    found = doctor(Host(str(root)), CONFIG, 6 * 1024.0)
    assert [f.id for f in found] == ["hibernate-swap-too-small"]
    assert "preserved video memory" in found[0].text


def test_no_hibernation_no_hibernation_finding(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    _small_swap(root)
    _no_resume_device(root)
    write(root, "sys/power/state", "freeze mem\n")
    assert ids(root) == []


def test_the_command_its_exit_status_and_json(tmp_path: Path) -> None:
    root = clean_host(tmp_path / "host")
    assert cli("doctor", "--root", str(root)) == (0, "nothing to fix: no finding\n", "")
    _no_units(root)
    _systemd_257(root)
    code, out, _ = cli("doctor", "--root", str(root))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("! error: NVreg_PreserveVideoMemoryAllocations=1")
    assert lines[1] == ("    fix: systemctl enable nvidia-suspend.service nvidia-resume.service "
                        "nvidia-hibernate.service")
    assert lines[-1] == "1 to fix"
    code, out, _ = cli("doctor", "--root", str(root), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["to_fix"] == 1
    assert [f["severity"] for f in doc["findings"]] == ["error", "note", "note"]
    code, out, err = cli("doctor", "--root", str(tmp_path / "nowhere"))
    assert (code, out) == (2, "") and err.strip().endswith("--root " + str(tmp_path / "nowhere")
                                                          + ": not a folder")
    assert len(err.splitlines()) == 1
    # notes alone are nothing to fix
    _, out, _ = cli("doctor", "--root", str(clean_host(tmp_path / "other")))
    write(tmp_path / "other", "usr/lib/systemd/libsystemd-shared-256.so")
    code, out, _ = cli("doctor", "--root", str(tmp_path / "other"))
    assert code == 0 and "systemd-freezes-sessions" in out


def test_status_summarises_the_findings(conf: Path, tmp_path: Path, no_bus: str) -> None:
    import io

    from suspendguard.cli import main
    from suspendguard.status.collect import collect
    from suspendguard.status.prometheus import exposition
    from suspendguard.status.text import render

    stage = tmp_path / "stage"
    # install renders the units for the configuration under its root: this one's state folder
    staged_conf = stage / "etc/suspendguard/config.toml"
    staged_conf.parent.mkdir(parents=True)
    staged_conf.write_text(conf.read_text())
    assert main(["install", "--root", str(stage)], out=io.StringIO(), err=io.StringIO(),
                environ={}) == 0
    s = collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage), idle_check=None)
    assert [f.id for f in s.doctor] == []  # what install staged is what doctor wants
    (stage / templates.enable_link("hibernate").lstrip("/")).unlink()
    s = collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage), idle_check=None)
    out = io.StringIO()
    render(s, out)
    lines = out.getvalue().splitlines()
    at = lines.index("suspend setup: 1 to fix (suspendguard doctor says how)")
    assert lines[at + 1] == ("  ! suspendguard@hibernate.service is not enabled: hibernate is "
                             "not guarded")
    assert 'suspendguard_doctor_findings{severity="error"} 1.0' in exposition(s).splitlines()
    assert s.to_json()["doctor"]["to_fix"] == 1


def shipped_units(root: Path, unit_dir: str, state_dir: str = DEFAULT_STATE_DIR) -> None:
    """The veto and resume units as install renders them (a package's from the defaults)."""
    shipped = templates.template_dir()
    write(root, f"{unit_dir}/{templates.UNIT_TEMPLATE}", templates.render_unit(
        (shipped / templates.UNIT_TEMPLATE).read_text(), "/usr/bin/python3",
        templates.timeout_start_s(CONFIG), state_dir))
    write(root, f"{unit_dir}/{templates.RESUME_UNIT}", templates.render_resume(
        (shipped / templates.RESUME_UNIT).read_text(), "/usr/bin/python3", state_dir))


def test_a_state_folder_the_packaged_units_cannot_write_is_found(tmp_path: Path) -> None:
    """A package's units are built with the default folder: under ProtectSystem=strict the
    veto unit could record nothing in another, and would refuse every supervised job."""
    root = packaged(clean_host(tmp_path))
    shipped_units(root, "lib/systemd/system")
    elsewhere = build({"state": {"dir": "/srv/suspendguard"}})

    def found() -> dict[str, str]:
        return {f.text.split()[0]: f.fix for f in doctor(Host(str(root)), elsewhere, 1.0)
                if f.id == "state-dir-read-only"}

    assert found() == {
        unit: f"systemctl edit {unit}: [Service] ReadWritePaths=-/srv/suspendguard"
        for unit in (templates.UNIT_TEMPLATE, templates.RESUME_UNIT)}
    assert [f.id for f in doctor(Host(str(root)), CONFIG, 1.0)] == []  # the default folder
    # the fix it gives, for the veto unit: what is left is the resume unit's
    write(root, f"etc/systemd/system/{templates.UNIT_TEMPLATE}.d/override.conf",
          "[Service]\nReadWritePaths=-/srv/suspendguard\n")
    assert list(found()) == [templates.RESUME_UNIT]
    # an empty assignment in a later drop-in empties the list again
    write(root, f"etc/systemd/system/{templates.UNIT_TEMPLATE}.d/zz.conf",
          "[Service]\nReadWritePaths=\n")
    assert list(found()) == [templates.UNIT_TEMPLATE, templates.RESUME_UNIT]


def test_units_install_wrote_for_the_state_folder_can_write_it(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    shipped_units(root, "etc/systemd/system", "/srv/suspendguard")
    assert [f.id for f in doctor(Host(str(root)), build({"state": {"dir": "/srv/suspendguard"}}),
                                 1.0)] == []
    # a folder changed since install: install writes it again
    [one, _] = [f for f in doctor(Host(str(root)), build({"state": {"dir": "/srv/other"}}), 1.0)]
    assert (one.id, one.fix) == ("state-dir-read-only",
                                 "suspendguard install (it writes [state] dir into its units)")


def test_a_watch_unit_shorter_than_a_look_is_found(tmp_path: Path) -> None:
    """The watch's start and watchdog are each the longest a look may take; a unit rendered
    for the default deadline_s is short for a longer one."""
    root = clean_host(tmp_path)
    shipped = templates.template_dir()
    render = functools.partial(templates.render_watch,
                               (shipped / templates.WATCH_UNIT).read_text(), "/usr/bin/python3")
    write(root, f"lib/systemd/system/{templates.WATCH_UNIT}",
          render(templates.timeout_start_s(CONFIG)))
    longer = build({"drain": {"deadline_s": 200}})

    def watch(config: Config) -> list[tuple[str, str]]:
        return [(f.id, f.fix) for f in doctor(Host(str(root)), config, 1.0)
                if f.id == "watch-timeout-short"]

    assert watch(longer) == [
        ("watch-timeout-short", f"systemctl edit {templates.WATCH_UNIT}: [Service] {key}=220")
        for key in ("TimeoutStartSec", "WatchdogSec")]
    assert watch(CONFIG) == []
    write(root, templates.WATCH_PATH, render(templates.timeout_start_s(longer)))
    assert watch(longer) == []  # install wrote it


def findings(root: Path, config: Config = CONFIG) -> dict[str, tuple[str, str]]:
    return {f.id: (f.text, f.fix) for f in doctor(Host(str(root)), config, 1.0)}


def test_a_masked_or_gone_unit_is_said_to_fail_the_sleeps_that_require_it(tmp_path: Path) -> None:
    """A sleep step that requires a unit systemd cannot load fails: not 'nothing to fix', nor
    'not guarded'."""
    root = packaged(clean_host(tmp_path))
    link(root, f"etc/systemd/system/{templates.UNIT_TEMPLATE}", "/dev/null")  # masks /lib's
    [(text, fix)] = findings(root).values()
    assert text == (f"/etc/systemd/system/{templates.UNIT_TEMPLATE} masks the guard's unit for "
                    f"{', '.join(SLEEP_ACTIONS)}, which the sleep steps require: systemd fails "
                    f"every {', every '.join(SLEEP_ACTIONS)}")
    assert fix.startswith(f"systemctl unmask {templates.UNIT_TEMPLATE}; ")
    (root / "etc/systemd/system" / templates.UNIT_TEMPLATE).unlink()
    (root / "lib/systemd/system" / templates.UNIT_TEMPLATE).unlink()  # apt remove, links left
    [(text, fix)] = findings(root).values()
    links = sorted(f"/lib/systemd/system/{r}.requires/{templates.instance(a)}"
                   for a in SLEEP_ACTIONS for r in templates.required_by(a))
    assert text == (f"the guard's unit {templates.UNIT_TEMPLATE} is gone, but {len(links)} enable "
                    "links still require its instances: systemd fails every sleep they name")
    assert fix == ("suspendguard install, or reinstall the package; to stop guarding, rm "
                   + " ".join(links))


def test_the_resume_fix_is_a_drop_in_systemd_reads(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    _resume_short_timeout(root)
    [(_, fix)] = findings(root).values()
    budget = health_budget_s(CONFIG) + 60
    assert fix == f"systemctl edit {templates.RESUME_UNIT}: [Service] TimeoutStartSec={budget}"
    write(root, f"etc/systemd/system/{templates.RESUME_UNIT}.d/override.conf",
          fix.split(": ", 1)[1].replace("] ", "]\n") + "\n")
    assert findings(root) == {}


def test_a_watch_without_limits_is_not_short(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    write(root, templates.WATCH_PATH, "[Service]\nTimeoutStartSec=30\nWatchdogSec=30\n")
    assert list(findings(root)) == ["watch-timeout-short"]
    write(root, f"etc/systemd/system/{templates.WATCH_UNIT}.d/off.conf",
          "[Service]\nTimeoutSec=0\nWatchdogSec=0\n")
    assert findings(root) == {}


@pytest.mark.parametrize("state_dir", ["/srv/suspend guard", "/srv/100%"])
def test_a_state_folder_install_had_to_quote_is_writable(tmp_path: Path, state_dir: str) -> None:
    root = clean_host(tmp_path)
    shipped_units(root, "etc/systemd/system", state_dir)
    assert findings(root, build({"state": {"dir": state_dir}})) == {}
    assert set(findings(root, build({"state": {"dir": "/srv/suspend"}}))) == {
        "state-dir-read-only"}


def test_an_interpreter_that_cannot_run_the_guard_is_an_error(tmp_path: Path) -> None:
    """Probed for real, as doctor does on '/': the venv the unit names was deleted."""
    gone = probe(str(tmp_path / "venv/bin/python"))
    [found] = unusable_interpreter(gone, packaged=False)
    assert (found.id, found.severity) == ("guard-interpreter-unusable", "error")
    assert found.text == (f"the veto unit's interpreter {tmp_path}/venv/bin/python is missing: "
                          "every suspend it guards fails")
    assert unusable_interpreter(gone, packaged=True)[0].fix == "reinstall the package"
    assert unusable_interpreter(probe(sys.executable), packaged=False) == []


def test_a_mask_of_one_kind_hides_no_other_finding(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    _instance_masked(root)  # hibernate's
    _guard_short_timeout(root)  # every kind's
    assert ids(root) == ["guard-unit-masked", "guard-timeout-short"]


def test_lines_continued_as_systemd_continues_them(tmp_path: Path) -> None:
    root = clean_host(tmp_path)
    shipped_units(root, "etc/systemd/system", "/srv/guard-state")
    write(root, f"etc/systemd/system/{templates.UNIT_TEMPLATE}.d/override.conf",
          "[Service]\nReadWritePaths=-/var/log/npu \\\n  -/srv/guard-state\n")
    assert findings(root, build({"state": {"dir": "/srv/guard-state"}})) == {}
    write(root, "usr/lib/systemd/system/late.service",
          "[Unit]\nBefore=network.target \\\n sleep.target\n[Service]\nType=oneshot\n")
    assert list(findings(root, build({"state": {"dir": "/srv/guard-state"}}))) == [
        "unit-before-sleep-default-deps"]

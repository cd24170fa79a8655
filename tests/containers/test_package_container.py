"""The Debian package, built with tools/build-deb and used for real on a fresh Debian 12.

It is built from a copy of the tree without .git, as a release tarball
unpacks.

A minbase Debian 12 tree (mmdebstrap, cached: see tests/helpers/debian_box.py)
holding only Debian's own packages, the package's dependencies among them, is
booted with systemd-nspawn and a fake /sys/power. The package is installed
with apt from the local file (the container has no network), configured the
way an operator would (its conffile rewritten), then: a graceful job is
drained and the suspend goes on, a deaf job vetoes it (and ``journalctl -x``
explains the veto from the package's catalog), a `Restart=always`
service is drained, kept down by systemd and runs again after resume (the
package's resume unit), `status` and `history`
answer, an upgrade (a reinstall, which runs the same scripts) starts the
watch and the Slurm sync timer an operator enabled again, once each,
`apt-get remove` stops them and keeps the configuration and the history, a
reinstall keeps them too, and `apt-get purge` leaves the file list exactly
as it was before the install.

The jobs are transient services inside the container's own PID namespace
holding a node made with mknod (rdev 1:8, as in test_systemd_container.py),
running tests/helpers/holder.py with the container's /usr/bin/python3.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO
from helpers.debian_box import DebianBox, debian_tree, unavailable_reason

from suspendguard.system import journal_ids


def _reason() -> str | None:
    reason = unavailable_reason()
    if reason is None and shutil.which("dpkg-buildpackage") is None:
        reason = "dpkg-buildpackage is not installed (package dpkg-dev)"
    return reason


pytestmark = [
    pytest.mark.systemd,
    pytest.mark.root,
    pytest.mark.skipif(_reason() is not None, reason=str(_reason())),
]

DIST_IN = "/mnt/suspendguard-dist"
HELPERS_IN = "/opt/suspendguard-test-helpers"
HOLDER = f"{HELPERS_IN}/holder.py"
NODE = "/dev/suspendguard-test/accel0"
NODE_RDEV = "1 8"  # see test_systemd_container.py: not 1:7, and not a node the host's guard matches
MARKER = "/run/suspendguard-test/signals.log"
CONFIG = f"""\
# written by the test, as an operator edits the conffile
[devices]
families = []
nodes = ["{NODE}"]

[idle]
backends = []

[drain]
timeout_s = 5.0
"""
SUSPEND_FAILED = r"Dependency failed for \S*\s*-?\s*System Suspend"
# What apt, dpkg, the journal and systemd's own bookkeeping change on any
# install: not the package's files.
CHURN = ("/var/log", "/var/cache/apt", "/var/cache/debconf", "/var/lib/apt", "/var/lib/dpkg",
         "/var/lib/systemd")
INSTANCES = ("suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate")
RESUME = "suspendguard-resume.service"
# Shipped disabled; an operator enables them (the watch, a Slurm controller's sync).
WATCH = "suspendguard-watch.service"
SYNC_TIMER = "suspendguard-slurm-sync.timer"
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}


def cache_dir() -> Path:
    """Where the Debian tree is kept between tests and runs (SUSPENDGUARD_TEST_CACHE overrides)."""
    if os.environ.get("SUSPENDGUARD_TEST_CACHE"):
        return Path(os.environ["SUSPENDGUARD_TEST_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "suspendguard-test"


# What a release tarball or a downloaded ZIP holds: the tree, no .git, no
# build output.
NOT_IN_A_TARBALL = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "__pycache__",
                                          "*.egg-info", ".mypy_cache", ".ruff_cache",
                                          ".pytest_cache")


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as tools/build-deb builds it from an unpacked source tarball.

    There is no git checkout around it: a build that still needed one
    (`git ls-files`) fails here with "not a git repository".
    """
    src = tmp_path_factory.mktemp("tarball") / "suspendguard-0.1.0"
    shutil.copytree(REPO, src, ignore=NOT_IN_A_TARBALL, symlinks=True)
    assert not (src / ".git").exists()
    result = subprocess.run([str(src / "tools" / "build-deb")], cwd=src, capture_output=True,
                            text=True, timeout=900, env={**os.environ, "LINTIAN": "0"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [path] = re.findall(r"^tools/build-deb: (dist/\S+\.deb)$", result.stdout, re.M)
    return src / path


@pytest.fixture(scope="module")
def box(deb: Path) -> Iterator[DebianBox]:
    tree = debian_tree(cache_dir())
    with DebianBox(tree, {str(deb.parent): DIST_IN, str(REPO / "tests" / "helpers"): HELPERS_IN}
                   ) as container:
        container.before = container.files(exclude=CHURN)  # type: ignore[attr-defined]
        yield container


@pytest.fixture(scope="module")
def installed(box: DebianBox, deb: Path) -> DebianBox:
    result = box.run("apt-get", "install", "-y", "--no-install-recommends",
                     f"{DIST_IN}/{deb.name}", timeout=180, env=APT_ENV)
    assert "Setting up suspendguard" in result.stdout, result.stdout
    box.write("/etc/suspendguard/config.toml", CONFIG)
    box.sh(f"mkdir -p {Path(NODE).parent} {Path(MARKER).parent} && "
           f"mknod -m 666 {NODE} c {NODE_RDEV}")
    return box


@pytest.fixture
def clean(installed: DebianBox) -> Iterator[DebianBox]:
    with installed.cleaned(MARKER):
        yield installed


start_holder = functools.partial(DebianBox.start_holder, node=NODE, marker=MARKER, holder=HOLDER)


def signals(box: DebianBox) -> list[str]:
    return box.sh(f"cat {MARKER} 2>/dev/null || :").stdout.splitlines()


def attempts(box: DebianBox) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(
        box.suspendguard("history", "--json", "-n", "10").stdout)["attempts"]
    return found


def newest_unit_attempt(box: DebianBox) -> dict[str, Any]:
    for attempt in attempts(box):
        if attempt["origin"] == "unit" and attempt["action"] == "suspend":
            return attempt
    raise AssertionError(f"no attempt of the unit in {attempts(box)}")


def requires(box: DebianBox, unit: str) -> str:
    return box.run("systemctl", "show", "-p", "Requires", "--value", unit).stdout


def wants(box: DebianBox, unit: str) -> str:
    return box.run("systemctl", "show", "-p", "Wants", "--value", unit).stdout


def main_pid(box: DebianBox, unit: str) -> int:
    return int(box.run("systemctl", "show", "-p", "MainPID", "--value", unit).stdout)


# --- lintian ----------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("lintian") is None, reason="lintian is not installed")
def test_lintian_has_no_errors(deb: Path) -> None:
    changes = sorted(deb.parent.glob("suspendguard_*.changes"))[-1]
    result = subprocess.run(["lintian", "--fail-on", "error", str(changes)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not re.search(r"^E: ", result.stdout, re.M), result.stdout


# --- installed from the package ------------------------------------------------------


def test_package_installs_the_guard_enabled(installed: DebianBox) -> None:
    box = installed
    for action in INSTANCES:
        assert f"suspendguard@{action}.service" in requires(box, f"systemd-{action}.service")
        assert RESUME in wants(box, f"systemd-{action}.service").split()
    assert box.run("systemctl", "is-enabled", RESUME, check=False).stdout.strip() == "enabled"
    resume = box.run("systemctl", "cat", RESUME).stdout
    assert "ExecStart=/usr/bin/python3 -I -m suspendguard restore" in resume
    unit = box.run("systemctl", "cat", "suspendguard@suspend.service").stdout
    assert "ExecStart=/usr/bin/python3 -I -m suspendguard pre-sleep %i" in unit
    assert re.search(r"^TimeoutStartSec=120$", unit, re.M), unit
    assert box.run("test", "-x", "/usr/lib/systemd/system-sleep/suspendguard",
                   check=False).returncode == 0
    conffiles = box.run("dpkg-query", "-W", "-f", "${Conffiles}", "suspendguard").stdout
    assert "/etc/suspendguard/config.toml" in conffiles
    # the package starts nothing on install: a start would be a real drain
    assert box.run("systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value",
                   "suspendguard@suspend.service").stdout.strip() in ("", "0")


def test_man_pages_and_completion_are_installed(installed: DebianBox) -> None:
    box = installed
    pages = {}
    for path in ("/usr/share/man/man8/suspendguard.8.gz", "/usr/share/man/man5/suspendguard.toml.5.gz"):
        pages[path] = box.run("zcat", path).stdout
        assert pages[path] == (REPO / "man" / Path(path).name.removesuffix(".gz")).read_text(), path
    for path, shipped in (("/usr/share/bash-completion/completions/suspendguard", "suspendguard"),
                          ("/usr/share/zsh/vendor-completions/_suspendguard", "_suspendguard")):
        assert box.run("cat", path).stdout == (REPO / "completion" / shipped).read_text(), path
    if box.run("sh", "-c", "command -v man", check=False).returncode == 0:
        rendered = box.run("man", "suspendguard", env={"MANWIDTH": "200"}).stdout
    elif shutil.which("man") is not None:
        # Debian's minbase has no man-db (adding it costs every package install a
        # mandb run): the installed page is rendered here instead.
        rendered = subprocess.run(["man", "-l", "-"], input=pages["/usr/share/man/man8/suspendguard.8.gz"],
                                  capture_output=True, text=True, timeout=60, check=True,
                                  env={**os.environ, "MANWIDTH": "200"}).stdout
    else:
        return
    assert "suspendguard check" in rendered and "suspendguard.toml(5)" in rendered, rendered


def test_graceful_job_is_drained_and_the_suspend_goes_on(clean: DebianBox) -> None:
    box = clean
    pid = start_holder(box, "graceful", "graceful")
    journal = box.suspend()
    assert box.power_state().splitlines()[0] == "mem", journal
    assert f"{pid} SIGINT" in signals(box)
    assert "Finished suspendguard@suspend.service" in journal, journal
    attempt = newest_unit_attempt(box)
    assert attempt["verdict"] == "allow", attempt
    # a transient unit (systemd-run) is gone once drained: restore made it again
    assert [(st["name"], st["result"]) for st in attempt["stopped"]] == \
        [("sg-test-graceful.service", "started")], attempt["stopped"]
    [holder] = [h for h in attempt["holders"] if h["pid"] == pid]
    assert holder["action"] == "drain" and holder["outcome"]["kind"] == "exited", attempt


def test_deaf_job_vetoes_the_suspend(clean: DebianBox) -> None:
    box = clean
    deaf = start_holder(box, "deaf", "deaf")
    journal = box.suspend()
    assert re.search(SUSPEND_FAILED, journal), journal
    assert "Entering sleep state" not in journal
    assert box.power_state() == "freeze mem disk\n"
    assert box.unit_active("sg-test-deaf.service")
    assert signals(box) == []
    attempt = newest_unit_attempt(box)
    assert attempt["verdict"] == "veto", attempt
    assert any(str(deaf) in reason for reason in attempt["reasons"]), attempt["reasons"]
    # journalctl -x explains the veto from the catalog the package installed
    # (systemd's own dpkg trigger on /usr/lib/systemd/catalog built the database)
    assert journal_ids.VETO in box.run("journalctl", "--list-catalog").stdout
    explained = box.run("journalctl", "-x", "--no-pager",
                        f"MESSAGE_ID={journal_ids.VETO}").stdout
    assert f"suspend refused (veto, attempt {attempt['id']}): " in explained, explained
    assert re.search(r"The suspend was refused: .*sigint-ignored", explained), explained
    assert f"The guard refused the suspend (attempt {attempt['id']}," in explained, explained
    assert "suspendguard status" in explained and str(deaf) in explained, explained


def test_restart_always_service_is_kept_down_by_systemd_and_runs_after_resume(
        clean: DebianBox) -> None:
    box = clean
    unit = "sg-test-always.service"
    box.write(f"/etc/systemd/system/{unit}",
              f"[Service]\nRestart=always\nRestartSec=100ms\nExecStart=/usr/bin/python3 {HOLDER} "
              f"--node {NODE} --mode graceful --delay 0.1 --marker {MARKER}\n")
    try:
        box.run("systemctl", "daemon-reload")
        cursor = box.cursor()
        box.run("systemctl", "start", unit)
        box.wait_journal(cursor, r"\bready\b", args=("-u", unit, "-o", "cat"))
        first = main_pid(box, unit)
        journal = box.suspend()
        assert box.power_state().splitlines()[0] == "mem", journal
        assert f"{first} SIGINT" in signals(box)  # the drain signal, from the guard
        assert box.wait_active(unit), journal
        assert main_pid(box, unit) != first
        assert re.search(r"Finished suspendguard-resume\.service", journal) or \
            "suspendguard-resume" in box.run("journalctl", "-u", RESUME, "-o", "cat").stdout, journal
        attempt = newest_unit_attempt(box)
        assert attempt["verdict"] == "allow", attempt
        [stop] = attempt["stopped"]
        assert (stop["owner"], stop["result"]) == (f"systemd-service:{unit}", "started"), attempt
    finally:
        box.run("systemctl", "stop", unit, check=False)
        box.run("systemctl", "reset-failed", unit, check=False)
        box.sh(f"rm -f /etc/systemd/system/{unit} && systemctl daemon-reload")


def test_status_and_history_answer(installed: DebianBox) -> None:
    box = installed
    status = box.suspendguard("status", check=False)
    assert "installation: installed" in status.stdout, status.stdout + status.stderr
    assert "enabled for: suspend, hibernate, hybrid-sleep, suspend-then-hibernate" in status.stdout
    assert "config: /etc/suspendguard/config.toml: valid" in status.stdout
    # shipped for a Slurm controller, enabled by nobody but its operator
    assert box.run("systemctl", "is-enabled", "suspendguard-slurm-sync.timer",
                   check=False).stdout.strip() == "disabled"
    # written by Debian's own python3-prometheus-client (0.16 in Debian 12)
    prom = box.suspendguard("status", "--prometheus", check=False)
    assert prom.returncode == 0 and "\nsuspendguard_installed 1.0\n" in prom.stdout, (
        prom.stdout[-2000:] + prom.stderr)
    history = box.suspendguard("history")
    assert re.search(r"\bveto\b", history.stdout) and re.search(r"\ballow\b", history.stdout), (
        history.stdout)


# --- upgrade, remove, reinstall, purge ---------------------------------------------------


def test_upgrade_starts_again_once_what_the_operator_enabled(installed: DebianBox,
                                                             deb: Path) -> None:
    """A reinstall runs the scripts as an upgrade does (preinst upgrade, configure OLD)."""
    box = installed
    box.run("systemctl", "enable", "--now", WATCH, SYNC_TIMER)
    cursor = box.cursor()
    box.run("apt-get", "install", "--reinstall", "-y", f"{DIST_IN}/{deb.name}", timeout=180,
            env=APT_ENV)
    assert box.unit_active(WATCH) and box.unit_active(SYNC_TIMER)
    started = r"Started .*show a certain veto as a logind sleep inhibitor"
    journal = box.wait_journal(cursor, started, args=("-u", WATCH))
    assert len(re.findall(started, journal)) == 1, journal
    # systemd made the watch's StateDirectory= as its unit says: still root's alone
    assert box.run("stat", "-c", "%a", "/var/lib/suspendguard").stdout.strip() == "700"


def test_remove_keeps_config_and_history_and_reinstall_uses_them(installed: DebianBox,
                                                                 deb: Path) -> None:
    box = installed
    seen = [a["id"] for a in attempts(box)]
    assert seen
    box.run("systemctl", "enable", "--now", WATCH, SYNC_TIMER)
    # As the unit's own comment says to: links under /etc beside the package's static ones.
    box.run("systemctl", "enable", "suspendguard@suspend.service")
    assert box.run("test", "-L", "/etc/systemd/system/systemd-suspend.service.requires/"
                   "suspendguard@suspend.service", check=False).returncode == 0
    box.run("apt-get", "remove", "-y", "suspendguard", timeout=120)
    # nothing of the package runs on: no watch holding a sleep block, no timer firing
    assert not box.unit_active(WATCH) and not box.unit_active(SYNC_TIMER)
    assert box.run("cat", "/etc/suspendguard/config.toml").stdout == CONFIG
    assert box.run("test", "-f", "/var/lib/suspendguard/history.db", check=False).returncode == 0
    assert box.run("test", "-e", "/lib/systemd/system/suspendguard@.service",
                   check=False).returncode != 0
    # no Requires= left on a unit that is gone: that would fail every suspend
    assert "suspendguard" not in requires(box, "systemd-suspend.service")
    # the resume unit is gone too; its WantedBy= links in /etc stay until purge
    # (deb-systemd-helper keeps an operator's enable state), and a Wants= of a
    # missing unit, unlike a Requires=, fails nothing
    assert box.run("systemctl", "show", "-p", "LoadState", "--value",
                   RESUME).stdout.strip() == "not-found"
    box.run("apt-get", "install", "-y", f"{DIST_IN}/{deb.name}", timeout=180, env=APT_ENV)
    assert box.run("cat", "/etc/suspendguard/config.toml").stdout == CONFIG  # the operator's edit
    assert [a["id"] for a in attempts(box)] == seen
    # The history's folder stays root's alone through the package's configure step.
    assert box.run("stat", "-c", "%a", "/var/lib/suspendguard").stdout.strip() == "700"
    assert "suspendguard@suspend.service" in requires(box, "systemd-suspend.service")
    assert box.run("systemctl", "is-enabled", RESUME, check=False).stdout.strip() == "enabled"
    # the operator's enables kept through the removal
    assert box.unit_active(WATCH) and box.unit_active(SYNC_TIMER)


def test_purge_leaves_nothing_behind(installed: DebianBox) -> None:
    box = installed
    box.run("apt-get", "purge", "-y", "suspendguard", timeout=120)
    after = box.files(exclude=CHURN)
    before: set[str] = box.before  # type: ignore[attr-defined]
    assert sorted(after - before) == [] and sorted(before - after) == []
    mounts = (DIST_IN, HELPERS_IN)  # the test's own bind mounts, there before and after
    left = [p for p in box.files() if "suspendguard" in p and not p.startswith(mounts)]
    assert left == []
    assert "suspendguard" not in requires(box, "systemd-suspend.service")
    assert "suspendguard" not in wants(box, "systemd-suspend.service")

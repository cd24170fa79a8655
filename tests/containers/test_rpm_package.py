"""The RPM built from rpm/suspendguard.spec by tools/build-rpm: files, scriptlets, dependencies.

Built here with Debian's rpm package (rpm/macros.fallback stands in for the
Fedora-family macros); it cannot be installed on this kind of host, so the
built package is read with rpm -qp.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO

INSTANCES = [f"suspendguard@{a}.service"
             for a in ("suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate")]
RESUME = "suspendguard-resume.service"
WATCH = "suspendguard-watch.service"

pytestmark = pytest.mark.skipif(shutil.which("rpmbuild") is None,
                                reason="rpmbuild is not installed (package rpm)")


@pytest.fixture(scope="module")
def rpm_file() -> Path:
    result = subprocess.run([str(REPO / "tools" / "build-rpm")], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [path] = re.findall(r"^tools/build-rpm: (dist/\S+\.noarch\.rpm)$", result.stdout, re.M)
    return REPO / path


def rpm_q(rpm_file: Path, *args: str) -> str:
    return subprocess.run(["rpm", "-qp", *args, str(rpm_file)], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def payload_file(rpm_file: Path, path: str) -> str:
    """One file of the payload: rpm2cpio's "newc" archive, read here (no cpio needed)."""
    data = subprocess.run(["rpm2cpio", str(rpm_file)], capture_output=True, check=True,
                          timeout=60).stdout
    pos = 0
    while data[pos:pos + 6] == b"070701":
        size, name_len = int(data[pos + 54:pos + 62], 16), int(data[pos + 94:pos + 102], 16)
        name = data[pos + 110:pos + 110 + name_len - 1].decode()
        start = (pos + 110 + name_len + 3) & ~3
        if name.lstrip(".") == path:
            return data[start:start + size].decode()
        pos = (start + size + 3) & ~3
    raise AssertionError(f"{path} is not in {rpm_file.name}")


def test_files(rpm_file: Path) -> None:
    files = rpm_q(rpm_file, "-l").splitlines()
    for path in ("/usr/bin/suspendguard", "/usr/lib/systemd/system/suspendguard@.service",
                 f"/usr/lib/systemd/system/{RESUME}",
                 "/usr/lib/systemd/system-sleep/suspendguard",
                 "/usr/lib/systemd/system-preset/50-suspendguard.preset",
                 "/usr/lib/systemd/catalog/suspendguard.catalog",
                 "/usr/lib/systemd/system/suspendguard-slurm-sync.timer",
                 "/usr/lib/systemd/system/suspendguard-slurm-sync.service",
                 "/etc/suspendguard/config.toml", "/var/lib/suspendguard"):
        assert path in files, files
    assert any(re.search(r"/site-packages/suspendguard/cli\.py$", f) for f in files), files
    assert any("/site-packages/suspendguard/data/systemd/suspendguard@.service" in f for f in files)
    assert rpm_q(rpm_file, "--configfiles").split() == ["/etc/suspendguard/config.toml"]
    # %config(noreplace) ("c", "n"): an operator's edits survive upgrades
    flags = dict(line.rsplit(" ", 1) for line in rpm_q(
        rpm_file, "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]").splitlines())
    assert set(flags["/etc/suspendguard/config.toml"]) >= {"c", "n"}
    # The history's folder is root's alone, as each guard run keeps it.
    modes = dict(line.rsplit(" ", 1) for line in rpm_q(
        rpm_file, "--qf", "[%{FILENAMES} %{FILEMODES:perms}\n]").splitlines())
    assert modes["/var/lib/suspendguard"] == "drwx------"


def test_rendered_unit_hook_and_preset(rpm_file: Path) -> None:
    unit = payload_file(rpm_file, "/usr/lib/systemd/system/suspendguard@.service")
    assert "ExecStart=/usr/bin/python3 -I -m suspendguard pre-sleep %i" in unit
    assert re.search(r"^TimeoutStartSec=120$", unit, re.M)
    resume = payload_file(rpm_file, f"/usr/lib/systemd/system/{RESUME}")
    assert re.search(r"^ExecStart=/usr/bin/python3 -I -m suspendguard restore$", resume, re.M)
    assert re.search(r"^WantedBy=systemd-suspend\.service .*systemd-hibernate\.service", resume, re.M)
    hook = payload_file(rpm_file, "/usr/lib/systemd/system-sleep/suspendguard")
    assert "PYTHON=/usr/bin/python3" in hook
    preset = payload_file(rpm_file, "/usr/lib/systemd/system-preset/50-suspendguard.preset")
    assert preset.splitlines() == [
        "enable suspendguard@.service suspend hibernate hybrid-sleep suspend-then-hibernate",
        f"enable {RESUME}"]
    config = payload_file(rpm_file, "/etc/suspendguard/config.toml")
    assert config.startswith("# suspendguard configuration.")


def test_scriptlets_enable_on_install_disable_on_erase_and_start_no_instance(rpm_file: Path) -> None:
    scripts = rpm_q(rpm_file, "--scripts")
    post = scripts.split("postinstall scriptlet")[1].split("preuninstall scriptlet")[0]
    preun = scripts.split("preuninstall scriptlet")[1].split("postuninstall")[0]
    units = " ".join([*INSTANCES, RESUME])
    assert "$1 -eq 1" in post and "install-system-units " + units in post
    assert "$1 -eq 0" in preun and "remove-system-units " + units in preun
    # the catalog database (journalctl -x), where systemd has no file trigger for it
    postun = scripts.split("postuninstall scriptlet")[1]
    assert "journalctl --update-catalog" in post and "journalctl --update-catalog" in postun
    # a (re)start of an instance would be a real drain of every accelerator job; the watch
    # an operator runs is restarted on upgrade only, with the new code (the .deb does too)
    assert "$1 -ge 1" in postun
    assert re.findall(r"mark-restart-system-units (.*?) \|\|", postun) == [WATCH]
    rest = scripts.replace("install-system-units", "").replace("mark-restart-system-units", "")
    assert not re.search(r"\b(restart|start)\b", rest)


def test_requires(rpm_file: Path) -> None:
    requires = rpm_q(rpm_file, "--requires").splitlines()
    for dep in ("python3 >= 3.10", "python3-dbus-next",
                "python3-prometheus_client", "systemd"):
        assert dep in requires, requires
    assert not [r for r in requires if "psutil" in r], requires  # /proc is read by the guard itself

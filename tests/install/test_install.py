"""install / uninstall staged into a folder (--root): exactly what is made, and undone."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO
from helpers.runners import cli as run
from helpers.users import nobody_prefix, python_for_nobody

from suspendguard.errors import EXIT_ERROR
from suspendguard.install.files import (
    SYSTEMD_RUN_DIR,
    NotRootError,
    SystemdNotRunningError,
    check_live_system,
)
from suspendguard.install.installed import read_installation
from suspendguard.install.manifest import MANIFEST_PATH
from suspendguard.model import SLEEP_ACTIONS

ACTIONS = SLEEP_ACTIONS
UNIT = "etc/systemd/system/suspendguard@.service"
HOOK = "usr/lib/systemd/system-sleep/suspendguard"
RESUME = "etc/systemd/system/suspendguard-resume.service"
CONFIG = "etc/suspendguard/config.toml"
MANIFEST = "var/lib/suspendguard/installed.json"


def links() -> dict[str, str]:
    return {
        f"etc/systemd/system/{by}-{a}.service.requires/suspendguard@{a}.service":
            "/etc/systemd/system/suspendguard@.service"
        for a in ACTIONS for by in ("systemd", "nvidia")
    } | {
        f"etc/systemd/system/systemd-{a}.service.wants/suspendguard-resume.service":
            "/etc/systemd/system/suspendguard-resume.service"
        for a in ACTIONS
    }


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under root: kind, mode and content digest or link target."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode))
            else:
                data = path.read_bytes()
                if rel == MANIFEST:  # its time stamp changes on every install
                    manifest = json.loads(data)
                    manifest.pop("installed_at")
                    data = json.dumps(manifest).encode()
                out[rel] = ("f", stat.S_IMODE(st.st_mode), hashlib.sha256(data).hexdigest())
    return out


def unit_folder(folder: Path, units: dict[str, str], required: dict[str, str]) -> None:
    """Unit files in ``folder`` (name: text), and links in its
    systemd-suspend.service.requires/ (name: target)."""
    (folder / "systemd-suspend.service.requires").mkdir(parents=True)
    for name, text in units.items():
        (folder / name).write_text(text)
    for name, target in required.items():
        os.symlink(target, folder / "systemd-suspend.service.requires" / name)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A staging root that already holds things install must leave alone."""
    r = tmp_path / "root"
    unit_folder(r / "etc/systemd/system", {"other.service": "[Service]\nExecStart=/bin/true\n"},
                {"nvidia-suspend.service": "/usr/lib/systemd/system/nvidia-suspend.service"})
    (r / "usr/lib/systemd/system-sleep").mkdir(parents=True)
    (r / "usr/lib/systemd/system-sleep/other-hook").write_text("#!/bin/sh\n")
    return r


def test_install_stages_exactly_these_files(root: Path) -> None:
    before = snapshot(root)
    status, out, err = run("install", "--root", str(root))
    assert status == 0, err
    after = snapshot(root)
    added = {k: v for k, v in after.items() if k not in before}
    from suspendguard.install.docs import DOCS
    from suspendguard.install.files import CATALOG_PATH

    docs = {path.lstrip("/") for path in (*DOCS.values(), CATALOG_PATH)}
    assert {k for k, v in added.items() if v[0] == "f"} == {UNIT, RESUME, HOOK, CONFIG, MANIFEST, *docs}
    assert {k: v[1] for k, v in added.items() if v[0] == "l"} == links()
    assert {k for k, v in added.items() if v[0] == "d"} == {
        "etc/suspendguard", "var", "var/lib", "var/lib/suspendguard",
        *{str(Path(d).parents[i]) for d in docs for i in range(len(Path(d).parents) - 2)},
        *(f"etc/systemd/system/systemd-{a}.service.requires" for a in ACTIONS[1:]),
        *(f"etc/systemd/system/nvidia-{a}.service.requires" for a in ACTIONS),
        *(f"etc/systemd/system/systemd-{a}.service.wants" for a in ACTIONS),
    }
    assert all(after[k] == v for k, v in before.items()), "install changed what was there"
    assert "ExecStart=/usr/bin/python3 -I -m suspendguard restore\n" in (root / RESUME).read_text()
    assert after[UNIT][1] == 0o644 and after[HOOK][1] == 0o755 and after[CONFIG][1] == 0o644
    # The state folder and what install keeps there are root's alone, as every run keeps them.
    assert after["var/lib/suspendguard"][1] == 0o700 and after[MANIFEST][1] == 0o600
    unit = (root / UNIT).read_text()
    # Staged: the target's interpreter, not the builder's venv.
    assert "ExecStart=/usr/bin/python3 -I -m suspendguard pre-sleep %i\n" in unit
    assert "TimeoutStartSec=120\n" in unit
    assert "PYTHON=/usr/bin/python3\n" in (root / HOOK).read_text()
    from suspendguard.config import commented_default

    assert (root / CONFIG).read_text() == commented_default()
    assert str(root / UNIT) in out and "enabled: suspendguard@suspend.service" in out


def test_a_manifest_others_could_read_is_made_root_s_alone_at_reinstall(root: Path) -> None:
    assert run("install", "--root", str(root))[0] == 0
    (root / MANIFEST).chmod(0o644)  # as installs before wrote it
    assert run("install", "--root", str(root))[0] == 0
    assert stat.S_IMODE((root / MANIFEST).stat().st_mode) == 0o600


def test_install_is_idempotent(root: Path) -> None:
    assert run("install", "--root", str(root))[0] == 0
    first = snapshot(root)
    assert run("install", "--root", str(root))[0] == 0
    assert snapshot(root) == first


def test_uninstall_restores_the_tree_but_config_and_history(root: Path) -> None:
    before = snapshot(root)
    assert run("install", "--root", str(root))[0] == 0
    (root / "var/lib/suspendguard/history.db").write_bytes(b"attempts")
    status, out, err = run("uninstall", "--root", str(root))
    assert status == 0, err
    after = snapshot(root)
    assert set(after) - set(before) == {
        "etc/suspendguard", CONFIG, "var", "var/lib", "var/lib/suspendguard",
        "var/lib/suspendguard/history.db", MANIFEST,
    }
    assert all(after[k] == v for k, v in before.items())
    assert str(root / UNIT) in out
    # Nothing left but what --purge removes; a second uninstall says so.
    status, out, _ = run("uninstall", "--root", str(root))
    assert status == 0 and "uninstall --purge" in out
    assert snapshot(root) == after
    # ... and --purge later still knows what install made for the config and history.
    assert run("uninstall", "--root", str(root), "--purge")[0] == 0
    assert snapshot(root) == before


def test_purge_removes_config_and_history(root: Path) -> None:
    before = snapshot(root)
    assert run("install", "--root", str(root))[0] == 0
    (root / "var/lib/suspendguard/history.db").write_bytes(b"attempts")
    (root / "var/lib/suspendguard/history.db-wal").write_bytes(b"")
    status, out, err = run("uninstall", "--root", str(root), "--purge")
    assert status == 0, err
    assert snapshot(root) == before
    assert "removed " + str(root / CONFIG) in out


def test_reinstall_after_uninstall_then_purge(root: Path) -> None:
    before = snapshot(root)
    assert run("install", "--root", str(root))[0] == 0
    assert run("uninstall", "--root", str(root))[0] == 0
    assert run("install", "--root", str(root))[0] == 0
    assert run("uninstall", "--root", str(root), "--purge")[0] == 0
    assert snapshot(root) == before


def test_uninstall_without_install(root: Path) -> None:
    before = snapshot(root)
    status, out, _ = run("uninstall", "--root", str(root), "--purge")
    assert status == 0 and "nothing to uninstall" in out
    assert snapshot(root) == before


@pytest.mark.parametrize("command", ["install", "uninstall"])
@pytest.mark.parametrize("given", ["/", "//", "/.", "/usr/.."])
def test_a_root_that_is_the_running_system_is_refused(command: str, given: str) -> None:
    """Staged into /, the live units would skip a live install's checks (root, systemd, an
    interpreter that runs the guard), and an uninstall its watch's stop and reload."""
    status, out, err = run(command, "--root", given)
    assert (status, out) == (2, ""), err
    assert err == (f"suspendguard: --root {given} is the running system: leave --root out "
                   "for that\n")


def test_folders_made_are_readable_whatever_the_umask(root: Path) -> None:
    old = os.umask(0o077)
    try:
        status, _, err = run("install", "--root", str(root))
    finally:
        os.umask(old)
    assert status == 0, err
    for folder in ("etc/suspendguard", "usr/local/share/man/man8"):
        assert stat.S_IMODE((root / folder).stat().st_mode) == 0o755, folder


def test_units_left_without_a_manifest_are_no_nothing_to_uninstall(root: Path) -> None:
    """The manifest lives in the history's folder: removed with it, the units and their
    Requires= links stay, and each sleep fails once the guard they name is gone."""
    assert run("install", "--root", str(root))[0] == 0
    (root / MANIFEST_PATH.lstrip("/")).unlink()
    before = snapshot(root)
    status, out, err = run("uninstall", "--root", str(root), "--purge")
    assert (status, out) == (EXIT_ERROR, ""), err
    assert err.startswith(f"suspendguard: no manifest at {root}{MANIFEST_PATH}, yet the "
                          f"guard's units are here ({root}/etc/systemd/system/suspendguard"
                          "-resume.service, ") and "install again" in err, err
    assert err.count("\n") == 1 and snapshot(root) == before
    assert run("install", "--root", str(root))[0] == 0  # the way out it names
    assert run("uninstall", "--root", str(root), "--purge")[0] == 0
    assert not (root / "etc/systemd/system/suspendguard@.service").exists()


def test_never_overwrites_an_existing_config(root: Path) -> None:
    (root / "etc/suspendguard").mkdir(parents=True)
    mine = "[drain]\ntimeout_s = 10\ndeadline_s = 50\n"
    (root / CONFIG).write_text(mine)
    status, out, err = run("install", "--root", str(root))
    assert status == 0, err
    assert (root / CONFIG).read_text() == mine
    assert "kept as it is" in out
    # The unit's timeout comes from the staged config, not this machine's.
    assert "TimeoutStartSec=70\n" in (root / UNIT).read_text()
    assert run("install", "--root", str(root))[0] == 0
    assert (root / CONFIG).read_text() == mine
    assert run("uninstall", "--root", str(root))[0] == 0
    assert (root / CONFIG).read_text() == mine
    # --purge removes the config, as it says, even one install did not write.
    assert run("install", "--root", str(root))[0] == 0
    assert run("uninstall", "--root", str(root), "--purge")[0] == 0
    assert not (root / CONFIG).exists()
    assert (root / "etc/suspendguard").is_dir()  # the operator made it, not install


def test_a_staged_install_never_reads_this_machines_own_config(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A package built on a host whose own file says deadline_s = 30 shipped TimeoutStartSec=50.
    builders = tmp_path / "builders-config.toml"
    builders.write_text("[drain]\ntimeout_s = 10\ndeadline_s = 30\n")
    monkeypatch.setattr(sys.modules["suspendguard.config.load"], "DEFAULT_PATH", str(builders))
    status, _, err = run("install", "--root", str(root))
    assert status == 0, err
    assert "TimeoutStartSec=120\n" in (root / UNIT).read_text()


def test_an_install_beside_a_packages_unit_is_refused(root: Path) -> None:
    # It would outlive the package: its /etc unit and links then require a guard that is
    # gone, and every suspend fails. The package's unit is changed with a drop-in.
    shipped = root / "usr/lib/systemd/system/suspendguard@.service"
    shipped.parent.mkdir(parents=True)
    shipped.write_text("[Service]\nTimeoutStartSec=120\n")
    before = snapshot(root)
    status, out, err = run("install", "--root", str(root))
    assert status == 3 and out == ""
    assert err == ("suspendguard: a package installed /usr/lib/systemd/system/"
                   "suspendguard@.service: change it with systemctl edit suspendguard@.service "
                   "([Service] TimeoutStartSec=120 for this config), not an install beside it, "
                   "which would outlive the package (--force to install all the same)\n")
    assert snapshot(root) == before
    status, _, err = run("install", "--root", str(root), "--force")
    assert status == 0, err
    assert (root / UNIT).exists()


def test_a_number_out_of_range_is_refused_and_nothing_is_written(root: Path) -> None:
    # 1e308 s would have gone into the unit as a TimeoutStartSec of 309 digits.
    (root / "etc/suspendguard").mkdir(parents=True)
    (root / CONFIG).write_text("[drain]\ndeadline_s = 1e308\n")
    before = snapshot(root)
    status, out, err = run("install", "--root", str(root))
    assert status == 2, err
    assert err == (f"suspendguard: {root / CONFIG}: [drain] deadline_s (line 2): expected a "
                   "number > 0 and at most 86400, got 1e+308\n")
    assert out == ""
    assert snapshot(root) == before


def test_explicit_config_is_baked_into_unit_and_hook(root: Path) -> None:
    (root / "srv").mkdir()
    (root / "srv/sg.toml").write_text('[state]\ndir = "/srv/sg-state"\n')
    status, _, err = run("install", "--root", str(root), "--config", "/srv/sg.toml")
    assert status == 0, err
    unit = (root / UNIT).read_text()
    assert 'Environment="SUSPENDGUARD_CONFIG=/srv/sg.toml"\n' in unit
    assert "ReadWritePaths=-/srv/sg-state\n" in unit
    assert "export SUSPENDGUARD_CONFIG=/srv/sg.toml\n" in (root / HOOK).read_text()
    assert not (root / CONFIG).exists()
    assert (root / "srv/sg-state").is_dir()
    status, _, err = run("install", "--root", str(root), "--config", "/srv/missing.toml")
    assert status == 2 and "missing.toml" in err


def test_state_dir_the_operator_made_keeps_all_but_history(root: Path) -> None:
    (root / "srv/state").mkdir(parents=True)
    (root / "srv/state/notes.txt").write_text("operator's")
    (root / "etc/suspendguard").mkdir(parents=True)
    (root / CONFIG).write_text('[state]\ndir = "/srv/state"\n')
    assert run("install", "--root", str(root))[0] == 0
    (root / "srv/state/history.db").write_bytes(b"x")
    assert run("uninstall", "--root", str(root), "--purge")[0] == 0
    assert sorted(p.name for p in (root / "srv/state").iterdir()) == ["notes.txt"]
    assert not (root / "var").exists()


def test_no_enable(root: Path) -> None:
    status, out, _ = run("install", "--root", str(root), "--no-enable")
    assert status == 0 and "enabled:" not in out
    assert not any((root / link).is_symlink() for link in links())
    state = read_installation(str(root)).to_json()
    assert state["unit"]["present"] and state["enabled"] == [] and not state["installed"]


def test_uninstall_removes_the_links_of_units_enabled_by_hand(root: Path) -> None:
    # install --no-enable, then systemctl enable as the unit's header says: links the
    # manifest does not list. One left to a removed unit fails every suspend.
    assert run("install", "--root", str(root), "--no-enable")[0] == 0
    for link, target in links().items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)
    other = root / "etc/systemd/system/systemd-suspend.service.requires/other.service"
    other.symlink_to("/etc/systemd/system/other.service")
    status, out, _ = run("uninstall", "--root", str(root))
    assert status == 0
    assert not any((root / link).is_symlink() for link in links())
    assert all(str(root / link) in out for link in links())
    assert other.is_symlink()  # another unit's link stays


def test_a_unit_left_in_place_keeps_the_links_made_by_hand(root: Path) -> None:
    assert run("install", "--root", str(root), "--no-enable")[0] == 0
    for link, target in links().items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)
    with (root / UNIT).open("a") as f:
        f.write("# local change\n")
    status, _, err = run("uninstall", "--root", str(root))
    assert status == 0
    # The changed unit stays, and so do its links; the resume unit's go with it. Each link
    # left is named: the sleep it names still requires a unit the operator may delete next.
    kept = [link for link in links() if "requires" in link]
    assert kept and all((root / link).is_symlink() for link in kept)
    for link in kept:
        sleep = Path(link).parent.name.removesuffix(".requires")
        assert (f"suspendguard: warning: {root / link}: {sleep} still requires /{UNIT} (enabled "
                "by hand, left with the unit): remove the link, or that sleep fails once the "
                "guard is gone") in err.splitlines()
    assert not any((root / link).is_symlink() for link in links() if "wants" in link)


def test_a_resume_unit_left_in_place_is_said_to_be_wanted_not_required(root: Path) -> None:
    # A Wants= fails no sleep: its link left is named for what it does.
    assert run("install", "--root", str(root), "--no-enable")[0] == 0
    wants = {link: target for link, target in links().items() if "wants" in link}
    for link, target in wants.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)
    with (root / RESUME).open("a") as f:
        f.write("# local change\n")
    status, _, err = run("uninstall", "--root", str(root))
    assert status == 0 and all((root / link).is_symlink() for link in wants)
    for link in wants:
        sleep = Path(link).parent.name.removesuffix(".wants")
        assert (f"suspendguard: warning: {root / link}: {sleep} still wants /{RESUME} (enabled "
                "by hand, left with the unit): remove the link, or it goes on starting the "
                "unit") in err.splitlines()


def test_a_file_changed_since_install_is_left_in_place(root: Path) -> None:
    assert run("install", "--root", str(root))[0] == 0
    with (root / UNIT).open("a") as f:
        f.write("# local change\n")
    status, _, err = run("uninstall", "--root", str(root))
    assert status == 0
    assert "changed since install, left in place" in err and str(root / UNIT) in err
    assert (root / UNIT).exists() and not (root / HOOK).exists()


def test_read_installation(root: Path) -> None:
    state = read_installation(str(root)).to_json()
    assert not state["installed"] and not state["unit"]["present"]
    assert not state["hook"]["present"] and not state["config"]["present"]
    assert not state["manifest"]["present"]
    assert run("install", "--root", str(root))[0] == 0
    state = read_installation(str(root)).to_json()
    assert state["installed"]
    assert state["enabled"] == list(ACTIONS)
    assert state["instances"]["suspend"] == {
        "unit": "suspendguard@suspend.service", "enabled": True,
        "link": "/etc/systemd/system/systemd-suspend.service.requires/suspendguard@suspend.service",
        "required_by": ["nvidia-suspend.service", "systemd-suspend.service"],
    }
    assert state["unit"]["path"] == "/etc/systemd/system/suspendguard@.service"
    assert state["unit"]["timeout_start_s"] == 120
    assert state["unit"]["exec_start"] == "/usr/bin/python3 -I -m suspendguard pre-sleep %i"
    # A staged tree names the target's interpreter: not run here.
    assert state["unit"]["interpreter"] == {"path": "/usr/bin/python3", "usable": None,
                                            "reason": None}
    assert state["refusal"] is None
    assert state["hook"] == {"path": "/usr/lib/systemd/system-sleep/suspendguard",
                             "present": True, "executable": True}
    assert state["config"] == {"path": "/etc/suspendguard/config.toml", "present": True}
    assert state["manifest"]["present"] and state["manifest"]["python"] == "/usr/bin/python3"
    json.dumps(state)  # status prints it as JSON
    (root / HOOK).chmod(0o644)
    state = read_installation(str(root)).to_json()
    assert not state["hook"]["executable"] and not state["installed"]


def test_read_installation_sees_a_packaged_unit(tmp_path: Path) -> None:
    unit_folder(tmp_path / "usr/lib/systemd/system",
                {"suspendguard@.service": "[Service]\nTimeoutStartSec=5min\n"},
                {"suspendguard@suspend.service": "../suspendguard@.service"})
    state = read_installation(str(tmp_path)).to_json()
    assert state["unit"]["path"] == "/usr/lib/systemd/system/suspendguard@.service"
    assert state["unit"]["timeout_start_s"] == "5min"
    assert state["enabled"] == ["suspend"]
    # doctor's fix for a package's unit is a drop-in: status shows what systemd runs
    dropin = tmp_path / "etc/systemd/system/suspendguard@.service.d/override.conf"
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\nTimeoutStartSec=300\nExecStart=\n"
                      "ExecStart=/opt/sg/bin/python -I -m suspendguard pre-sleep %i\n")
    unit = read_installation(str(tmp_path)).to_json()["unit"]
    assert unit["timeout_start_s"] == 300
    assert unit["exec_start"] == "/opt/sg/bin/python -I -m suspendguard pre-sleep %i"
    assert unit["interpreter"]["path"] == "/opt/sg/bin/python"
    # a line continued with a backslash, as systemd reads it; a comment inside it is dropped
    dropin.write_text("[Service]\nExecStart=\nExecStart=/opt/sg/bin/python -I -m \\\n"
                      "# the guard's module\n    suspendguard pre-sleep %i\n")
    unit = read_installation(str(tmp_path)).to_json()["unit"]
    assert unit["exec_start"] == "/opt/sg/bin/python -I -m      suspendguard pre-sleep %i"
    assert unit["interpreter"]["path"] == "/opt/sg/bin/python"


def test_a_masked_or_gone_veto_unit_fails_each_sleep_that_requires_it(tmp_path: Path) -> None:
    """A sleep step that requires an instance systemd cannot load fails: status must not
    say the suspend would go ahead."""
    lib, etc = tmp_path / "usr/lib/systemd/system", tmp_path / "etc/systemd/system"
    unit_folder(lib, {"suspendguard@.service": "[Service]\nExecStart=/bin/true\n"},
                {"suspendguard@suspend.service": "../suspendguard@.service"})
    assert read_installation(str(tmp_path)).refusal() is None
    etc.mkdir(parents=True)
    # systemctl mask suspendguard@hibernate.service: no suspend fails for it (doctor says
    # what a hibernation then does)
    (etc / "suspendguard@hibernate.service").symlink_to("/dev/null")
    state = read_installation(str(tmp_path))
    assert state.refusal() is None and ("hibernate", "/etc/systemd/system/"
                                        "suspendguard@hibernate.service") in state.masks
    (etc / "suspendguard@suspend.service").symlink_to("/dev/null")
    assert read_installation(str(tmp_path)).refusal() == (
        "/etc/systemd/system/suspendguard@suspend.service masks suspendguard@suspend.service, "
        "which systemd-suspend.service requires: systemd fails the suspend "
        "(systemctl unmask suspendguard@suspend.service)")
    (etc / "suspendguard@suspend.service").unlink()
    (etc / "suspendguard@.service").write_text("")  # an empty file masks too: the template
    state = read_installation(str(tmp_path))
    assert state.unit is None and state.refusal() == (  # the template's mask is what to lift
        "/etc/systemd/system/suspendguard@.service masks suspendguard@suspend.service, "
        "which systemd-suspend.service requires: systemd fails the suspend "
        "(systemctl unmask suspendguard@.service)")
    (etc / "suspendguard@.service").unlink()
    (lib / "suspendguard@.service").unlink()  # the unit removed, its enable link left
    assert read_installation(str(tmp_path)).refusal() == (
        "the veto unit suspendguard@.service is gone, but enable links still make suspend "
        "require it: systemd fails each (suspendguard install, or remove the enable links)")


def test_check_live_system(tmp_path: Path) -> None:
    with pytest.raises(NotRootError, match="needs root"):
        check_live_system(euid=1000, run_dir=str(tmp_path))
    with pytest.raises(SystemdNotRunningError, match="systemd is not running") as exc:
        check_live_system(euid=0, run_dir=str(tmp_path / "absent"))
    assert exc.value.exit_status == EXIT_ERROR == 3
    check_live_system(euid=0, run_dir=str(tmp_path))


@pytest.mark.skipif(os.path.isdir(SYSTEMD_RUN_DIR) or os.geteuid() != 0,
                    reason="needs root on a machine where systemd is not running")
def test_live_install_without_systemd_is_one_line_exit_3() -> None:
    status, out, err = run("install")
    assert status == 3 and out == ""
    assert err.count("\n") == 1 and "systemd is not running" in err


def _as_nobody(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SUSPENDGUARD_CONFIG"}
    prefix: list[str] = []
    python: str | None = sys.executable
    if os.geteuid() == 0:
        prefix = nobody_prefix() or []
        repo = str(REPO)
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        env["PYTHONPATH"] = os.pathsep.join([repo, *paths])
        python = python_for_nobody(prefix, env)
        if python is None:
            pytest.skip("no python interpreter that user nobody can run imports suspendguard")
    assert python is not None
    return subprocess.run([*prefix, python, "-m", "suspendguard", *argv], capture_output=True,
                          text=True, timeout=60, env=env, cwd="/")


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                    reason="root, and no setpriv to drop to nobody")
@pytest.mark.parametrize("command", ["install", "uninstall"])
def test_not_root_is_one_line_exit_3(command: str) -> None:
    result = _as_nobody([command])
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1 and "needs root" in result.stderr
    assert "Traceback" not in result.stderr


def test_staging_root_that_does_not_exist_yet_is_made(tmp_path: Path) -> None:
    stage = tmp_path / "new" / "stage"
    status, _, err = run("install", "--root", str(stage))
    assert status == 0, err
    assert (stage / "etc/systemd/system/suspendguard@.service").is_file()
    status, _, err = run("uninstall", "--root", str(stage), "--purge")
    assert status == 0, err


# --- the units' interpreter -----------------------------------------------------------

@pytest.mark.parametrize("python", ["/tmp/venv/bin/python", "/var/tmp/x/python3",
                                    "/home/alice/.venv/bin/python", "/root/venv/bin/python"])
def test_interpreter_that_would_not_last_is_refused(root: Path, python: str) -> None:
    before = snapshot(root)
    status, out, err = run("install", "--root", str(root), "--python", python)
    assert status == EXIT_ERROR and out == ""
    assert err.count("\n") == 1, err
    assert f"the units' interpreter {python} is under " in err
    assert err.rstrip().endswith("pass --python PATH with a system interpreter, or --force")
    assert snapshot(root) == before  # nothing written

    status, _, err = run("install", "--root", str(root), "--python", python, "--force")
    assert status == 0, err
    assert f"ExecStart={python} -I -m suspendguard pre-sleep %i\n" in (root / UNIT).read_text()
    assert f"PYTHON={python}\n" in (root / HOOK).read_text()


def test_python_option_names_the_units_interpreter(root: Path) -> None:
    status, _, err = run("install", "--root", str(root), "--python", "/opt/sg/bin/python")
    assert status == 0, err
    assert "ExecStart=/opt/sg/bin/python -I -m suspendguard pre-sleep %i\n" in \
        (root / UNIT).read_text()
    assert read_installation(str(root)).to_json()["manifest"]["python"] == "/opt/sg/bin/python"


def test_probe_runs_the_interpreter(tmp_path: Path) -> None:
    from suspendguard.install.interpreter import probe

    assert probe(sys.executable).usable is True
    missing = probe(str(tmp_path / "gone" / "python"))
    assert missing.usable is False and missing.reason == "is missing"
    link = tmp_path / "python"
    link.symlink_to(tmp_path / "deleted-venv-python")
    assert probe(str(link)).reason == "is a broken link (its target is gone)"
    # An interpreter that runs but has no suspendguard (what a wrong venv gives).
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'suspendguard'\" >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    broken = probe(str(fake))
    assert broken.usable is False
    assert broken.reason == "cannot import suspendguard (ModuleNotFoundError: No module named " \
        "'suspendguard')"

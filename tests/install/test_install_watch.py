"""install --watch staged into a folder (--root): the watch unit rendered, enabled, and undone."""

from __future__ import annotations

from pathlib import Path

from helpers.runners import cli as run

from suspendguard.config import load
from suspendguard.install.templates import WATCH_UNIT, render_watch, template_dir, timeout_start_s

WATCH = "etc/systemd/system/suspendguard-watch.service"
LINK = "etc/systemd/system/multi-user.target.wants/suspendguard-watch.service"


def test_without_watch_there_is_no_watch(tmp_path: Path) -> None:
    status, out, err = run("install", "--root", str(tmp_path))
    assert status == 0, err
    assert not (tmp_path / WATCH).exists() and not (tmp_path / LINK).is_symlink()
    assert "suspendguard-watch" not in out


def test_watch_is_rendered_enabled_and_uninstalled(tmp_path: Path) -> None:
    config = tmp_path / "etc/suspendguard/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[drain]\ndeadline_s = 50\n[state]\ndir = "/srv/sg"\n')
    status, out, err = run("--config", "/etc/suspendguard/config.toml", "install", "--root",
                           str(tmp_path), "--watch")
    assert status == 0, err
    unit = (tmp_path / WATCH).read_text()
    assert "Type=notify\n" in unit and "Restart=on-failure\n" in unit
    assert "ExecStart=/usr/bin/python3 -I -m suspendguard watch\n" in unit
    assert 'Environment="SUSPENDGUARD_CONFIG=/etc/suspendguard/config.toml"\n' in unit
    assert "TimeoutStartSec=70\n" in unit and "WatchdogSec=70\n" in unit
    assert "ReadWritePaths=-/srv/sg\n" in unit
    caps = next(line for line in unit.splitlines() if line.startswith("CapabilityBoundingSet="))
    assert "CAP_KILL" not in caps and "CAP_SETUID" not in caps
    assert (tmp_path / LINK).readlink() == Path("/" + WATCH)
    assert "enabled: " in out and "suspendguard-watch.service" in out.split("enabled: ")[1]

    status, out, err = run("uninstall", "--root", str(tmp_path))
    assert status == 0, err
    assert not (tmp_path / WATCH).exists() and not (tmp_path / LINK).is_symlink()


def test_watch_with_no_enable_is_installed_but_not_enabled(tmp_path: Path) -> None:
    status, _, err = run("install", "--root", str(tmp_path), "--watch", "--no-enable")
    assert status == 0, err
    assert (tmp_path / WATCH).is_file() and not (tmp_path / LINK).is_symlink()


def test_the_shipped_unit_is_the_default_rendering() -> None:
    """The packages ship systemd/suspendguard-watch.service as it is: it must be what install
    renders for /usr/bin/python3 and the default configuration."""
    shipped = (template_dir() / WATCH_UNIT).read_text()
    assert render_watch(shipped, "/usr/bin/python3", timeout_start_s(load(None, {}))) == shipped


def test_install_again_without_watch_renders_the_installed_watch_again(tmp_path: Path) -> None:
    """docs/installing.md: run install again after changing deadline_s (or the interpreter).
    A watch installed before must follow, or it keeps a WatchdogSec= its looks may outlast
    and an interpreter that may be gone (Restart=on-failure then restarts it every 5 s)."""
    config = tmp_path / "etc/suspendguard/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[drain]\ndeadline_s = 50\n")
    assert run("install", "--root", str(tmp_path), "--watch", "--python",
               "/opt/old/bin/python3")[0] == 0
    config.write_text("[drain]\ndeadline_s = 80\n")
    status, _, err = run("install", "--root", str(tmp_path), "--python", "/opt/new/bin/python3")
    assert status == 0, err
    unit = (tmp_path / WATCH).read_text()
    assert "ExecStart=/opt/new/bin/python3 -I -m suspendguard watch\n" in unit
    assert "TimeoutStartSec=100\n" in unit and "WatchdogSec=100\n" in unit
    assert (tmp_path / LINK).is_symlink()
    status, _, err = run("uninstall", "--root", str(tmp_path))
    assert status == 0 and "changed since install" not in err, err
    assert not (tmp_path / WATCH).exists() and not (tmp_path / LINK).is_symlink()

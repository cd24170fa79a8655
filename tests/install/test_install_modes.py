"""What install keeps root's alone: the manifest (0600), which lists what uninstall removes,
and the folders it and the history live in (0700), as every guard run keeps them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from helpers.runners import cli as run

MANIFEST = "var/lib/suspendguard/installed.json"
CONFIG = "etc/suspendguard/config.toml"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_manifest_s_folder_is_root_s_alone_when_the_history_lives_elsewhere(
        tmp_path: Path) -> None:
    (tmp_path / CONFIG).parent.mkdir(parents=True)
    (tmp_path / CONFIG).write_text('[state]\ndir = "/srv/state"\n')
    status, _, err = run("install", "--root", str(tmp_path))
    assert status == 0, err
    assert mode(tmp_path / "var/lib/suspendguard") == 0o700
    assert mode(tmp_path / MANIFEST) == 0o600
    assert mode(tmp_path / "srv/state") == 0o700


def test_folders_others_could_read_are_made_root_s_alone_at_reinstall(tmp_path: Path) -> None:
    (tmp_path / CONFIG).parent.mkdir(parents=True)
    (tmp_path / CONFIG).write_text('[state]\ndir = "/srv/state"\n')
    (tmp_path / "srv/state").mkdir(parents=True)
    (tmp_path / "srv/state").chmod(0o755)  # the operator's, made before the install
    assert run("install", "--root", str(tmp_path))[0] == 0
    (tmp_path / "var/lib/suspendguard").chmod(0o755)  # as installs before made it
    (tmp_path / MANIFEST).chmod(0o644)
    status, _, err = run("install", "--root", str(tmp_path))
    assert status == 0, err
    assert mode(tmp_path / "srv/state") == 0o700
    assert mode(tmp_path / "var/lib/suspendguard") == 0o700
    assert mode(tmp_path / MANIFEST) == 0o600


def test_a_link_left_where_the_manifest_is_written_first_is_not_followed(
        tmp_path: Path) -> None:
    assert run("install", "--root", str(tmp_path))[0] == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not the manifest\n")
    elsewhere.chmod(0o644)
    (tmp_path / "var/lib/suspendguard/.installed.json.suspendguard-tmp").symlink_to(elsewhere)
    status, _, err = run("install", "--root", str(tmp_path))
    assert status == 0, err
    assert elsewhere.read_text() == "not the manifest\n" and mode(elsewhere) == 0o644
    manifest = tmp_path / MANIFEST
    assert stat.S_ISREG(manifest.lstat().st_mode) and mode(manifest) == 0o600
    assert os.listdir(tmp_path / "var/lib/suspendguard") == ["installed.json"]

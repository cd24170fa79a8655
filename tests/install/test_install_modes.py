"""What install keeps root's alone: the manifest (0600), which lists what uninstall removes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from helpers.runners import cli as run

MANIFEST = "var/lib/suspendguard/installed.json"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


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

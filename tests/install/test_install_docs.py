"""install puts the man pages and the completion in /usr/local/share; uninstall removes them."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from helpers import REPO

from suspendguard.cli import main
from suspendguard.errors import InstallError
from suspendguard.install.docs import DOCS, docs_dir

MANIFEST = "var/lib/suspendguard/installed.json"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err, environ={}), out.getvalue(), err.getvalue()


def test_install_copies_the_shipped_pages_and_completion(tmp_path: Path) -> None:
    status, out, err = run("install", "--root", str(tmp_path), "--no-enable")
    assert status == 0, err
    assert {k: v for k, v in DOCS.items()} == {
        "man/suspendguard.8": "/usr/local/share/man/man8/suspendguard.8",
        "man/suspendguard.toml.5": "/usr/local/share/man/man5/suspendguard.toml.5",
        "completion/suspendguard": "/usr/local/share/bash-completion/completions/suspendguard",
        "completion/_suspendguard": "/usr/local/share/zsh/site-functions/_suspendguard",
    }
    for source, path in DOCS.items():
        target = tmp_path / path.lstrip("/")
        assert target.read_bytes() == (REPO / source).read_bytes(), path
        assert target.stat().st_mode & 0o777 == 0o644
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert set(DOCS.values()) <= set(manifest["files"])
    assert "/usr/local/share/man/man8" in manifest["dirs"]
    assert str(tmp_path / "usr/local/share") in out


def test_uninstall_removes_them_and_the_folders_install_made(tmp_path: Path) -> None:
    (tmp_path / "usr/local/share/man").mkdir(parents=True)  # there before, as on Debian
    assert run("install", "--root", str(tmp_path), "--no-enable")[0] == 0
    assert run("uninstall", "--root", str(tmp_path))[0] == 0
    for path in DOCS.values():
        assert not (tmp_path / path.lstrip("/")).exists(), path
    assert sorted(os.listdir(tmp_path / "usr/local/share")) == ["man"]
    assert os.listdir(tmp_path / "usr/local/share/man") == []


def test_a_page_the_operator_changed_stays(tmp_path: Path) -> None:
    assert run("install", "--root", str(tmp_path), "--no-enable")[0] == 0
    page = tmp_path / DOCS["man/suspendguard.8"].lstrip("/")
    page.write_text(".TH LOCAL 8\n")
    status, _out, err = run("uninstall", "--root", str(tmp_path))
    assert status == 0 and f"{page}: changed since install, left in place" in err
    assert page.read_text() == ".TH LOCAL 8\n"


def test_docs_dir_prefers_package_data_and_says_what_is_missing(tmp_path: Path) -> None:
    package = tmp_path / "site" / "suspendguard"
    for source in DOCS:
        (package / "data" / source).parent.mkdir(parents=True, exist_ok=True)
        (package / "data" / source).write_text(source)
    assert docs_dir(package) == package / "data"
    (package / "data" / "completion" / "_suspendguard").unlink()
    with pytest.raises(InstallError, match=r"completion/_suspendguard"):
        docs_dir(package)


def test_pages_that_cannot_be_written_do_not_stop_the_install(tmp_path: Path) -> None:
    # as on a read-only /usr: a file where the man folder should be fails even for root
    (tmp_path / "usr/local/share").mkdir(parents=True)
    (tmp_path / "usr/local/share/man").write_text("not a folder")
    status, out, err = run("install", "--root", str(tmp_path), "--no-enable")
    assert status == 0, err
    assert "man pages and completion: not installed (" in out
    assert (tmp_path / "etc/systemd/system/suspendguard@.service").is_file()
    assert (tmp_path / "usr/lib/systemd/system-sleep/suspendguard").is_file()
    assert json.loads((tmp_path / MANIFEST).read_text())["files"].keys().isdisjoint(DOCS.values())

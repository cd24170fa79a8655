"""Issue 15 item 11: `install --root ''` never means the running system; --config goes in absolute."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from suspendguard.cli import main
from suspendguard.commands.context import Context
from suspendguard.commands.install import _config_for


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err, environ={})
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", ["install", "uninstall"])
@pytest.mark.parametrize("root", ["", " "])
def test_an_empty_root_is_refused_before_anything_is_done(command: str, root: str) -> None:
    status, out, err = run(command, "--root", root)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "--root needs a folder" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["install", "uninstall"])
def test_a_root_that_is_a_file_is_named_so(command: str, tmp_path: Path) -> None:
    (tmp_path / "root").write_text("")
    assert run(command, "--root", str(tmp_path / "root")) == (
        2, "", f"suspendguard: --root {tmp_path / 'root'}: not a folder\n")


def test_a_relative_interpreter_is_refused_for_a_staged_install(tmp_path: Path) -> None:
    stage = tmp_path / "root"
    status, _, err = run("install", "--root", str(stage), "--python", "venv/bin/python3")
    assert status == 2 and err == (
        "suspendguard: --python venv/bin/python3: with --root, give the interpreter's path in "
        "the target system, as an absolute path\n")
    assert not stage.exists() or not any(stage.rglob("*.service"))


def test_a_relative_config_is_refused_for_a_staged_install(tmp_path: Path) -> None:
    stage = tmp_path / "root"
    status, _, err = run("install", "--root", str(stage), "--config", "srv/sg.toml")
    assert status == 2 and "absolute path" in err, err
    assert not stage.exists() or not any(stage.rglob("*.service"))


def test_a_relative_config_is_made_absolute_for_the_running_system(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sg.toml").write_text("[drain]\ntimeout_s = 7\n")
    monkeypatch.chdir(tmp_path)
    ctx = Context("sg.toml", io.StringIO(), io.StringIO(), {})
    config, path, explicit = _config_for(ctx, None)
    assert (path, explicit) == (os.path.join(str(tmp_path), "sg.toml"), True)
    assert config.drain.timeout_s == 7

"""Root judges a configured path where the kernel's lookup lands: a ``..`` after a symlink
steps up from the symlink's target, never from the text before it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.isolation import needs_root
from helpers.runners import cli
from helpers.users import unknown_uid

from suspendguard.config import trust
from suspendguard.errors import EXIT_UNTRUSTED


def users_folder(tmp_path: Path) -> tuple[Path, int]:
    """``userdir`` (with ``sub`` and a program ``npu-smi`` in it), all a user's own, and a
    root symlink ``lnk`` to ``userdir/sub``: ``lnk/../npu-smi`` is that user's program,
    while ``npu-smi`` beside ``lnk`` does not exist. (userdir, the user's uid)"""
    uid = unknown_uid()
    userdir = tmp_path / "userdir"
    (userdir / "sub").mkdir(parents=True)
    program = userdir / "npu-smi"
    program.write_text("#!/bin/sh\necho ran\n")
    program.chmod(0o755)
    for path in (userdir, userdir / "sub", program):
        os.chown(path, uid, uid)
    (tmp_path / "lnk").symlink_to(userdir / "sub")
    return userdir, uid


@needs_root
@pytest.mark.parametrize(("section", "key"), [
    ("idle", "npu_smi"), ("idle", "ascend_env"), ("idle", "dcmi_library"),
    ("resume", "modprobe"), ("slurm", "scontrol"), ("state", "dir"),
])
def test_a_dotdot_after_a_symlink_is_judged_where_it_lands(tmp_path: Path, section: str,
                                                           key: str) -> None:
    userdir, uid = users_folder(tmp_path)
    # [state] dir names a folder the guard would make in the user's folder.
    name = "state" if key == "dir" else "npu-smi"
    conf = tmp_path / "c.toml"
    conf.write_text(f'[{section}]\n{key} = "{tmp_path}/lnk/../{name}"\n')
    code, out, err = cli("--config", str(conf), "config")
    assert (code, out) == (EXIT_UNTRUSTED, ""), err
    assert err.count("\n") == 1, err
    assert f"[{section}] {key} {tmp_path}/lnk/../{name} ({userdir}): owned by uid {uid}" in err, err


@needs_root
def test_a_relative_program_path_is_judged_from_the_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    userdir, uid = users_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "c.toml"
    conf.write_text('[idle]\nnpu_smi = "lnk/../npu-smi"\n')
    code, _, err = cli("--config", str(conf), "config")
    assert code == EXIT_UNTRUSTED, err
    assert f"[idle] npu_smi {tmp_path}/lnk/../npu-smi ({userdir}): owned by uid {uid}" in err, err


@needs_root
def test_the_config_file_through_a_symlink_and_dotdot_is_the_one_read(tmp_path: Path) -> None:
    # A root file where the text would land, the user's file where the kernel does: the
    # user's is read, and judged (not called "replaced" for the root one beside the link).
    userdir, uid = users_folder(tmp_path)
    (tmp_path / "c.toml").write_text("")
    theirs = userdir / "c.toml"
    theirs.write_text("[drain]\ntimeout_s = 9\n")
    os.chown(theirs, uid, uid)
    code, _, err = cli("--config", f"{tmp_path}/lnk/../c.toml", "config")
    assert code == EXIT_UNTRUSTED, err
    assert f"configuration file {tmp_path}/lnk/../c.toml ({userdir}): owned by uid {uid}" in err, err
    assert "replaced" not in err, err


@needs_root
def test_a_symlink_target_holding_dotdot_steps_up_from_where_it_leads(tmp_path: Path) -> None:
    userdir, uid = users_folder(tmp_path)
    (tmp_path / "tool").symlink_to("lnk/../npu-smi")
    assert trust.problems(str(tmp_path / "tool"), "x") == [
        f"x {tmp_path / 'tool'} ({userdir}): owned by uid {uid}, not root"]
    # Up and down again through root's folders only: trusted.
    root_tool = tmp_path / "bin" / "tool"
    root_tool.parent.mkdir()
    root_tool.write_text("")
    (tmp_path / "up").symlink_to(tmp_path / "bin")
    assert trust.problems(f"{tmp_path}/up/../bin/./tool", "x") == []
    assert trust.problems(f"{tmp_path}/bin/tool/..", "x") == []  # a file as a folder: no lookup


@needs_root
def test_a_state_dir_through_a_symlink_to_dotdot_is_refused(tmp_path: Path) -> None:
    # ``there`` -> ``lnk/..``: the kernel reaches the user's folder, the text tmp_path.
    userdir, uid = users_folder(tmp_path)
    (tmp_path / "there").symlink_to("lnk/..")
    conf = tmp_path / "c.toml"
    conf.write_text(f'[state]\ndir = "{tmp_path}/there/state"\n')
    code, out, err = cli("--config", str(conf), "config")
    assert (code, out) == (EXIT_UNTRUSTED, ""), err
    assert f"[state] dir {tmp_path}/there/state ({userdir}): owned by uid {uid}" in err, err

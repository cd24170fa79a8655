"""Issue 15 item 1: root acts only on a configuration, and programs, that root alone can change."""

from __future__ import annotations

import importlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders
from helpers.isolation import ROOT, needs_root

from suspendguard.config import load, trust
from suspendguard.config.trust import slurm_untrusted
from suspendguard.errors import EXIT_UNTRUSTED
from suspendguard.idle.base import find_file

from .helpers import cli, one_line

NOBODY = 65534
# The module, not the function config/__init__.py names the same.
load_module = importlib.import_module("suspendguard.config.load")


def planted(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A program anyone may rewrite (0777) that root would run, and the file it leaves
    when it runs."""
    marker = tmp_path / "ran"
    fake = tmp_path / name
    fake.write_text(f"#!/bin/sh\necho ran > {marker}\n")
    fake.chmod(0o777)
    return fake, marker


def write_conf(path: Path, node: str, state: Path, extra: str = "") -> Path:
    path.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\ndir = "{state}"\n'
                    f'[drain]\ntimeout_s = 5\n{extra}')
    return path


@needs_root
@pytest.mark.parametrize("how", ["world-writable file", "file owned by nobody",
                                 "world-writable folder", "symlink to nobody's file"])
def test_untrusted_config_signals_nobody(tmp_path: Path, node: str, holders: Holders,
                                         how: str) -> None:
    _, pid = holders.start(node)
    folder = tmp_path / "etc"
    folder.mkdir(mode=0o755)
    conf = write_conf(folder / "config.toml", node, tmp_path / "state",
                      '[idle]\nbackends = []\n')
    if how == "world-writable file":
        conf.chmod(0o666)
    elif how == "file owned by nobody":
        os.chown(conf, NOBODY, NOBODY)
    elif how == "world-writable folder":
        folder.chmod(0o777)
    else:
        users = tmp_path / "home"
        users.mkdir(mode=0o755)
        theirs = users / "mine.toml"
        conf.rename(theirs)
        os.chown(theirs, NOBODY, NOBODY)
        conf.symlink_to(theirs)
    status, out, err = cli("pre-sleep", "suspend", "--config", str(conf))
    assert status == EXIT_UNTRUSTED, (out, err)
    # One line says it; the others say who was told of the refusal (docs/notify.md).
    said = [line for line in err.splitlines() if "notify:" not in line]
    assert one_line("\n".join(said) + "\n"), err
    assert "untrusted configuration" in said[0] and str(conf) in said[0]
    assert holders.signals() == []
    os.kill(pid, 0)  # still running


# Each program root runs, by the command that would run it: the idle backend's (check),
# the reload after resume (restore), scontrol (slurm health and sync, as root).
PROGRAMS = [
    ("npu-smi", '[idle]\nbackends = ["npu-smi"]\nnpu_smi = "{fake}"\n', "[idle] npu_smi",
     ("check", "--dry-run")),
    ("modprobe", '[idle]\nbackends = []\n[resume]\nmodprobe = "{fake}"\n', "[resume] modprobe",
     ("restore",)),
    ("scontrol", '[idle]\nbackends = []\n[slurm]\nscontrol = "{fake}"\n'
     'exclude_file = "{tmp}/exclude.conf"\n', "[slurm] scontrol", ("slurm", "sync")),
]


@needs_root
@pytest.mark.parametrize(("name", "toml", "key", "argv"), PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_an_untrusted_program_is_never_run(tmp_path: Path, node: str, name: str, toml: str,
                                           key: str, argv: tuple[str, ...]) -> None:
    fake, marker = planted(tmp_path, name)
    conf = write_conf(tmp_path / "c.toml", node, tmp_path / "state",
                      toml.format(fake=fake, tmp=tmp_path))
    status, _, err = cli("--config", str(conf), *argv)
    assert status == EXIT_UNTRUSTED, err
    assert one_line(err) and key in err and "world-writable" in err
    assert not marker.exists()


@needs_root
def test_status_leads_with_the_refusal_and_runs_nothing(tmp_path: Path, node: str) -> None:
    fake, marker = planted(tmp_path, "npu-smi")
    conf = write_conf(tmp_path / "c.toml", node, tmp_path / "state",
                      f'[idle]\nbackends = ["npu-smi"]\nnpu_smi = "{fake}"\n')
    env = {"PATH": os.defpath, "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path / 'no-bus'}"}
    status, out, _ = cli("status", "--config", str(conf), environ=env)
    assert status == 0
    first = out.splitlines()[0]
    assert "every suspend will be refused: the config cannot be trusted" in first, out
    assert "[idle] npu_smi" in first
    assert not marker.exists()


@needs_root
@pytest.mark.parametrize("key", ["remote", "guard", "power_off", "power_on"])
def test_the_slurm_command_lines_root_runs_are_held_to_the_rule(
        tmp_path: Path, node: str, key: str) -> None:
    # The remote and the power actions run on the controller (slurm suspend and resume, as
    # SlurmUser or root), the guard where the node is this host: their first word is a
    # program root runs.
    fake, marker = planted(tmp_path, "off.sh")
    conf = write_conf(tmp_path / "c.toml", node, tmp_path / "state",
                      f'[idle]\nbackends = []\n[slurm]\n{key} = ["{fake}", "{{node}}"]\n'
                      f'exclude_file = "{tmp_path}/exclude.conf"\n')
    [why] = slurm_untrusted(load(str(conf)), {"PATH": os.defpath})
    assert why.startswith(f"[slurm] {key} {fake}: ") and "world-writable" in why, why
    for step in ("suspend", "resume"):
        status, _, err = cli("--config", str(conf), "slurm", step, "node1")
        assert status == EXIT_UNTRUSTED and one_line(err) and f"[slurm] {key}" in err, err
    assert not marker.exists()
    # Run as SlurmUser, whose files they may be, nothing else runs them: the node's own
    # commands (pre-sleep on every node) take the configuration.
    assert load(str(conf)).trust == ()
    status, _, err = cli("--config", str(conf), "check", "--dry-run")
    assert status == 0, err


@needs_root
def test_untrusted_program_on_path(tmp_path: Path, node: str) -> None:
    planted = tmp_path / "bin"
    planted.mkdir()
    planted.chmod(0o777)
    conf = write_conf(tmp_path / "c.toml", node, tmp_path / "state", '[idle]\nbackends = []\n')
    config = load(str(conf), {"PATH": f"{planted}:/usr/bin"})
    assert any("[idle] npu_smi" in p and "world-writable" in p and str(planted) in p for p in config.trust)


@needs_root
def test_trusted_config_is_obeyed(tmp_path: Path, node: str, holders: Holders) -> None:
    _, pid = holders.start(node)
    real = tmp_path / "real.toml"
    write_conf(real, node, tmp_path / "state", '[idle]\nbackends = []\n')
    conf = tmp_path / "config.toml"
    conf.symlink_to(real)  # a root-owned symlink to a root-owned file is fine
    assert load(str(conf)).trust == ()
    status, _, err = cli("pre-sleep", "suspend", "--config", str(conf))
    assert status == 0, err
    assert holders.signals() == [f"{pid} SIGINT"]


def test_not_root_trusts_its_own_files(tmp_path: Path, node: str) -> None:
    conf = write_conf(tmp_path / "c.toml", node, tmp_path / "state")
    conf.chmod(0o666)
    assert load(str(conf), as_root=False).trust == ()
    assert load(str(conf), as_root=True).trust


def test_rule_walks_every_component(tmp_path: Path) -> None:
    if not ROOT:
        pytest.skip("ownership by root is what is judged")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777 | stat.S_IFDIR)
    mine = sticky / "mine"
    mine.write_text("")
    mine.chmod(0o644)
    assert trust.problems(str(mine), "x") == []  # a root entry in a sticky folder
    os.chown(mine, NOBODY, NOBODY)
    assert trust.problems(str(mine), "x") == [f"x {mine}: owned by uid {NOBODY}, not root"]
    link = tmp_path / "link"
    link.symlink_to(mine)
    assert "owned by uid 65534" in trust.problems(str(link), "x")[0]
    # A missing file is judged by the folders that would hold it.
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    assert "world-writable" in trust.problems(str(open_folder / "absent" / "tool"), "x")[0]
    assert trust.problems("relative/tool", "x") == ["x relative/tool: not an absolute path"]


@needs_root
def test_a_default_tool_path_root_cannot_trust_is_not_used(tmp_path: Path) -> None:
    # A built-in default (say /usr/local/Ascend/...) under a folder anyone may
    # write: root must not load or run it, and the device reads unknown.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    tool = shared / "npu-smi"
    tool.write_text("#!/bin/sh\n")
    found, why = find_file("", [str(tool)], "npu_smi", "npu-smi not found")
    assert found is None
    assert str(shared) in why and "not used" in why
    shared.chmod(0o755)
    assert find_file("", [str(tool)], "npu_smi", "npu-smi not found") == (str(tool), "")


@needs_root
def test_a_config_gone_once_read_is_not_trusted(tmp_path: Path, node: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # In a sticky folder (/tmp) a user's file is removed by that user at will: one
    # read, then removed before its check, must not pass as a path that does not exist.
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    conf = write_conf(sticky / "sg.toml", node, tmp_path / "state", '[idle]\nbackends = []\n')
    os.chown(conf, NOBODY, NOBODY)
    build = load_module.build

    def removed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        conf.unlink()
        return build(*args, **kwargs)

    monkeypatch.setattr(load_module, "build", removed_meanwhile)
    trust = load(str(conf), {"PATH": os.defpath}).trust
    assert any(str(conf) in p and "replaced" in p for p in trust), trust


@needs_root
def test_a_program_missing_from_a_sticky_folder_is_not_trusted(tmp_path: Path, node: str) -> None:
    # Any user may make /tmp/x/npu-smi in a sticky /tmp once root judged it missing.
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    missing = sticky / "ascend" / "npu-smi"
    conf = write_conf(tmp_path / "c.toml", node, tmp_path / "state",
                      f'[idle]\nbackends = ["npu-smi"]\nnpu_smi = "{missing}"\n')
    found = load(str(conf), {"PATH": os.defpath}).trust
    assert any("[idle] npu_smi" in p and "does not exist" in p and str(sticky) in p
               for p in found), found
    # Missing under a folder of root's alone: only root can make it.
    owned = tmp_path / "opt"
    owned.mkdir(mode=0o755)
    assert trust.problems(str(owned / "ascend" / "npu-smi"), "x") == []


@needs_root
def test_status_reads_the_mode_where_pre_sleep_does_while_the_config_is_untrusted(
        tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # pre-sleep cannot load a config root may not trust: it reads the mode in the unit's own
    # folder, where `mode` writes it then. This one stands in for the host's.
    from dataclasses import replace

    from suspendguard.config import defaults
    from suspendguard.status import collect as collecting
    from suspendguard.store import mode

    unit_state = tmp_path / "unit-state"
    built_in = defaults()
    monkeypatch.setattr(collecting, "defaults", lambda: replace(
        built_in, state=replace(built_in.state, dir=str(unit_state))))
    conf = write_conf(tmp_path / "c.toml", node, tmp_path / "state", '[idle]\nbackends = []\n')
    conf.chmod(0o666)
    mode.write(str(tmp_path / "state"), "enforce")  # the untrusted file's own folder
    mode.write(str(unit_state), "off")
    s = collecting.collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS":
                                       f"unix:path={tmp_path / 'no-bus'}"})
    assert s.setup_refusal() is not None and "cannot be trusted" in s.setup_refusal()
    assert s.mode.name == "off"

"""SuspendProgram's allow path with a site power action ([slurm] power_off), on real children.

The node's guard is a child printing the answer a node gives; the power
action is a child too, and scontrol the suite's stand-in (fake_slurm). The
hold and the exclusion against slurmctld itself are tested on the booted
cluster (tests/containers/test_slurm_container.py).
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers.fake_slurm import FakeSlurm
from helpers.fake_slurm import node as slurm_node
from helpers.isolation import needs_root

from suspendguard.config.load import defaults
from suspendguard.slurm import controller as controller_module
from suspendguard.slurm.controller import Controller
from suspendguard.slurm.exclusion import write_if_changed
from suspendguard.system.log import Logger

# The remote's stand-in: it runs the rest of its command line, as ssh does on the node, and
# tells the stand-in guard which node it was asked for.
REMOTE = ("/usr/bin/env", "SG_NODE={node}")


def answering(verdict: str) -> tuple[str, ...]:
    """A node's guard answering ``verdict``, as the node it was asked for (through REMOTE)."""
    why = [] if verdict == "allow" else [{"code": "sigint-ignored", "text": "pid 7 ignores SIGINT"}]
    doc = {"verdict": verdict, "reasons": [w["text"] for w in why], "reason_details": why}
    return (sys.executable, "-c", f"import json, os; print(json.dumps({{**{doc!r}, "
            "'node': os.environ['SG_NODE']}))")


def controller(tmp_path: Path, verdict: str, power_off: tuple[str, ...],
               scontrol: str = "/nonexistent/scontrol") -> tuple[Controller, io.StringIO]:
    config = replace(defaults().slurm, remote=REMOTE, guard=answering(verdict),
                     power_off=power_off, scontrol=scontrol,
                     exclude_file=str(tmp_path / "exclude.conf"))
    err = io.StringIO()
    return Controller(config, Logger(err, {}), local="ctl"), err


def going_down(tmp_path: Path) -> FakeSlurm:
    """slurmctld's stand-in, counting gpu3 going down, as SuspendProgram finds it."""
    return FakeSlurm(tmp_path, {"gpu3": slurm_node(("POWERING_DOWN",))})


def test_an_allowed_node_is_powered_off_by_the_site_command_with_its_name(tmp_path: Path) -> None:
    seen = tmp_path / "powered-off"
    off = (sys.executable, "-c", f"open({str(seen)!r}, 'a').write('{{node}}\\n')")
    c, err = controller(tmp_path, "allow", off, str(going_down(tmp_path).path))
    assert c._suspend_one("gpu3")
    assert seen.read_text() == "gpu3\n"
    assert "gpu3: the guard allowed; powered off" in err.getvalue()


@pytest.mark.parametrize(("state", "flags"), [
    ("ALLOCATED", ("POWERED_DOWN",)),  # a job placed on it, past SuspendTimeout
    ("ALLOCATED", ("POWERING_UP",)),  # and the node being woken for it
    ("IDLE", ()),  # its slurmd registered (at a reconfigure): up again
])
def test_a_node_slurm_took_back_while_its_guard_drained_is_not_powered_off(
        tmp_path: Path, state: str, flags: tuple[str, ...]) -> None:
    # The sync before the question and the drain may outlast SuspendTimeout: the node is
    # POWERED_DOWN to Slurm by then, and a job may be placed on it. Powered off, the node
    # would take that job down; its jobs outside Slurm are started again instead.
    fake = going_down(tmp_path)
    asked, seen = tmp_path / "asked", tmp_path / "powered-off"
    guard = (sys.executable, "-c", f"""
import json, sys
open({str(asked)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[3] == "prepare":  # slurmctld places a job while the node drains
    with open({str(fake.state)!r}) as f:
        doc = json.load(f)
    doc["nodes"]["gpu3"].update(state={state!r}, flags={list(flags)!r})
    with open({str(fake.state)!r}, "w") as f:
        json.dump(doc, f)
print(json.dumps({{"node": "gpu3", "verdict": "allow", "reasons": [], "reason_details": [],
                  "attempt": 7}}))""")
    c, err = controller(tmp_path, "allow", (sys.executable, "-c", f"open({str(seen)!r}, 'a')"),
                        str(fake.path))
    c.config = replace(c.config, guard=guard)
    assert not c._suspend_one("gpu3")
    assert not seen.exists()
    assert asked.read_text().splitlines() == ["slurm node prepare --as gpu3",
                                              "slurm node restart --attempt 7 --as gpu3"]
    assert ("gpu3: not powered off: Slurm no longer counts it going down "
            f"({'+'.join([state, *flags])}); left to Slurm") in err.getvalue(), err.getvalue()
    assert fake.node("gpu3") == slurm_node(flags, state=state)  # not drained: no hold


def test_a_refused_node_is_never_powered_off(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_module, "SCONTROL_PAUSE_S", 0.0)  # no scontrol to wait for
    seen = tmp_path / "powered-off"
    off = (sys.executable, "-c", f"open({str(seen)!r}, 'a').write('x')")
    c, err = controller(tmp_path, "veto", off)
    assert not c._suspend_one("gpu3")
    assert not seen.exists()
    # No slurmctld here: the hold says so, and nothing was powered off.
    assert "gpu3: not powered down: suspendguard: sigint-ignored: pid 7 ignores SIGINT" in err.getvalue()
    assert "could not be drained" in err.getvalue()


def test_an_answer_no_guard_gives_holds_the_node_up_as_unreachable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_module, "SCONTROL_PAUSE_S", 0.0)
    seen = tmp_path / "powered-off"
    c, err = controller(tmp_path, "veto", (sys.executable, "-c", f"open({str(seen)!r}, 'a')"))
    garbled = json.dumps({"verdict": "veto", "reason_details": 5})
    c.config = replace(c.config, guard=(sys.executable, "-c", f"print({garbled!r})"))
    assert not c._suspend_one("gpu3")
    assert not seen.exists()
    assert ("gpu3: not powered down: suspendguard: node-unreachable: the guard on gpu3 did not "
            "answer: its answer is not a guard's (reason_details 5)") in err.getvalue()


def test_a_failed_power_action_holds_the_node_up(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_module, "REGISTER_S", 0.1)
    monkeypatch.setattr(controller_module, "REGISTER_AFTER_RESTART_S", 0.1)
    c, err = controller(tmp_path, "allow", (sys.executable, "-c", "import sys; sys.exit(3)"),
                        str(going_down(tmp_path).path))
    assert not c._suspend_one("gpu3")
    assert "gpu3: not powered down: suspendguard: power-action-failed: [slurm] power_off:" \
        in err.getvalue()


NOBODY = 65534


def slurm_folder(tmp_path: Path) -> tuple[Path, Path]:
    """SlurmUser's folder (here nobody's), where the exclusion file lives, and a folder of root's."""
    theirs = tmp_path / "slurm"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    root_dir = tmp_path / "etc"
    root_dir.mkdir(mode=0o755)
    return theirs, root_dir


@needs_root
def test_sync_as_root_never_creates_a_file_through_a_link_slurmuser_planted(tmp_path: Path) -> None:
    theirs, root_dir = slurm_folder(tmp_path)
    path = theirs / "exclude.conf"
    for mark, target in (("lock", "by-lock"), ("reread", "by-reread")):
        link = theirs / f"exclude.conf.{mark}"
        link.symlink_to(root_dir / target)
        os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    config = replace(defaults().slurm, scontrol="/nonexistent/scontrol", exclude_file=str(path))
    err = io.StringIO()
    assert not Controller(config, Logger(err, {}), local="ctl").sync()
    with pytest.raises(OSError):
        write_if_changed(path, "SuspendExcNodes=gpu1\n", theirs / "exclude.conf.reread")
    assert sorted(os.listdir(root_dir)) == []


@needs_root
def test_the_exclusion_file_mode_is_set_through_its_descriptor(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    theirs, root_dir = slurm_folder(tmp_path)
    secret = root_dir / "shadow"
    secret.write_text("root:$6$hash\n")
    secret.chmod(0o600)
    real = tempfile.mkstemp

    def swapped(**kwargs: Any) -> tuple[int, str]:
        # SlurmUser wins the race: the temporary name is a link to root's file by now.
        fd, tmp = real(**kwargs)
        os.unlink(tmp)
        os.symlink(secret, tmp)
        return fd, tmp

    monkeypatch.setattr(tempfile, "mkstemp", swapped)
    write_if_changed(theirs / "exclude.conf", "SuspendExcNodes=gpu1\n")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert secret.read_text() == "root:$6$hash\n"


WHERE = ("import json, os; print(json.dumps({'verdict': 'allow', 'node': os.environ.get("
         "'SG_NODE', 'ctl'), 'via': os.environ.get('SG_VIA', 'directly')}))")


@pytest.mark.parametrize(("euid", "via"), [(0, "directly"), (64030, "remote")])
def test_the_controller_s_own_node_is_asked_directly_only_as_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, euid: int, via: str) -> None:
    # slurmctld runs SuspendProgram and ResumeProgram as SlurmUser: this host's guard,
    # run directly, would be SlurmUser's (blind to other users' processes, unable to
    # drain them or to restart slurmd). Through the remote it is root's, as on any node.
    config = replace(defaults().slurm, remote=(*REMOTE, "SG_VIA=remote"),
                     guard=(sys.executable, "-c", WHERE))
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    c = Controller(config, Logger(io.StringIO(), {}), local="ctl")
    assert c.ask("ctl", "awake") == {"verdict": "allow", "node": "ctl", "via": via}
    assert c.ask("node2", "awake") == {"verdict": "allow", "node": "node2", "via": "remote"}

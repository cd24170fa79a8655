"""Built-in exemptions by identity, on real processes: a name or a command line earns none.

A driver daemon's exemption needs its uid and its executable (guard/identity.py);
the guard's own probe needs a parent that holds the state folder's guard.lock.
Every process here is one the test started, holding a node of the suite's rdev.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES
from helpers.isolation import needs_root
from helpers.runners import guard
from helpers.users import nobody_prefix, python_for_nobody
from helpers.wait import wait_for

from suspendguard.guard.identity import names_probe, vouch
from suspendguard.guard.inventory import DAEMON_USERS, FAMILY_DAEMONS, take_inventory
from suspendguard.guard.policy import decide
from suspendguard.guard.render import render
from suspendguard.guard.report import Report
from suspendguard.guard.restore import Blocker
from suspendguard.guard.scan import scan_holders
from suspendguard.idle.acl import AclBackend
from suspendguard.model import Holder, holder_id
from suspendguard.record import HolderRecord
from suspendguard.store import lock as guard_lock
from suspendguard.system.procfs import ProcFS

pytestmark = needs_root

HERE = Path(__file__).parent
DAEMONS = [(name, family) for family, names in FAMILY_DAEMONS.items() for name in names]
PROBE = "suspendguard.idle.acl_probe"

# Sets its own name as any user can (prctl PR_SET_NAME = 15), then holds the node.
NAMED_JOB = """
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(sys.argv[1].encode()), 0, 0, 0)
f = open(sys.argv[2], "rb")
print("ready", os.getpid(), flush=True)
time.sleep(3600)
"""


class Started:
    """Processes this test started; each is killed at the end (by its own pid)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, argv: list[str], env: dict[str, str] | None = None) -> int:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env,
                                start_new_session=True, cwd="/")
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[:1] == ["ready"], f"{argv[0]} did not start: {line}"
        return int(line[1])

    @staticmethod
    def alive(pid: int) -> bool:
        """Still running (a zombie not reaped yet has ended)."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"

    def cleanup(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: it and its children
            proc.wait()


@pytest.fixture
def started() -> Iterator[Started]:
    s = Started()
    yield s
    s.cleanup()


@pytest.fixture(scope="module")
def daemon_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed (tools/test installs it)")
    out = tmp_path_factory.mktemp("daemon") / "daemon"
    subprocess.run(["gcc", "-O1", "-o", str(out), str(HERE / "daemon.c")], check=True,
                   timeout=120)
    return out


@pytest.fixture
def shared(node: str) -> Iterator[Path]:
    """A folder user nobody can enter, holding a node of the suite's rdev, mode 0666."""
    folder = Path(tempfile.mkdtemp(prefix="sg-identity-"))
    try:
        folder.chmod(0o755)
        os.mknod(folder / "npu0", 0o666 | 0o020000, os.stat(node).st_rdev)
        (folder / "npu0").chmod(0o666)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def result(report: Report, pid: int) -> HolderRecord:
    return next(h for h in report.holders if h.decision.holder.pid == pid)


def text(report: Report) -> str:
    out = io.StringIO()
    render(report, out, width=None)
    return out.getvalue()


def as_nobody(shared: Path) -> tuple[list[str], str, dict[str, str]]:
    prefix = nobody_prefix()
    if prefix is None:
        pytest.skip("needs setpriv or runuser to run as nobody")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))}
    python = python_for_nobody(prefix, env)
    if python is None:
        pytest.skip("no python interpreter that user nobody can run")
    return prefix, python, env


def test_a_daemons_name_set_by_nobody_is_drained_and_check_says_why(
        make_config: Any, shared: Path, started: Started) -> None:
    prefix, python, env = as_nobody(shared)
    node = str(shared / "npu0")
    pids = {name: started.start([*prefix, python, "-c", NAMED_JOB, name, node], env)
            for name, _ in DAEMONS}
    config = make_config(devices={"nodes": [node]})

    report = guard(config, dry_run=True)
    shown = text(report)
    exe = os.path.realpath(python)
    for name, family in DAEMONS:
        d = result(report, pids[name]).decision
        assert (d.action, d.kind, d.rule) == ("drain", "drain", "holds a compute node"), name
        assert d.holder.comm == name[:15]  # what the process called itself
        assert d.notes[0] == (
            f"named {name}, but run by nobody from {exe} (it runs as nobody, not "
            f"{' or '.join(('root', *DAEMON_USERS[family]))}; its executable is not named "
            f"{name}): not the {family} driver's daemon, so not exempt"), d.notes
        assert f"pid {pids[name]}: named {name}, but run by nobody from {exe}" in shown

    # A rule on the uid holds where a name does not: nobody cannot be anyone else.
    uid = pwd.getpwnam("nobody").pw_uid
    ruled = guard(make_config(devices={"nodes": [node]}, policy={"protect": [{"uid": uid}]}),
                  dry_run=True)
    assert {result(ruled, p).decision.action for p in pids.values()} == {"protect"}

    drained = guard(config)
    assert drained.verdict.kind == "allow", drained.verdict.texts
    assert {result(drained, p).outcome.kind for p in pids.values()} == {"exited"}
    assert not any(started.alive(p) for p in pids.values())


def test_daemon_stand_in_run_by_root_from_a_root_folder_is_ignored(
        make_config: Any, node: str, tmp_path: Path, daemon_binary: Path,
        started: Started) -> None:
    sbin = tmp_path / "driver" / "tools"
    sbin.mkdir(parents=True, mode=0o755)
    pids = {}
    for name, _ in DAEMONS:
        shutil.copy(daemon_binary, sbin / name)
        pids[name] = started.start([str(sbin / name), node])
    report = guard(make_config())
    assert report.verdict.kind == "allow", report.verdict.texts
    for name, family in DAEMONS:
        hr = result(report, pids[name])
        assert (hr.decision.action, hr.decision.rule) == \
            ("ignore", f"built-in: {family} driver daemon {name}")
        assert hr.outcome.kind == "not-signalled"
        assert started.alive(pids[name]), name


def test_a_driver_daemon_blocks_no_repair_after_resume(
        make_config: Any, node: str, tmp_path: Path, daemon_binary: Path,
        started: Started) -> None:
    # The repair after resume asks who holds the device beside what the guard stopped: the
    # driver's own daemon, as the drain's decision vouched for it, is not such a holder.
    sbin = tmp_path / "driver"
    sbin.mkdir(mode=0o755)
    shutil.copy(daemon_binary, sbin / "nvidia-persistenced")
    started.start([str(sbin / "nvidia-persistenced"), node])
    assert Blocker(make_config())("nvidia") == []
    job = started.start([sys.executable, "-c", NAMED_JOB, "nvidia-persistenced", node])
    assert Blocker(make_config())("nvidia") == [f"pid {job} nvidia-persiste"]  # a name alone


def test_daemon_binary_in_a_folder_another_user_owns_is_drained(
        make_config: Any, node: str, tmp_path: Path, daemon_binary: Path,
        started: Started) -> None:
    nobody = pwd.getpwnam("nobody")
    folder = tmp_path / "x"
    folder.mkdir(mode=0o755)
    shutil.copy(daemon_binary, folder / "slogd")
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    pid = started.start([str(folder / "slogd"), node])
    report = guard(make_config(), dry_run=True)
    d = result(report, pid).decision
    assert d.action == "drain"
    assert d.notes[0] == (
        f"named slogd, but run by root from {folder / 'slogd'} ({folder / 'slogd'} ({folder}): "
        f"owned by uid {nobody.pw_uid}, not root): not the ascend driver's daemon, so not exempt")


def test_forged_probe_command_line_is_drained_the_guards_own_child_is_not(
        make_config: Any, node: str, started: Started) -> None:
    # python -c JOB suspendguard.idle.acl_probe NODE: the probe's module among the first words.
    job = [sys.executable, "-c", NAMED_JOB, PROBE, node]
    # Its parent is a shell, which holds no guard.lock: only the command line says "probe".
    forged_pid = started.start(["bash", "-c", '"$@"; exit $?', "bash", *job])
    # A child of this process, whose guard run below holds the state folder's guard.lock.
    own = started.start(job)
    with open(f"/proc/{own}/cmdline", "rb") as f:
        assert PROBE.encode() in f.read().split(b"\0")[:4]

    report = guard(make_config())
    assert report.verdict.kind == "allow", report.verdict.texts
    kept = result(report, own)
    assert kept.decision.action == "ignore"
    assert kept.decision.rule.startswith("suspendguard's own short-lived pyACL probe")
    assert started.alive(own)
    drained = result(report, forged_pid)
    assert drained.decision.action == "drain" and drained.outcome.kind == "exited"
    assert drained.decision.notes[0].startswith(f"its command line names {PROBE}, but its "
                                                "parent (pid ")


def test_the_acl_backends_own_probe_child_is_known_by_its_parents_lock(
        make_config: Any, node: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real probe (bash, then python -m suspendguard.idle.acl_probe, started by the acl
    backend) holding the node, seen by another run's scan: ignored only by a run on the same
    state folder, whose guard.lock its parent holds."""
    config = make_config()
    state, done = tmp_path / "acl.json", tmp_path / "probe-may-end"
    state.write_text(json.dumps({"mode": "hold", "hold": node, "until": str(done), "count": 1,
                                 "devices": [{"cube_utilization": 0}]}))
    monkeypatch.setenv("FAKE_ACL_STATE", str(state))
    idle = replace(config.idle, ascend_env=str(FAKES / "idle" / "acl_site" / "set_env.sh"))
    probing = guard_lock.take(config.state.dir, 0.0)  # this process: the run that probes
    # Another state folder's lock, which the probe's parent does not hold.
    other = guard_lock.take(str(tmp_path / "other-state"), 0.0)
    elsewhere = other.token()
    other.release()
    query = threading.Thread(target=AclBackend(idle).query, args=(20.0,))
    query.start()
    try:
        inventory = take_inventory(config.devices)
        probes: list[Holder] = wait_for(
            lambda: [h for h in scan_holders(inventory).holders if names_probe(h)], 10.0,
            interval=0.02)
        [probe] = probes
        assert probe.ppid == os.getpid()
        token = probing.token()
        assert token is not None
        assert vouch([probe], ProcFS(), token).probes == {holder_id(probe)}
        assert vouch([probe], ProcFS(), elsewhere).probes == frozenset()
        [d] = decide([probe], config.policy, config.drain,
                     vouched=vouch([probe], ProcFS(), token))
        assert d.action == "ignore"
    finally:
        done.write_text("")
        query.join(timeout=20)
        probing.release()

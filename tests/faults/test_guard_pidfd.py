"""A holder the guard cannot signal vetoes, named: no allow without backing.

Two ways the signal cannot go out: pidfd_open fails (EMFILE, the fd table
full: the kernel's own error, raised by os.pidfd_open here since nothing
else makes it fail on cue), and the kernel refuses the signal itself (EPERM:
a holder run by nobody, a guard run as root without CAP_KILL, for real
through setpriv).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers.holders import Holders
from helpers.refusing import descriptors_left
from helpers.runners import guard
from helpers.users import nobody_prefix, python_for_nobody

from faults.helpers import open_dir


def test_pidfd_open_failure_vetoes_with_the_holder_named(
        make_config: object, node: str, holders: Holders, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, pid = holders.start(node)

    def full_table(_pid: int, _flags: int = 0) -> int:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(os, "pidfd_open", full_table)
    report = guard(make_config())  # type: ignore[operator]
    assert report.verdict.kind == "veto"
    [reason] = [r for r in report.verdict.texts if f"pid {pid}" in r]
    assert "could not be signalled: pidfd_open failed: Too many open files" in reason
    assert f"kill -INT {pid}" in reason
    [hr] = report.holders
    assert hr.outcome.kind == "not-signalled"
    assert proc.poll() is None and holders.signals() == []


# In a child of its own: the limit on open files is the process's. Every descriptor but one
# is taken, so pidfd_open takes the last and the start time's read of /proc finds none.
LAST_FD = """
import os, sys
from suspendguard.guard.handles import pidfd_open, take
from suspendguard.model import Holder
from suspendguard.system.procfs import ProcFS
pid = int(sys.argv[1])
holder = Holder(pid=pid, start_time=ProcFS().stat(pid).start_time, ppid=os.getppid(), uid=0,
                user="root", comm="python3", exe=sys.executable, cmdline=("python3",),
                unit=None, container=None, nspid=(pid,), nodes=(), sigint="caught")
""" + descriptors_left(1) + """
print(take(holder, "SIGINT", ProcFS(), pidfd_open))
"""


def test_the_last_descriptor_taken_by_the_pidfd_is_a_holder_not_signalled(
        node: str, holders: Holders) -> None:
    proc, pid = holders.start(node)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", LAST_FD, str(pid)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith("Outcome(kind='not-signalled'"), done.stdout
    assert ("its start time could not be read (Too many open files: more holders than the "
            "guard's limit on open files, ulimit -n)") in done.stdout
    assert proc.poll() is None and holders.signals() == []


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_signal_refused_by_the_kernel_vetoes(holders: Holders) -> None:
    prefix = nobody_prefix()
    assert prefix is not None
    if python_for_nobody(prefix, dict(os.environ)) != sys.executable:
        pytest.skip("user nobody cannot run this interpreter")
    with open_dir() as shared:
        node = shared / "npu0"
        node.write_bytes(b"\0" * 16)
        node.chmod(0o644)
        holders.marker = str(shared / "signals.log")
        (shared / "signals.log").touch(mode=0o666)
        os.chmod(shared / "signals.log", 0o666)
        job, pid = holders.start(str(node), argv_prefix=prefix)
        state = shared / "state"
        conf = shared / "guard.toml"
        conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\ndir = "{state}"\n'
                        '[idle]\nbackends = []\n[drain]\ntimeout_s = 2\n')
        # Root, but without CAP_KILL in its bounding set: the kernel refuses
        # its signal to another user's process (EPERM).
        done = subprocess.run(["setpriv", "--bounding-set=-kill", "--inh-caps=-kill", sys.executable,
                               "-m", "suspendguard", "--config", str(conf), "drain", "--yes",
                               "--json"], capture_output=True, text=True, timeout=60)
        assert "Traceback" not in done.stderr, done.stderr
        report = json.loads(done.stdout)
        assert done.returncode == 1 and report["verdict"] == "veto", report
        [reason] = [r for r in report["reasons"] if f"pid {pid}" in r]
        assert "could not be signalled: permission denied" in reason
        assert job.poll() is None and holders.signals() == []

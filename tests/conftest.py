"""Shared fixtures: real device nodes (or plain-file stand-ins) and real holders."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suspendguard.config import Config, build

ROOT = os.geteuid() == 0
HOLDER = str(Path(__file__).parent / "helpers" / "holder.py")
FIXTURES = Path(__file__).parent / "fixtures"

needs_root = pytest.mark.skipif(not ROOT, reason="needs root (mknod, namespaces)")

# The rdev of the test nodes as root (that of /dev/full). Any process holding
# a node with this number is a holder to a guard: tools/test runs the suite in
# a private PID namespace so that the guard sees only the suite's processes,
# and starts its sentinel (tests/test_isolation.py) on a node with this rdev.
NODE_RDEV = os.makedev(1, 7)


def isolation_problem() -> str | None:
    """Why this process may not run holder tests as root, or None.

    As root the tests make real nodes with NODE_RDEV and run real drains, so
    they must run where a guard can see and signal only processes the suite
    started: inside the PID namespace tools/test makes, whose PID 1 is
    tests/helpers/pidns_init.py, and with that namespace's own /proc.
    """
    if not ROOT:
        return None
    own = os.readlink("/proc/self/ns/pid")
    if os.environ.get("SUSPENDGUARD_TEST_PIDNS") != own:
        return "pytest is not in the PID namespace tools/test makes for it"
    if os.environ.get("SUSPENDGUARD_TEST_OUTER_PIDNS") in (None, "", own):
        return "pytest's PID namespace is the one tools/test was started in"
    try:
        init_ns = os.readlink("/proc/1/ns/pid")
        init_cmd = Path("/proc/1/cmdline").read_bytes().split(b"\0")
    except OSError as e:
        return f"cannot read PID 1 in /proc: {e}"
    if init_ns != own or not any(arg.endswith(b"pidns_init.py") for arg in init_cmd):
        return "/proc is not the private PID namespace's own /proc"
    return None


def pytest_configure(config: pytest.Config) -> None:
    problem = isolation_problem()
    if problem is not None:
        pytest.exit(f"run the suite through tools/test: as root the tests need a private PID "
                    f"namespace, so that a guard under test can signal only what they started "
                    f"({problem})", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture
def node(tmp_path: Path) -> str:
    """A compute node: rdev NODE_RDEV as root, a plain file otherwise.

    As root, processes outside the suite may hold a node with this rdev too;
    only the private PID namespace (tools/test) keeps them out of a test's sight.
    """
    path = tmp_path / "npu0"
    if ROOT:
        os.mknod(path, 0o666 | 0o020000, NODE_RDEV)
    else:
        path.write_bytes(b"\0" * 4096)
    return str(path)


@pytest.fixture
def make_config(tmp_path: Path, node: str) -> Any:
    def make(**sections: dict[str, Any]) -> Config:
        data: dict[str, dict[str, Any]] = {
            "devices": {"families": [], "nodes": [node]},
            "state": {"dir": str(tmp_path / "state")},
            "idle": {"backends": []},
            "drain": {"timeout_s": 5},
        }
        for name, values in sections.items():
            data.setdefault(name, {}).update(values)
        return build(data)

    return make


@pytest.fixture
def conf(tmp_path: Path, node: str) -> Path:
    """A config file on disk for CLI runs: the test node only, no idle backends."""
    path = tmp_path / "config.toml"
    path.write_text(
        f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
        '[idle]\nbackends = []\n[drain]\ntimeout_s = 5\n'
    )
    return path


class Holders:
    """Starts holder processes and always cleans them up."""

    def __init__(self, tmp_path: Path) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.marker = str(tmp_path / "signals.log")
        self.extra_pids: list[int] = []

    def start(self, node: str, mode: str = "graceful", delay: float = 0.3,
              argv_prefix: list[str] | None = None) -> tuple[subprocess.Popen[str], int]:
        argv = [sys.executable, HOLDER, "--node", node, "--mode", mode, "--delay", str(delay),
                "--marker", self.marker]
        proc = subprocess.Popen((argv_prefix or []) + argv, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line and line[0] == "ready", f"holder did not start: {line}"
        pid = int(line[1])
        if len(line) > 3:
            self.extra_pids.append(int(line[3]))
        if pid != proc.pid:
            self.extra_pids.append(pid)
        return proc, pid

    def signals(self) -> list[str]:
        try:
            return Path(self.marker).read_text().splitlines()
        except FileNotFoundError:
            return []

    def cleanup(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in self.extra_pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[Holders]:
    h = Holders(tmp_path)
    yield h
    h.cleanup()


# --- running as another user ------------------------------------------------

def nobody_prefix() -> list[str] | None:
    if os.geteuid() != 0:
        return None
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    return None


def python_for_nobody(prefix: list[str], env: dict[str, str]) -> str | None:
    """An interpreter user nobody can run that imports this checkout.

    The test's own interpreter may live under /root (pyenv): then the system
    python3 of the same version, with this interpreter's import path, stands in.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, shutil.which(version), f"/usr/bin/{version}"):
        if not python:
            continue
        probe = subprocess.run([*prefix, python, "-c", "import suspendguard.cli"],
                               env=env, capture_output=True, text=True, cwd="/", timeout=60)
        if probe.returncode == 0:
            return python
    return None

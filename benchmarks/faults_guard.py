"""The guard's own rows of the fault table (issue 15 items 2-4, 8-11, 13, SIGINT): real holders.

Each scenario takes a fresh folder of its own and returns (outcome ok,
verdict in time, recorded), None where that is not the point; faults.py
runs them beside its own. The node is a plain file in that folder, so the
only processes that hold it are the scenario's own: nothing else on the
host is ever signalled.
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from helpers.wait import wait_for  # tests/, on the path faults.py sets

from suspendguard.cli import main
from suspendguard.store.history import History

REPO = Path(__file__).resolve().parent.parent
HOLDER = str(REPO / "tests" / "helpers" / "holder.py")
SCENES = REPO / "tests" / "faults"
HWTS = ("[ERROR] TSCH(-1,null):2023-01-01-02:53:45.850.781 1 (dieid:0,cpuid:0) "
        "device_management_plat.c:563 suspend_ack: suspend pre check fail, hwts is busy\n")

Outcome = tuple[bool, bool | None, bool | None]


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out, err=io.StringIO(), environ={"PATH": os.defpath})
    return status, out.getvalue()


def _setup(tmp: Path, **drain: float) -> tuple[str, Path, Path]:
    """(node, state folder, config) for one scenario."""
    node = tmp / "npu0"
    node.write_bytes(b"\0" * 4096)
    state = tmp / "state"
    conf = tmp / f"guard-{len(list(tmp.glob('guard-*.toml')))}.toml"
    keys = "".join(f"{k} = {v}\n" for k, v in drain.items())
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\ndir = "{state}"\n'
                    f'[idle]\nbackends = []\n[drain]\n{keys}')
    return str(node), state, conf


def _holder(node: str, tmp: Path, mode: str = "graceful") -> subprocess.Popen[str]:
    job = subprocess.Popen([sys.executable, HOLDER, "--node", node, "--mode", mode,
                            "--marker", str(tmp / "marks")], stdout=subprocess.PIPE, text=True)
    assert job.stdout is not None
    job.stdout.readline()
    return job


def _marks(tmp: Path) -> list[str]:
    path = tmp / "marks"
    return path.read_text().splitlines() if path.exists() else []


def _check(conf: Path) -> tuple[int, dict[str, object], float]:
    start = time.monotonic()
    status, out = _cli("--config", str(conf), "drain", "--yes", "--json")
    return status, json.loads(out), time.monotonic() - start


def _last_attempt(state: Path) -> object:
    with History.open(str(state), readonly=True) as h:
        return h.attempts(1)[0]


# -- item 2 -------------------------------------------------------------------

def _thread_holder(how: str) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        node, state, conf = _setup(tmp, timeout_s=5)
        binary = tmp / "threads"
        subprocess.run(["gcc", "-O1", "-pthread", "-o", str(binary), str(SCENES / "threads.c")],
                       check=True)
        job = subprocess.Popen([str(binary), node, how], stdout=subprocess.PIPE, text=True)
        try:
            assert job.stdout is not None
            job.stdout.readline()
            status, report, took = _check(conf)
            holders = report["holders"]
            assert isinstance(holders, list)
            found = [h["pid"] for h in holders if h["outcome"]["kind"] == "exited"]
            attempt = _last_attempt(state)
            return (status == 0 and found == [job.pid], took < 100,
                    [h.holder.pid for h in attempt.holders] == [job.pid])  # type: ignore[attr-defined]
        finally:
            job.kill()
            job.wait()
    return scenario


# -- items 3, 9, 12 -----------------------------------------------------------

def pid_reuse(tmp: Path) -> Outcome:
    node, _state, _conf = _setup(tmp)
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                           sys.executable, str(SCENES / "scene_pid_reuse.py"), node,
                           str(tmp / "marks")], capture_output=True, text=True, timeout=60)
    result = json.loads(done.stdout.splitlines()[-1])
    return result["marks"] == [] and result["verdict"] == "allow", True, None


def disk_full(tmp: Path) -> Outcome:
    node, state, _conf = _setup(tmp)
    state.mkdir()
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           str(SCENES / "scene_disk_full.py"), node, str(state)],
                          capture_output=True, text=True, timeout=60)
    result = json.loads(done.stdout.splitlines()[-1])
    recorded = result["recorded"]
    return (result["verdict"] == "allow", True,
            recorded["verdict"] == "allow" and len(recorded["holders"]) == 1)


def _killed_mid_drain(how: signal.Signals) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        node, state, conf = _setup(tmp, timeout_s=20)
        job = _holder(node, tmp, "slow")
        guard = subprocess.Popen([sys.executable, "-m", "suspendguard", "--config", str(conf),
                                  "drain", "--yes", "--json"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        try:
            wait_for(lambda: bool(_marks(tmp)), 15.0, interval=0.02)
            sent = time.monotonic()
            guard.send_signal(how)
            out, _ = guard.communicate(timeout=20)
            took = time.monotonic() - sent
        finally:
            guard.kill()
            guard.wait()
            job.kill()
            job.wait()
        attempt = _last_attempt(state)
        rows = [(h.holder.pid, h.outcome.kind) for h in attempt.holders]  # type: ignore[attr-defined]
        if how == signal.SIGKILL:
            return (attempt.result == "interrupted", None,  # type: ignore[attr-defined]
                    rows == [(job.pid, "signalled")])
        return (guard.returncode == 1 and json.loads(out)["verdict"] == "veto", took < 2,
                attempt.result == "veto")  # type: ignore[attr-defined]
    return scenario


# -- item 4 -------------------------------------------------------------------

def two_guards(tmp: Path) -> Outcome:
    node, _state, first_conf = _setup(tmp, timeout_s=20)
    _node, _state, second_conf = _setup(tmp, timeout_s=2, deadline_s=6)
    job = _holder(node, tmp, "slow")
    first = subprocess.Popen([sys.executable, "-m", "suspendguard", "--config", str(first_conf),
                              "drain", "--yes"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: bool(_marks(tmp)), 15.0, interval=0.02)
        status, report, took = _check(second_conf)
        reasons = report["reasons"]
        assert isinstance(reasons, list)
        time.sleep(0.2)
        ok = status == 1 and any("another suspendguard run" in r for r in reasons) \
            and len(_marks(tmp)) == 1
    finally:
        first.kill()
        first.wait()
        job.kill()
        job.wait()
    return ok, took < 6, None


# -- item 8 -------------------------------------------------------------------

def stopped(tmp: Path) -> Outcome:
    node, _state, conf = _setup(tmp, timeout_s=2)
    job = _holder(node, tmp)
    try:
        os.kill(job.pid, signal.SIGSTOP)
        time.sleep(0.1)
        status, report, took = _check(conf)
        reasons = report["reasons"]
        assert isinstance(reasons, list)
        os.kill(job.pid, signal.SIGCONT)
        time.sleep(0.3)
        ok = status == 1 and any("stopped (SIGSTOP" in r for r in reasons) \
            and _marks(tmp) == [] and job.poll() is None
    finally:
        job.kill()
        job.wait()
    return ok, took < 1.5, None


# -- items 10, 11, 13 ---------------------------------------------------------

def hostile_name(tmp: Path) -> Outcome:
    node, _state, conf = _setup(tmp)
    job = subprocess.Popen(
        # It ignores SIGINT, so the guard's veto reason names it.
        [sys.executable, "-c", "import signal, sys, time\nheld = open(sys.argv[1], 'rb')\n"
         "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
         "open('/proc/self/comm', 'w').write('x\\x1b[2J\\r\\nforged')\nprint(flush=True)\n"
         "time.sleep(60)\n", node], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        job.stdout.readline()
        _status, out = _cli("--config", str(conf), "check", "--dry-run")
    finally:
        job.kill()
        job.wait()
    return "\x1b" not in out and "\r" not in out and "x\\e[2J" in out, None, None


def install_empty_root(tmp: Path) -> Outcome:
    status, _out = _cli("install", "--root", "")
    return status == 2, None, None


def logs_empty_sibling(tmp: Path) -> Outcome:
    (tmp / "logs" / "a").mkdir(parents=True)
    (tmp / "logs" / "a" / "plog-1_1.log").write_text(HWTS)
    (tmp / "logs" / "z").mkdir()
    for i in range(20_001):
        os.close(os.open(tmp / "logs" / "z" / f"plog-{i}.log", os.O_CREAT | os.O_WRONLY, 0o644))
    _status, out = _cli("logs", str(tmp / "logs"))
    return "hwts-busy-suspend" in out, None, None


def logs_long_line(tmp: Path) -> Outcome:
    big = tmp / "plog-big.log"
    with open(big, "wb") as f:
        for _ in range(80):
            f.write(b"x" * (1 << 20))
        f.write(HWTS.rstrip("\n").encode())
        for _ in range(20):
            f.write(b"x" * (1 << 20))
    _status, out = _cli("logs", str(big))
    return "hwts-busy-suspend" in out, None, None


# -- issue 19 ------------------------------------------------------------------

def pidfd_failure(tmp: Path) -> Outcome:
    """pidfd_open fails (EMFILE, as with a full fd table): the holder vetoes, named, unsignalled."""
    node, state, conf = _setup(tmp, timeout_s=2)
    job = _holder(node, tmp)
    real = os.pidfd_open

    def full_table(_pid: int, _flags: int = 0) -> int:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    os.pidfd_open = full_table
    try:
        status, report, took = _check(conf)
    finally:
        os.pidfd_open = real
        alive = job.poll() is None
        job.kill()
        job.wait()
    reasons = report["reasons"]
    assert isinstance(reasons, list)
    ok = status == 1 and alive and _marks(tmp) == [] and any(
        f"pid {job.pid}" in r and "could not be signalled" in r for r in reasons)
    return ok, took < 100, _last_attempt(state).result == "veto"  # type: ignore[attr-defined]


def no_backend(tmp: Path) -> Outcome:
    """An NVIDIA GPU that nothing can query: veto before any signal, and status says so."""
    state = tmp / "state"
    state.mkdir()
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                           "--propagation", "private", sys.executable,
                           str(SCENES / "scene_no_backend.py"), str(state), str(tmp / "marks")],
                          capture_output=True, text=True, timeout=60)
    result = json.loads(done.stdout.splitlines()[-1])
    ok = (result["verdict"] == "veto" and result["signals"] == [] and result["alive"]
          and "every suspend will be refused: no backend can answer for nvidia"
          in result["status"][0])
    return ok, result["took"] < 100, result["recorded"]


SCENARIOS: list[tuple[str, Callable[[Path], Outcome]]] = [
    ("2 leader exited (pthread_exit)", _thread_holder("leader-exit")),
    ("2 thread with its own fd table", _thread_holder("unshare-files")),
    ("3 PID taken over mid-scan", pid_reuse),
    ("4 two guards at once", two_guards),
    ("8 stopped holder (SIGSTOP)", stopped),
    ("9 disk fills during the drain", disk_full),
    ("9 SIGKILL mid-drain", _killed_mid_drain(signal.SIGKILL)),
    ("10 ESC/CR/LF in a process name", hostile_name),
    ("11 install --root ''", install_empty_root),
    ("12 SIGINT to the guard mid-drain", _killed_mid_drain(signal.SIGINT)),
    ("13 20,001 empty files beside a log", logs_empty_sibling),
    ("13 needle in a 100 MB single line", logs_long_line),
    ("19 pidfd failure (EMFILE)", pidfd_failure),
    ("19 no backend for the GPU", no_backend),
]

"""What ``suspendguard watch`` costs on a host of 3,000 processes (run on demand).

    python benchmarks/watch.py [--procs 3000] [--window 60] [--storm 2]

The population of benchmarks/scan.py (3,000 processes x 60 fds, 5 holding
the test node) stays in place while the watch runs as a service would: its
own process, told where systemd's notification socket is (``NOTIFY_SOCKET``,
a socket of this script's), so the window starts at its ``READY=1``, after
start-up and the first look. Its CPU time (user + system, its forked scan
workers included: /proc/PID/stat utime, stime, cutime, cstime) is read at
both ends of each window. Each look ends with one ``STATUS=`` message:
they count the looks.

1. one look: the watch's own look (guard/watch.py ``dry_look``), run here
   three times; its CPU (median) sets the bound between two looks when
   nothing happens (the default 60 s, stretched for a slow look), so the
   share of one core the bounded looks take.
2. quiet: the service at its defaults while nothing opens or closes the
   node: what it takes between looks.
3. storm: a process opens and closes the node every ``--storm`` seconds,
   as a monitoring agent might; every event may bring a look, at most one a
   second and fewer while they find nothing new.

Run it in a PID namespace of its own on a shared machine (``unshare -pf
--mount-proc``): another job's holders of the node's number coming and
going are changes, and bring looks. Measured there (2 cores, load 5.7;
syscalls slow, so one look costs 1.2 s of CPU, 5-10x a plain host): the
bound stretched to 300 s, 0.40 % of one core; quiet between looks 0.00 %;
the first minute of a storm 9.4 % (5 looks), its gap still growing towards
60 s, where it stays under 2 %.

Target: under 0.5 % of one core at the default bound. Needs root for mknod
(else a plain file stands in).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _installed import installed_python
from scan import bench_tree, population

from suspendguard.config import build
from suspendguard.guard.watch import BOUND_SHARE, MAX_BOUND_S, RECHECK_S, dry_look
from suspendguard.system.deadline import Cancel
from suspendguard.system.procfs import ProcFS

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """The process's CPU seconds so far, its reaped children's included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime


class Systemd:
    """The notification socket; counts READY and STATUS messages."""

    def __init__(self, folder: Path) -> None:
        self.path = str(folder / "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.ready = False
        self.statuses = 0

    def pump(self, until: float) -> None:
        while time.monotonic() < until:
            try:
                data = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            self.ready = self.ready or "READY=1" in data.splitlines()
            self.statuses += sum(1 for line in data.splitlines() if line.startswith("STATUS="))


def window(watch: subprocess.Popen[bytes], systemd: Systemd, seconds: float) -> tuple[float, int]:
    """(CPU seconds, looks) of the watch over ``seconds``."""
    before, looks = cpu_s(watch.pid), systemd.statuses
    systemd.pump(time.monotonic() + seconds)
    return cpu_s(watch.pid) - before, systemd.statuses - looks


def one_look(node: Path, state: Path) -> float:
    """CPU seconds of one look, forked workers included."""
    config = build({"devices": {"families": [], "nodes": [str(node)]},
                    "state": {"dir": str(state)}, "idle": {"backends": []}})
    look = dry_look(config, dict(os.environ), ProcFS())
    before = os.times()
    cancel = Cancel()
    try:
        look(cancel)
    finally:
        cancel.close()
    after = os.times()
    return sum(after[:4]) - sum(before[:4])


def storm(node: Path, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        with open(node, "rb"):
            pass


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=3000)
    p.add_argument("--holders", type=int, default=5)
    p.add_argument("--window", type=float, default=60.0)
    p.add_argument("--storm", type=float, default=2.0, help="seconds between the storm's opens")
    args = p.parse_args()
    if not shutil.which("gcc"):
        print("benchmarks/watch.py: gcc not found", file=sys.stderr)
        return 2
    python = installed_python()
    tmp = Path(tempfile.mkdtemp(prefix="sg-bench-watch-"))
    subprocess.run(["gcc", "-O2", "-o", str(tmp / "population"), str(HERE / "population.c")],
                   check=True)
    node, conf = bench_tree(tmp, '[idle]\nbackends = []\n')
    systemd = Systemd(tmp)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JOURNAL_STREAM")}
    env |= {"NOTIFY_SOCKET": systemd.path, "PYTHONPYCACHEPREFIX": str(tmp / "pycache"),
            "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp / 'no-bus'}"}
    try:
        with population(tmp, args.procs, args.holders, node):
            looks = sorted(one_look(node, tmp) for _ in range(3))
            watch = subprocess.Popen([python, "-m", "suspendguard", "--config", str(conf),
                                      "watch"], env=env)
            try:
                started = time.monotonic()
                while not systemd.ready:
                    if watch.poll() is not None or time.monotonic() - started > 60:
                        raise SystemExit("benchmarks/watch.py: the watch did not get ready")
                    systemd.pump(time.monotonic() + 0.2)
                quiet_cpu, quiet_looks = window(watch, systemd, args.window)
                stop = threading.Event()
                opener = threading.Thread(target=storm, args=(node, args.storm, stop))
                opener.start()
                try:
                    storm_cpu, storm_looks = window(watch, systemd, args.window)
                finally:
                    stop.set()
                    opener.join()
            finally:
                watch.terminate()
                watch.wait(30)
    finally:
        systemd.sock.close()
        shutil.rmtree(tmp, ignore_errors=True)
    per_look = looks[1]
    bound = min(MAX_BOUND_S, max(RECHECK_S, per_look / BOUND_SHARE))
    load = os.getloadavg()[0]
    print(f"population: {args.procs} processes x 60 fds, {args.holders} holders; "
          f"{os.cpu_count()} cores, load average {load:.2f}")
    print(f"  one look: CPU median {per_look * 1000:.0f} ms (min {looks[0] * 1000:.0f}, max "
          f"{looks[2] * 1000:.0f}); bound {bound:.0f} s (default {RECHECK_S:g} s, stretched "
          f"for a slow look): {100 * per_look / bound:.2f} % of one core (target < 0.5 %)")
    print(f"  quiet, the service at its defaults: {quiet_looks} looks in {args.window:g} s, "
          f"CPU {quiet_cpu:.2f} s = {100 * quiet_cpu / args.window:.2f} % of one core")
    print(f"  storm, an open and close every {args.storm:g} s: {storm_looks} looks in "
          f"{args.window:g} s, CPU {storm_cpu:.2f} s = "
          f"{100 * storm_cpu / args.window:.2f} % of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())

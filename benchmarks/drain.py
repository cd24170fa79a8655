"""Time from the last holder's exit to the verdict (run on demand).

    python benchmarks/drain.py [--holders 8] [--runs 7]
    python benchmarks/drain.py --supervised [--holders 8] [--runs 7]   # as root

N holders hold a test node and exit on SIGINT after a random 0-200 ms,
writing their exit time (CLOCK_MONOTONIC, shared by all processes) just
before they exit. Measured in the same run: suspendguard's pipeline (real
drain, history recorded, no idle backends) and a baseline that sends SIGINT
with os.kill and waits with psutil.wait_procs. Target: median under 10 ms,
never worse than the baseline.

``--supervised`` boots a real systemd in a container
(tests/helpers/systemd_harness.py) and measures, in the same run, the same
jobs as ``Restart=always`` system services kept down by systemd and as
plain processes, both through the pipeline with the real supervisors.
Target: at most 50 ms more than the plain drain per attempt. The reload
and stop-job calls come before the first signal, so they are timed apart.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from helpers.systemd_harness import Container

from suspendguard.config import Config, DevicesConfig, build
from suspendguard.guard.drain import drain
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.pipeline import run
from suspendguard.guard.scan import scan_holders
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.store.history import History
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system.dbus import systemd
from suspendguard.system.deadline import Deadline
from suspendguard.system.log import Logger

HOLDER = r"""
import os, random, signal, sys, time
f = open(sys.argv[1], "rb")
out = sys.argv[2]
random.seed(os.getpid())
delay = random.uniform(0, 0.2)
signal.signal(signal.SIGINT, signal.default_int_handler)
print("ready", flush=True)
try:
    time.sleep(3600)
except KeyboardInterrupt:
    time.sleep(delay)
    with open(out, "a") as log:
        log.write(f"{time.monotonic()}\n")
    os._exit(0)
"""


def start(n: int, node: Path, exits: Path) -> list[subprocess.Popen[str]]:
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(node), str(exits)],
                              stdout=subprocess.PIPE, text=True) for _ in range(n)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return procs


class VerdictClock(Logger):
    """Notes when the verdict line is logged: the moment the verdict is given."""

    def __init__(self) -> None:
        super().__init__(io.StringIO(), {})
        self.at = 0.0

    def log(self, priority: int, message: str) -> None:
        if "allow" in message or "veto" in message:
            self.at = time.monotonic()
        super().log(priority, message)


def last_exit(exits: Path) -> float:
    return max(float(x) for x in exits.read_text().split())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--holders", type=int, default=8)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--supervised", action="store_true",
                   help="services kept down by systemd against plain processes (root)")
    p.add_argument("--inside", help=argparse.SUPPRESS)  # the container's half of --supervised
    args = p.parse_args()
    if args.inside:
        return inside(args.holders, args.runs, Path(args.inside))
    if args.supervised:
        return supervised(args.holders, args.runs)
    tmp = Path(tempfile.mkdtemp(prefix="sg-drain-"))
    # A plain file stands in for the node: its identity (st_dev, st_ino) is
    # unique, so no other process on the machine can count as a holder.
    node = tmp / "npu0"
    node.write_bytes(b"")
    config = build({"devices": {"families": [], "nodes": [str(node)]},
                    "state": {"dir": str(tmp / "state")}, "idle": {"backends": []}})
    ours, waits, base, recorded = [], [], [], []
    inventory = take_inventory(DevicesConfig((), (str(node),), ()))
    for i in range(args.runs):
        # The wait alone: drain()'s pidfd poll, same holders, same signal.
        exits = tmp / f"exits-{i}-wait"
        procs = start(args.holders, node, exits)
        holders = scan_holders(inventory).holders
        drain(holders, "SIGINT", 30.0, time.monotonic() + 60)
        waits.append(time.monotonic() - last_exit(exits))
        for pr in procs:
            pr.wait()

        exits = tmp / f"exits-{i}-sg"
        procs = start(args.holders, node, exits)
        clock = VerdictClock()
        report = run(config, dry_run=False, action="suspend", origin="bench", log=clock, history=History.open)
        returned_at = time.monotonic()
        assert report.verdict.kind == "allow", report.verdict.reasons
        ours.append(clock.at - last_exit(exits))
        recorded.append(returned_at - last_exit(exits))
        for pr in procs:
            pr.wait()

        exits = tmp / f"exits-{i}-base"
        procs = start(args.holders, node, exits)
        ps = [psutil.Process(pr.pid) for pr in procs]
        for pr in procs:
            os.kill(pr.pid, signal.SIGINT)
        _gone, alive = psutil.wait_procs(ps, timeout=30)
        done_at = time.monotonic()
        assert not alive
        base.append(done_at - last_exit(exits))
        for pr in procs:
            pr.wait()
    m_ours, m_wait, m_base = (statistics.median(x) for x in (ours, waits, base))
    print(f"{args.holders} holders, {args.runs} runs; milliseconds after the last holder's exit")
    print(f"  pidfd poll (drain) returns        median {m_wait * 1000:6.1f}  max {max(waits) * 1000:6.1f}")
    print(f"  psutil.wait_procs returns         median {m_base * 1000:6.1f}  max {max(base) * 1000:6.1f}")
    print(f"  verdict line (after the rescan)   median {m_ours * 1000:6.1f}  max {max(ours) * 1000:6.1f}")
    print(f"  ... and recorded in the history   median {statistics.median(recorded) * 1000:6.1f}"
          f"  max {max(recorded) * 1000:6.1f}")
    print(f"  wait ratio vs baseline {m_wait / m_base:.2f}x (target <= 1); "
          f"verdict median target < 10 ms")
    return 0


# --- --supervised: systemd services against plain processes, in a booted container ---------

UNIT = """[Service]
Restart=always
RestartSec=100ms
ExecStart={python} {holder} {node} {exits}
"""


class TimedManagersAndEngines(ManagersAndEngines):
    """The real supervisors, noting how long the keep-down (drop-ins + reload) and settle steps take."""

    def __init__(self) -> None:
        super().__init__()
        self.stop_s = 0.0
        self.settle_s = 0.0

    def stop(self, owners: Sequence[Owner], signame: str, timeout_s: float = 10.0) -> dict[str, str]:
        t = time.monotonic()
        try:
            return super().stop(owners, signame, timeout_s)
        finally:
            self.stop_s += time.monotonic() - t

    def settle(self, stops: Sequence[Stop], deadline: Deadline) -> list[str]:
        t = time.monotonic()
        try:
            return super().settle(stops, deadline)
        finally:
            self.settle_s += time.monotonic() - t


def _wait_holders(config: Config, n: int) -> None:
    inventory = take_inventory(config.devices)
    deadline = time.monotonic() + 30
    while len(scan_holders(inventory).holders) < n:
        assert time.monotonic() < deadline, "the holders did not start"
        time.sleep(0.05)


def _attempt(config: Config, exits: Path) -> dict[str, float]:
    sup = TimedManagersAndEngines()
    clock = VerdictClock()
    report = run(config, dry_run=False, action="suspend", origin="bench", log=clock,
                 supervisors=sup, history=History.open)
    assert report.verdict.kind == "allow", report.verdict.reasons
    return {"verdict": clock.at - last_exit(exits), "stop": sup.stop_s, "settle": sup.settle_s}


def inside(n: int, runs: int, work: Path) -> int:
    """The container's half: prints one JSON line of timings."""
    node = work / "npu0"
    node.write_bytes(b"")
    config = build({"devices": {"families": [], "nodes": [str(node)]},
                    "state": {"dir": str(work / "state")}, "idle": {"backends": []},
                    "drain": {"timeout_s": 10.0}})
    (work / "holder.py").write_text(HOLDER)
    units = [f"sg-bench-{k}.service" for k in range(n)]
    out: dict[str, list[dict[str, float]]] = {"service": [], "plain": [], "reload": []}
    for i in range(runs):
        exits = work / f"exits-{i}-service"
        for unit in units:
            Path(f"/run/systemd/system/{unit}").write_text(UNIT.format(
                python=sys.executable, holder=work / "holder.py", node=node, exits=exits))
        systemd.reload_manager()
        subprocess.run(["systemctl", "start", *units], check=True)
        _wait_holders(config, n)
        out["service"].append(_attempt(config, exits))
        # the reload alone, as the stop step does it before the first signal
        t = time.monotonic()
        systemd.reload_manager()
        out["reload"].append({"s": time.monotonic() - t})
        subprocess.run(["systemctl", "stop", *units], check=True)
        for unit in units:
            Path(f"/run/systemd/system/{unit}").unlink()
        ManagersAndEngines().remove_dropins([Owner("systemd-service", unit) for unit in units])

        exits = work / f"exits-{i}-plain"
        procs = [subprocess.Popen([sys.executable, str(work / "holder.py"), str(node), str(exits)],
                                  stdout=subprocess.DEVNULL) for _ in range(n)]
        _wait_holders(config, n)
        out["plain"].append(_attempt(config, exits))
        for pr in procs:
            pr.wait()
    print(json.dumps(out))
    return 0


def supervised(n: int, runs: int) -> int:
    with Container(REPO) as box:
        work = "/run/sg-bench"
        box.run("mkdir", "-p", work)
        # In a scope of its own: the plain holders, its children, are owned by nobody.
        res = box.run("systemd-run", "--scope", "--quiet", "--", sys.executable, __file__,
                      "--inside", work, "--holders", str(n), "--runs", str(runs), timeout=600)
    data = json.loads(res.stdout.strip().splitlines()[-1])

    def ms(rows: list[dict[str, float]], key: str) -> str:
        values = [r[key] * 1000 for r in rows]
        return f"median {statistics.median(values):6.1f}  max {max(values):6.1f}"

    print(f"{n} holders, {runs} runs, in a booted systemd; ms after the last holder's exit")
    print(f"  plain processes: verdict                {ms(data['plain'], 'verdict')}")
    print(f"  systemd services: verdict               {ms(data['service'], 'verdict')}")
    print(f"    of which settle (units stopped?)      {ms(data['service'], 'settle')}")
    print(f"  before the first signal: drop-ins+reload {ms(data['service'], 'stop')}")
    print(f"    the Manager.Reload alone              {ms(data['reload'], 's')}")
    extra = [s["verdict"] - p["verdict"] for s, p in zip(data["service"], data["plain"], strict=True)]
    print(f"  services minus plain per attempt: median {statistics.median(extra) * 1000:.1f} ms,"
          f" max {max(extra) * 1000:.1f} ms (target <= 50)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

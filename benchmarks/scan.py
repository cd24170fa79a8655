"""Holder scan against fuser and lsof on a standard population (run on demand).

    python benchmarks/scan.py [--procs 3000] [--runs 5]

Builds 3,000 processes with 60 fds each (40% unix sockets, 20% pipes, 30%
regular files, 10% /dev/null), 5 of which hold a test node, then measures
in the same run the wall time and peak RSS of: suspendguard's scan (a fresh
process, interpreter start included), `fuser NODE` and `lsof NODE`; medians
of --runs runs; and `suspendguard check --dry-run` on this machine's own
accelerator nodes (none here: the no-accelerator path). Targets: scan <=
0.7x fuser and <= 0.25x lsof wall, peak RSS < 40 MiB, dry run < 150 ms.
Needs root for mknod (else a plain file stands in).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _installed import installed_python

SCAN_CHILD = (
    "import sys\n"
    "from suspendguard.config import DevicesConfig\n"
    "from suspendguard.guard.inventory import take_inventory\n"
    "from suspendguard.guard.scan import scan_holders\n"
    "r = scan_holders(take_inventory(DevicesConfig((), (sys.argv[1],), ())))\n"
    "print(len(r.holders))\n"
)


def measure(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of one run of argv.

    Peak RSS comes from GNU time, a small parent: a child forked from this
    Python would report this process's own size as its high-water mark.
    """
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%M", *argv],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        wall = time.perf_counter() - start
        rss_kib = float(report.read().split()[-1])
    return wall, rss_kib / 1024, proc.stdout.decode()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=3000)
    p.add_argument("--holders", type=int, default=5)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    for tool in ("gcc", "fuser", "lsof", "/usr/bin/time"):
        if not shutil.which(tool):
            print(f"benchmarks/scan.py: {tool} not found", file=sys.stderr)
            return 2
    python = installed_python()
    tmp = Path(tempfile.mkdtemp(prefix="sg-bench-"))
    binary = tmp / "population"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(HERE / "population.c")], check=True)
    pool = tmp / "pool"
    pool.mkdir()
    for i in range(500):
        (pool / f"f{i}").write_bytes(b"x")
    node = tmp / "npu0"
    if os.geteuid() == 0:
        os.mknod(node, 0o666 | 0o020000, os.makedev(1, 7))
    else:
        node.write_bytes(b"")
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    pop = subprocess.Popen([str(binary), str(args.procs), str(args.holders), str(node), str(pool)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert pop.stdout is not None
        if pop.stdout.readline().strip() != "ready":
            print("population did not start", file=sys.stderr)
            return 1
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        tools = {
            "suspendguard scan": [python, "-c", SCAN_CHILD, str(node)],
            "fuser": ["fuser", str(node)],
            "lsof": ["lsof", str(node)],
        }
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in tools}
        for _ in range(args.runs):
            for name, argv in tools.items():
                wall, rss, out = measure(argv, env)
                results[name].append((wall, rss))
                if name == "suspendguard scan":
                    assert out.strip() == str(args.holders), out
        med = {k: (statistics.median(w for w, _ in v), max(r for _, r in v))
               for k, v in results.items()}
        print(f"population: {args.procs} processes x 60 fds, {args.holders} holders; "
              f"medians of {args.runs} runs")
        for name, (wall, rss) in med.items():
            print(f"  {name:18s} wall {wall * 1000:8.1f} ms   peak RSS {rss:6.1f} MiB")
        sg = med["suspendguard scan"][0]
        print(f"  ratio vs fuser: {sg / med['fuser'][0]:.2f}x (target <= 0.7)")
        print(f"  ratio vs lsof:  {sg / med['lsof'][0]:.2f}x (target <= 0.25)")
    finally:
        if pop.stdin:
            pop.stdin.close()
        pop.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    del soft, hard
    time.sleep(3)  # let the kernel finish reaping the population first
    walls = []
    conf = Path(tempfile.mkdtemp()) / "c.toml"
    conf.write_text(f'[state]\ndir = "{conf.parent}"\n')
    for _ in range(max(args.runs, 9)):
        wall, rss, _ = measure([python, "-m", "suspendguard", "--config", str(conf),
                                "check", "--dry-run"], env)
        walls.append(wall)
    print(f"  check --dry-run (this machine's nodes, default families): "
          f"{statistics.median(walls) * 1000:.1f} ms wall (target < 150)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

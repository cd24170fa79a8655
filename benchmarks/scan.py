"""Holder scan against its floor, fuser and lsof on a standard population (run on demand).

    python benchmarks/scan.py [--procs 3000] [--runs 5] [--linear 1000,3000,10000] [--no-lsof]

Builds 3,000 processes with 60 fds each (40% unix sockets, 20% pipes, 30%
regular files, 10% /dev/null), 5 of which hold a test node, then measures,
run after run in the same invocation, the wall time and peak RSS of:
the floor (benchmarks/floor.c: one thread, one readlinkat per fd),
suspendguard's scan and `suspendguard check --dry-run --json` on that node
(fresh processes, interpreter start included), `fuser NODE` and `lsof NODE`.
The ratios against the floor are taken run by run, so that a busy machine
slows both sides of each ratio alike; min and median are printed. Then
`check --dry-run` on this machine's own accelerator nodes (none here: the
no-accelerator path). Python's byte code is compiled once first, into the
run's own folder, as an installed package has it. With --linear, the scan and the floor again on
populations of each size: time per 1,000 processes should stay flat.
Targets: scan and check <= 1.1x the floor, peak RSS < 20 MiB, dry run <
150 ms. Needs root for mknod (else a plain file stands in).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _installed import installed_python

from suspendguard.guard.scan import MAX_WORKERS, PIDS_PER_WORKER

SCAN_CHILD = (
    "import sys\n"
    "from suspendguard.config import DevicesConfig\n"
    "from suspendguard.guard.inventory import take_inventory\n"
    "from suspendguard.guard.scan import scan_holders\n"
    "r = scan_holders(take_inventory(DevicesConfig((), (sys.argv[1],), ())))\n"
    "print(sum(1 for h in r.holders if h.comm == 'population'))\n"
)


def measure(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str, float]:
    """(wall seconds, peak RSS MiB, stdout, CPU seconds: user + system) of one run of argv.

    Peak RSS and CPU time come from GNU time, a small parent: a child forked
    from this Python would report this process's own size as its high-water
    mark. CPU time counts the forked workers of a scan too; on a shared
    machine it moves less than wall time.
    """
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%M %U %S", *argv],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        wall = time.perf_counter() - start
        rss_kib, user, system = (float(x) for x in report.read().split()[-3:])
    return wall, rss_kib / 1024, proc.stdout.decode(), user + system


@contextmanager
def population(tmp: Path, procs: int, holders: int, node: Path) -> Iterator[None]:
    """``procs`` processes in place, the first ``holders`` holding ``node``, for the block."""
    pop = subprocess.Popen([str(tmp / "population"), str(procs), str(holders), str(node),
                            str(tmp / "pool")],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert pop.stdout is not None
        if pop.stdout.readline().strip() != "ready":
            raise SystemExit("benchmarks/scan.py: the population did not start")
        yield
    finally:
        if pop.stdin:
            pop.stdin.close()
        pop.wait()
        time.sleep(3)  # let the kernel finish reaping the population


def population_holders(out: str) -> int:
    """How many of the population hold the node, from check --dry-run --json.

    Other processes of this machine may hold a node of the same rdev (the
    test suite's do): only the population's own count.
    """
    return sum(1 for h in json.loads(out)["holders"] if h["comm"] == "population")


Runs = list[tuple[float, float, float]]  # (wall s, peak RSS MiB, CPU s) of each run


def ratios(results: dict[str, Runs], name: str, at: int = 0) -> str:
    """Run by run against the floor's run just before: min and median."""
    per_run = [r[at] / f[at] for r, f in zip(results[name], results["floor"], strict=True)]
    return f"min {min(per_run):.2f}x  median {statistics.median(per_run):.2f}x"


def bench_tree(tmp: Path, extra: str = "") -> tuple[Path, Path]:
    """The population's file pool, the test node (a character device as root) and a config
    naming it (plus ``extra`` TOML), under ``tmp``."""
    pool = tmp / "pool"
    pool.mkdir()
    for i in range(500):
        (pool / f"f{i}").write_bytes(b"x")
    node = tmp / "npu0"
    if os.geteuid() == 0:
        os.mknod(node, 0o666 | 0o020000, os.makedev(1, 7))
    else:
        node.write_bytes(b"")
    conf = tmp / "bench.toml"
    conf.write_text(f'[state]\ndir = "{tmp}"\n[devices]\nfamilies = []\nnodes = ["{node}"]\n'
                    + extra)
    return node, conf


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=3000)
    p.add_argument("--holders", type=int, default=5)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--linear", default="", help="comma-separated population sizes")
    p.add_argument("--no-lsof", action="store_true", help="leave lsof out (15x the floor: slow)")
    args = p.parse_args()
    for tool in ("gcc", "fuser", "lsof", "/usr/bin/time"):
        if not shutil.which(tool):
            print(f"benchmarks/scan.py: {tool} not found", file=sys.stderr)
            return 2
    python = installed_python()
    tmp = Path(tempfile.mkdtemp(prefix="sg-bench-"))
    pycache = Path(tempfile.mkdtemp(prefix="sg-bench-pycache-"))
    for program in ("population", "floor"):
        subprocess.run(["gcc", "-O2", "-o", str(tmp / program), str(HERE / f"{program}.c")],
                       check=True)
    node, conf = bench_tree(tmp)
    # Byte code cached, as an installed package has it (the .deb compiles it at
    # install): written once, by a first run, into a folder of the run's own,
    # not into the checkout.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    subprocess.run([python, "-m", "suspendguard", "--config", str(conf), "check",
                    "--dry-run", "--json"], env=env, stdout=subprocess.DEVNULL, check=False)
    floor = [str(tmp / "floor"), str(node)]
    scan = [python, "-c", SCAN_CHILD, str(node)]
    try:
        with population(tmp, args.procs, args.holders, node):
            tools = {
                "floor": floor,
                "suspendguard scan": scan,
                "check --dry-run": [python, "-m", "suspendguard", "--config", str(conf),
                                    "check", "--dry-run", "--json"],
                "fuser": ["fuser", str(node)],
                "lsof": ["lsof", str(node)],
            }
            if args.no_lsof:
                del tools["lsof"]
            results: dict[str, Runs] = {k: [] for k in tools}
            for _ in range(args.runs):
                for name, argv in tools.items():
                    wall, rss, out, cpu = measure(argv, env)
                    results[name].append((wall, rss, cpu))
                    if name == "check --dry-run":
                        assert population_holders(out) == args.holders, out[:2000]
                    elif name in ("floor", "suspendguard scan"):
                        assert out.strip() == str(args.holders), out
            workers = min(MAX_WORKERS, os.cpu_count() or 1, max(1, args.procs // PIDS_PER_WORKER))
            print(f"population: {args.procs} processes x 60 fds, {args.holders} holders; "
                  f"{args.runs} runs; the floor is one thread, the scan {workers} forked "
                  f"worker(s) on {os.cpu_count()} cores (CPU ratios count them all)")
            for name, runs in results.items():
                walls = [w for w, _, _ in runs]
                print(f"  {name:18s} wall min {min(walls) * 1000:8.1f} ms  median "
                      f"{statistics.median(walls) * 1000:8.1f} ms   CPU median "
                      f"{statistics.median(c for _, _, c in runs) * 1000:8.1f} ms   "
                      f"peak RSS {max(r for _, r, _ in runs):6.1f} MiB")
            for name, label in (("suspendguard scan", "scan"), ("check --dry-run", "check"),
                                ("fuser", "fuser"), ("lsof", "lsof")):
                if name not in results:
                    continue
                target = " (target <= 1.1)" if label in ("scan", "check") else ""
                print(f"  {label + ' / floor:':14s} wall {ratios(results, name)}{target};  "
                      f"CPU {ratios(results, name, at=2)}")
        for procs in [int(n) for n in args.linear.split(",") if n]:
            with population(tmp, procs, args.holders, node):
                pairs = [(measure(floor, env), measure(scan, env)) for _ in range(args.runs)]
            f_med = statistics.median(f[0] for f, _ in pairs)
            s_med = statistics.median(s[0] for _, s in pairs)
            print(f"  {procs:6d} processes: floor {f_med * 1e6 / procs:6.1f} us, scan "
                  f"{s_med * 1e6 / procs:6.1f} us per process (medians); scan / floor "
                  f"median {statistics.median(s[0] / f[0] for f, s in pairs):.2f}x; "
                  f"scan peak RSS {max(s[1] for _, s in pairs):.1f} MiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    walls = []
    conf = Path(tempfile.mkdtemp()) / "c.toml"
    conf.write_text(f'[state]\ndir = "{conf.parent}"\n')
    for _ in range(max(args.runs, 9)):
        wall, _, _, _ = measure([python, "-m", "suspendguard", "--config", str(conf),
                                 "check", "--dry-run"], env)
        walls.append(wall)
    shutil.rmtree(pycache, ignore_errors=True)
    shutil.rmtree(conf.parent, ignore_errors=True)
    print(f"  check --dry-run (this machine's nodes, default families): "
          f"{statistics.median(walls) * 1000:.1f} ms wall (target < 150)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every shape a job runs in, drained for real: the table of issue 18 (run on demand, as root).

    python benchmarks/owners.py [--runs 3]

For each shape: did every holder get ``[drain] signal`` itself, did each
exit gracefully (no timeout, no kill), did anything hold the node when the
verdict was given and one second later (the moment of sleep, and the
sleep), was the job back after ``restore`` (after resume) and after a veto
(restored at once), with its owner's settings as they were, and the seconds
from the signal to the verdict (median of ``--runs``). The plain rows are
the same jobs with no supervisor, drained in the same run: the supervised
rows' cost is read against them.

systemd shapes run inside a booted systemd 252 (tests/helpers/systemd_harness.py),
the guard's pipeline called in-process there with the real supervisors;
Docker shapes on a private Docker Engine (tests/helpers/docker.py). The node
is a plain file in a fresh folder (its identity is unique), so nothing else
on the machine is ever signalled. The real ``systemctl suspend`` path of
the same matrix is tests/containers/test_owners_container.py.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from helpers.docker import DockerEngine
from helpers.systemd_harness import Container

from suspendguard.cli import main as cli
from suspendguard.config import build
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.pipeline import run
from suspendguard.guard.scan import scan_holders
from suspendguard.store.history import History
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system.log import Logger

PYTHON = "/usr/bin/python3"
HOLDER = str(REPO / "tests" / "helpers" / "holder.py")
LAUNCHER = str(REPO / "tests" / "helpers" / "launcher.py")
TIMEOUT_S = 4.0
SLEEP_S = 1.0
# Worth the guard's own log on stderr: a drain this slow from signal to verdict.
SLOW_S = 3.0


class Times(Logger):
    """Notes when the drain signal was sent and when the verdict was given."""

    def __init__(self) -> None:
        super().__init__(io.StringIO(), {})
        self.sent = self.verdict = 0.0
        self.lines: list[tuple[float, str]] = []

    def log(self, priority: int, message: str) -> None:
        self.lines.append((time.monotonic(), message))
        if message.startswith("sent ") and not self.sent:
            self.sent = time.monotonic()
        if ": allow" in message or ": veto" in message:
            self.verdict = time.monotonic()
        super().log(priority, message)


@dataclass
class Shape:
    name: str
    holders: int
    start: Callable[[], None]
    back: Callable[[], bool] | None  # running again, with its owner's settings; None: nobody brings it back
    stop: Callable[[], None]
    marker: str


class Bench:
    def __init__(self, work: Path, environ: dict[str, str]) -> None:
        self.work = work
        self.node = work / "npu0"
        self.node.write_bytes(b"")
        self.environ = environ
        self.config_file = work / "config.toml"
        self.config_file.write_text(
            f'[devices]\nfamilies = []\nnodes = ["{self.node}"]\n[state]\ndir = "{work / "state"}"\n'
            f'[idle]\nbackends = []\n[drain]\ntimeout_s = {TIMEOUT_S}\n')
        self.config = build({"devices": {"families": [], "nodes": [str(self.node)]},
                             "state": {"dir": str(work / "state")}, "idle": {"backends": []},
                             "drain": {"timeout_s": TIMEOUT_S}})
        self.inventory = take_inventory(self.config.devices)

    def held(self) -> int:
        return len(scan_holders(self.inventory).holders)

    def wait_held(self, n: int) -> None:
        deadline = time.monotonic() + 30
        while self.held() < n:
            assert time.monotonic() < deadline, f"only {self.held()} of {n} holders started"
            time.sleep(0.05)

    def attempt(self) -> tuple[Any, Times]:
        times = Times()
        report = run(self.config, dry_run=False, action="suspend", origin="bench", log=times,
                     supervisors=ManagersAndEngines(environ=self.environ,
                                             state_dir=str(self.work / "state")), history=History.open)
        return report, times

    def sigints(self, marker: str) -> int:
        try:
            return sum(1 for line in Path(marker).read_text().splitlines()
                       if line.endswith(" SIGINT"))
        except FileNotFoundError:
            return 0

    def measure(self, shape: Shape, runs: int) -> dict[str, Any]:
        row: dict[str, Any] = {"shape": shape.name, "signalled": True, "graceful": True,
                               "free_at_sleep": True, "back_after_resume": True,
                               "back_after_veto": True, "seconds": []}
        for _ in range(runs):
            Path(shape.marker).unlink(missing_ok=True)
            shape.start()
            self.wait_held(shape.holders)
            report, times = self.attempt()
            at_verdict = self.held()
            time.sleep(SLEEP_S)
            row["free_at_sleep"] &= report.verdict.kind == "allow" and at_verdict == 0 \
                and self.held() == 0
            row["signalled"] &= self.sigints(shape.marker) == shape.holders
            row["graceful"] &= len(report.holders) == shape.holders and all(
                h.outcome.kind == "exited" for h in report.holders)
            row["seconds"].append(times.verdict - times.sent)
            if times.verdict - times.sent > SLOW_S:  # say where the time went
                print(f"{shape.name}: {times.verdict - times.sent:.2f} s from signal to verdict:",
                      file=sys.stderr)
                for at, line in times.lines:
                    print(f"  {at - times.sent:+8.3f} {line}", file=sys.stderr)
            cli(["--config", str(self.config_file), "restore"], out=io.StringIO(),
                err=io.StringIO(), environ=self.environ)
            resumed = shape.back is None or _wait(shape.back)
            # a veto: a plain holder that outlives [drain] timeout_s. The shape
            # starts afresh: a launcher left running has no job any more.
            shape.stop()
            shape.start()
            self.wait_held(shape.holders)
            slow = subprocess.Popen([PYTHON, HOLDER, "--node", str(self.node), "--mode", "slow"],
                                    stdout=subprocess.PIPE, text=True)
            assert slow.stdout is not None and slow.stdout.readline().startswith("ready")
            report, _ = self.attempt()
            slow.kill()
            slow.wait()
            vetoed = report.verdict.kind == "veto" and (shape.back is None or _wait(shape.back))
            if shape.back is not None:  # nothing brings a plain job back: not asked of it
                row["back_after_resume"] &= resumed
                row["back_after_veto"] &= vetoed
            else:
                row["back_after_resume"] = row["back_after_veto"] = None
            shape.stop()
        return row


def _wait(ok: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return True
        time.sleep(0.1)
    return False


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()


# --- systemd: inside the booted container ------------------------------------------------


def systemd_shapes(b: Bench) -> list[Shape]:
    shapes = []
    plain: list[subprocess.Popen[str]] = []

    def start_plain() -> None:
        plain.append(subprocess.Popen([PYTHON, LAUNCHER, "--node", str(b.node), "--shape",
                                       "torchrun", "--marker", str(b.work / "plain.log")],
                                      stdout=subprocess.DEVNULL))

    def stop_plain() -> None:
        for p in plain:
            p.kill()
            p.wait()
        plain.clear()

    # Nothing brings a plain job back: "back" is not asked of it.
    shapes.append(Shape("plain launcher + 2 workers", 2, start_plain, None, stop_plain,
                        str(b.work / "plain.log")))

    def unit(name: str, text: str, holders: int, back: Callable[[], bool] | None = None) -> None:
        path = Path("/etc/systemd/system") / name
        marker = str(b.work / f"{name.replace(chr(92), '_')}.log")
        path.write_text(text.format(marker=marker))
        _sh("systemctl", "daemon-reload")
        restart = _sh("systemctl", "show", "-p", "Restart", "--value", name) or "always"

        def is_back() -> bool:
            return _sh("systemctl", "is-active", name) == "active" and \
                _sh("systemctl", "show", "-p", "Restart", "--value", name) == restart

        def stop() -> None:
            _sh("systemctl", "kill", "--kill-whom=all", "--signal=SIGKILL", name)
            _sh("systemctl", "stop", name)
            _sh("systemctl", "reset-failed", name)

        shapes.append(Shape(name, holders, lambda: _sh("systemctl", "start", name) and None,
                            back or is_back, stop, marker))

    for mode in ("control-group", "mixed", "process", "none"):
        unit(f"sv-{mode}.service",
             f"[Service]\nRestart=always\nRestartSec=100ms\nKillMode={mode}\nExecStart={PYTHON} "
             f"{LAUNCHER} --node {b.node} --shape torchrun --marker {{marker}}\n", 2)
    unit("sv-cron.service",
         f"[Service]\nRestart=on-failure\nKillMode=process\nExecStart={PYTHON} {LAUNCHER} "
         f"--node {b.node} --shape cron --marker {{marker}}\n", 1)
    unit("sv\\x2dhard.service",
         f"[Service]\nRestart=always\nRestartSec=100ms\nDynamicUser=yes\nProtectSystem=strict\n"
         f"PrivateTmp=yes\nReadWritePaths={b.work}\nTimeoutStopSec=1s\nExecStart={PYTHON} "
         f"{HOLDER} --node {b.node} --delay 0.5 --marker {{marker}}\n", 1)

    adhoc = "sv-adhoc.service"
    marker = str(b.work / "adhoc.log")

    def start_adhoc() -> None:
        _sh("systemd-run", f"--unit={adhoc}", "-p", "Restart=always", "-p", "RestartSec=100ms",
            "-p", "Environment=SG_TAG=adhoc", "--", PYTHON, HOLDER, "--node", str(b.node),
            "--delay", "0.5", "--marker", marker)

    def adhoc_back() -> bool:
        return _sh("systemctl", "is-active", adhoc) == "active" and \
            _sh("systemctl", "show", "-p", "Environment", "--value", adhoc) == "SG_TAG=adhoc" \
            and _sh("systemctl", "show", "-p", "Restart", "--value", adhoc) == "always"

    def stop_adhoc() -> None:
        _sh("systemctl", "stop", adhoc)
        _sh("systemctl", "reset-failed", adhoc)

    shapes.append(Shape("transient (systemd-run)", 1, start_adhoc, adhoc_back, stop_adhoc, marker))
    return shapes


def docker_shapes(b: Bench, engine: DockerEngine) -> list[Shape]:
    shapes = []
    for shape in ("job", "shell", "init"):
        name = f"sg-bench-{shape}"
        marker = str(b.work / f"{name}.log")
        job = [PYTHON, HOLDER, "--node", "/dev/davinci0", "--delay", "0.5", "--marker", marker,
               "--exit", "3"]
        argv = job if shape == "job" else ["/bin/sh", "-c", " ".join(job) + "; exit $?"]

        def start(name: str = name, argv: list[str] = argv, init: bool = shape == "init") -> None:
            engine.docker("rm", "-f", name, check=False)
            engine.run(name, argv, node=str(b.node), restart="always", init=init,
                       writable=[str(b.work)])

        def back(name: str = name) -> bool:
            return engine.running(name) and engine.policy(name) == ("always", 0)

        label = {"job": "docker: job is PID 1", "shell": "docker: sh -c entrypoint",
                 "init": "docker: --init (tini) + sh -c"}[shape]
        shapes.append(Shape(label, 1, start, back,
                            lambda name=name: engine.docker("rm", "-f", name, check=False) and None,
                            marker))
    return shapes


def inside(work: Path, runs: int) -> int:
    """The container's half: one JSON line of rows."""
    b = Bench(work, {})
    print(json.dumps([b.measure(s, runs) for s in systemd_shapes(b)]))
    return 0


def table(rows: list[dict[str, Any]]) -> None:
    yes = {True: "yes", False: "NO", None: "n/a"}
    head = ("shape", "every holder signalled", "exited gracefully", "node free at sleep",
            "back after resume", "back after veto", "signal to verdict, s")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['shape']} | {yes[r['signalled']]} | {yes[r['graceful']]} | "
              f"{yes[r['free_at_sleep']]} | {yes[r['back_after_resume']]} | "
              f"{yes[r['back_after_veto']]} | {statistics.median(r['seconds']):.2f} "
              f"(max {max(r['seconds']):.2f}) |")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--inside", help=argparse.SUPPRESS)  # the container's half
    args = p.parse_args()
    if args.inside:
        return inside(Path(args.inside), args.runs)
    with Container(REPO) as box:
        work = "/run/sg-bench"
        box.run("mkdir", "-m", "1777", "-p", work)
        # In a scope of its own: the plain jobs, its children, are owned by nobody.
        res = box.run("systemd-run", "--scope", "--quiet", "--", sys.executable, __file__,
                      "--inside", work, "--runs", str(args.runs), timeout=900)
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    tmp = Path(tempfile.mkdtemp(prefix="sg-owners-"))
    tmp.chmod(0o1777)
    with DockerEngine(tmp / "docker") as engine:
        b = Bench(tmp, {"DOCKER_HOST": engine.host})
        plain = [r for r in rows if r["shape"].startswith("plain")]
        rows += [b.measure(s, args.runs) for s in docker_shapes(b, engine)]
    print(f"{args.runs} run(s) per shape; [drain] timeout_s = {TIMEOUT_S:g}; each worker exits "
          "0.5 s after SIGINT")
    table(rows)
    supervised = [s for r in rows if not r["shape"].startswith("plain") for s in r["seconds"]]
    if plain:
        print(f"signal to verdict: supervised median {statistics.median(supervised):.3f} s, "
              f"plain median {statistics.median(plain[0]['seconds']):.3f} s (same run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

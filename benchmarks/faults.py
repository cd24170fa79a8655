"""The fault table: every hostile-input and damage scenario of issues 15 and 19, run again (on demand).

    python benchmarks/faults.py [--runs 3] [--only WORDS]

Run as root (the trust rule and the history's owner are root's), ideally in
a throw-away namespace as tools/test does; it touches only a folder of its
own under /tmp (and, for the sleep path's rows, cgroups of its own under a
writable cgroup v2 tree). Each scenario is a function in SCENARIOS that builds its
fault, runs the guard or the CLI once and returns (outcome, verdict in
time, recorded); a new scenario is one more function in that list. The
table: scenario, runs, outcome (ok when every run did what it must),
verdict-in-time (every verdict within the deadline) and recorded (the
history kept the attempt, where that is the point).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suspendguard.cli import main
from suspendguard.config import build
from suspendguard.guard.pipeline import run
from suspendguard.guard.report import RECORDED
from suspendguard.store.history import History
from suspendguard.system.log import Logger

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The sleep path's scenes (issue 19) are the fault tests' own: tests/ for
# their fakes and helpers, tests/faults after it for the scenes.
_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[1:1] = [str(_TESTS), str(_TESTS / "faults")]
from faults_guard import SCENARIOS as GUARD_SCENARIOS
from sleep_scenes import SCENES as SLEEP_SCENES
from sleep_scenes import Seen
from sleep_scenes import can_run as sleep_scenes_can_run

NOBODY = 65534


@dataclass(frozen=True)
class Result:
    ok: bool
    in_time: bool | None  # None: no verdict is involved
    recorded: bool | None  # None: recording is not the point


Scenario = Callable[[Path], Result]


def cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    status = main(list(argv), out=io.StringIO(), err=err, environ={"PATH": os.defpath})
    return status, err.getvalue()


def one_line_exit(status: int, err: str, want: int) -> bool:
    return status == want and err.count("\n") == 1 and "Traceback" not in err


def guard(state: Path, deadline_s: float = 100.0) -> tuple[bool, bool, bool]:
    """(gave a verdict, within the deadline, recorded) of one guard run with no holders."""
    cfg = build({"devices": {"families": [], "nodes": []}, "idle": {"backends": []},
                 "state": {"dir": str(state)},
                 "drain": {"timeout_s": 1, "deadline_s": deadline_s}})
    started = time.monotonic()
    report = run(cfg, dry_run=False, action="suspend", origin="unit", idle_check=None,
                 log=Logger(io.StringIO(), {}), history=History.open)
    took = time.monotonic() - started
    return report.verdict.kind in ("allow", "veto"), took < deadline_s, report.history == RECORDED


# -- item 1 -------------------------------------------------------------------

def untrusted_config(tmp: Path) -> Result:
    conf = tmp / "c.toml"
    conf.write_text('[idle]\nbackends = []\n')
    conf.chmod(0o666)
    status, err = cli("pre-sleep", "--config", str(conf))
    # pre-sleep tells whoever asked to sleep too: a notify line where nobody can be told.
    said = "".join(line for line in err.splitlines(keepends=True) if "notify:" not in line)
    return Result(one_line_exit(status, said, 4), None, None)


def untrusted_program(tmp: Path) -> Result:
    marker = tmp / "ran"
    tool = tmp / "npu-smi"
    tool.write_text(f"#!/bin/sh\ntouch {marker}\n")
    tool.chmod(0o777)
    conf = tmp / "c.toml"
    conf.write_text(f'[idle]\nbackends = ["npu-smi"]\nnpu_smi = "{tool}"\n')
    status, err = cli("check", "--dry-run", "--config", str(conf))
    return Result(one_line_exit(status, err, 4) and not marker.exists(), None, None)


# -- item 5 -------------------------------------------------------------------

def history_private(tmp: Path) -> Result:
    state = tmp / "state"
    ok, in_time, recorded = guard(state)
    modes = [f.stat().st_mode & 0o077 for f in state.iterdir()] + [state.stat().st_mode & 0o077]
    return Result(ok and not any(modes), in_time, recorded)


# -- item 6 -------------------------------------------------------------------

def corrupt_history(tmp: Path) -> Result:
    state = tmp / "state"
    state.mkdir(mode=0o700)
    (state / "history.db").write_bytes(b"junk" * 1000)
    ok, in_time, recorded = guard(state)
    status, err = cli("history", "--config", str(_state_conf(tmp, state)))
    kept = any(f.read_bytes() == b"junk" * 1000 for f in state.glob("history.db.corrupt-*"))
    return Result(ok and kept and status == 0 and not err, in_time, recorded)


def invalid_json_row(tmp: Path) -> Result:
    state = tmp / "state"
    for _ in range(3):
        guard(state)
    with contextlib.closing(sqlite3.connect(state / "history.db")) as c, c:
        c.execute("UPDATE attempts SET reasons = '{' WHERE id = 2")
    status, err = cli("history", "--config", str(_state_conf(tmp, state)))
    return Result(status == 0 and "attempt 2: damaged row skipped" in err, None, None)


def immutable_corrupt_history(tmp: Path) -> Result:
    state = tmp / "state"
    state.mkdir(mode=0o700)
    db = state / "history.db"
    db.write_bytes(b"junk" * 1000)
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        return Result(False, None, None)
    try:
        ok, in_time, recorded = guard(state)
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=False)
    return Result(ok and not recorded, in_time, recorded)


def locked_history(tmp: Path) -> Result:
    state = tmp / "state"
    guard(state)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time\n"
         "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(30)",
         str(state / "history.db")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        holder.stdout.readline()
        ok, in_time, recorded = guard(state, deadline_s=3.0)
    finally:
        holder.kill()
        holder.wait()
    return Result(ok, in_time, recorded)


# -- item 7 -------------------------------------------------------------------

def planted_symlink(tmp: Path) -> Result:
    secret = tmp / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    state = tmp / "state"
    state.mkdir(mode=0o700)
    (state / "history.db").symlink_to(secret)
    ok, in_time, recorded = guard(state)
    untouched = secret.read_text() == "root only\n" and secret.stat().st_mode & 0o777 == 0o600
    return Result(ok and untouched and not recorded, in_time, recorded)


def state_dir_etc(tmp: Path) -> Result:
    status, err = cli("config", "--config", str(_state_conf(tmp, Path("/etc"))))
    return Result(one_line_exit(status, err, 2), None, None)


# -- item 12 (config and history) -------------------------------------------------

def history_n_huge(tmp: Path) -> Result:
    status, err = cli("history", "-n", str(1 << 63))
    return Result(one_line_exit(status, err, 2), None, None)


def toml_deep(tmp: Path) -> Result:
    conf = tmp / "deep.toml"
    conf.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    status, err = cli("config", "--config", str(conf))
    return Result(one_line_exit(status, err, 2), None, None)


def config_dev_zero(tmp: Path) -> Result:
    return _subprocess_config("/dev/zero")


def config_proc_mem(tmp: Path) -> Result:
    return _subprocess_config("/proc/self/mem")


def many_rules(tmp: Path) -> Result:
    conf = tmp / "rules.toml"
    conf.write_text("".join(f'[[policy.protect]]\ncomm = "j{i}"\n' for i in range(200_000)))
    started = time.monotonic()
    status, err = cli("config", "--config", str(conf))
    return Result(one_line_exit(status, err, 2), time.monotonic() - started < 2.0, None)


def _subprocess_config(path: str) -> Result:
    try:
        done = subprocess.run([sys.executable, "-m", "suspendguard", "--config", path, "config"],
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return Result(False, False, None)
    return Result(one_line_exit(done.returncode, done.stderr, 2), True, None)


def _state_conf(tmp: Path, state: Path) -> Path:
    conf = tmp / "state.toml"
    conf.write_text(f'[state]\ndir = "{state}"\n')
    return conf


SCENARIOS: list[tuple[str, Scenario]] = [
    ("1 untrusted config (0666)", untrusted_config),
    ("1 untrusted npu_smi (0777)", untrusted_program),
    ("5 history not world-readable", history_private),
    ("6 corrupt history.db", corrupt_history),
    ("6 row with invalid JSON", invalid_json_row),
    ("6 immutable corrupt history.db", immutable_corrupt_history),
    ("6 history locked, deadline_s=3", locked_history),
    ("7 planted history.db symlink", planted_symlink),
    ("7 [state] dir = /etc", state_dir_etc),
    ("12 history -n 2**63", history_n_huge),
    ("12 TOML nested 100k deep", toml_deep),
    ("12 --config /dev/zero", config_dev_zero),
    ("12 --config /proc/self/mem", config_proc_mem),
    ("12 200k rules", many_rules),
]
# The guard's own rows (items 2-4, 8-11, 13 and SIGINT), with real holders.
SCENARIOS += [(name, lambda tmp, f=f: Result(*f(tmp))) for name, f in GUARD_SCENARIOS]
# The sleep path (issue 19): hung supervisors, the guard killed between steps.
if sleep_scenes_can_run() is None:
    SCENARIOS += [(name, lambda tmp, f=f: _seen(f(tmp))) for name, f in SLEEP_SCENES]
else:
    print(f"faults.py: the sleep-path rows are left out: {sleep_scenes_can_run()}",
          file=sys.stderr)
SCENARIOS.sort(key=lambda s: int(s[0].split()[0]))


def _seen(seen: Seen) -> Result:
    if seen.failed:
        print(f"  failed: {'; '.join(seen.failed)}", file=sys.stderr)
    return Result(seen.ok, seen.in_time, seen.recorded)


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", metavar="WORDS",
                        help="run only the scenarios whose name holds WORDS")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("faults.py: run as root (the trust rule and the history's owner are root's)")
        return 2
    rows = [("scenario", "runs", "outcome", "verdict-in-time", "recorded")]
    for name, scenario in SCENARIOS:
        if args.only not in name:
            continue
        results = []
        for _ in range(args.runs):
            tmp = Path(tempfile.mkdtemp(prefix="suspendguard-faults-", dir="/tmp"))
            try:
                results.append(scenario(tmp))
            except Exception as exc:  # a crash is the finding: report it, go on
                print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                results.append(Result(False, False, False))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        rows.append((name, str(args.runs), _count(r.ok for r in results),
                     _count(r.in_time for r in results), _count(r.recorded for r in results)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _count(values: Iterable[bool | None]) -> str:
    seen = [v for v in values if v is not None]
    return "-" if not seen else f"{sum(bool(v) for v in seen)}/{len(seen)}"


if __name__ == "__main__":
    sys.exit(main_())

"""What the health check after resume adds to ``suspendguard restore``, on fake devices.

Run on demand (not a test), as root (the restore reads the history in a
state folder of its own):

    .venv/bin/python benchmarks/resume_health.py [--runs 7] [--jobs 8]

Each case runs ``python -m suspendguard restore --json`` as the resume unit
does, in a fresh process, with ``[resume] health_check`` off (the baseline)
and on, interleaved, median of N runs each, and prints the difference and
the ratio. The devices are the tests' fakes: a libcuda.so.1 built from
tests/fakes/health/fake_cuda.c, the fake modprobe, the fake npu-smi and the
fake pyACL module. Cases: an idle host (nothing was stopped) with a healthy
GPU; the same with a healthy Ascend board (npu-smi and a pyACL child); and
a host with ``--jobs`` stopped jobs whose GPU answers 999 until nvidia_uvm
is reloaded (check, holder scan, reload, check again). The jobs' starts fail
at once (no systemd on the bus given), so what is measured is the guard's
own work, not systemd's.
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
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from suspendguard.model import Owner
from suspendguard.record import Attempt, Stop
from suspendguard.store.history import History

FAKES = REPO / "tests" / "fakes"
NPU_INFO = REPO / "tests" / "fixtures" / "npu-smi" / "910b2c-hbm-one-process.txt"


def build_lib(work: Path) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        sys.exit("needs a C compiler (gcc) for the fake libcuda.so.1")
    out = work / "libcuda.so.1"
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(out),
                    str(FAKES / "health" / "fake_cuda.c")], check=True)
    return out


def config(work: Path, name: str, family: str, lib: Path, health: bool) -> Path:
    path = work / f"{name}-{'on' if health else 'off'}.toml"
    path.write_text(
        f'[devices]\nfamilies = ["{family}"]\n'
        f'[state]\ndir = "{work / name / "state"}"\n'
        f'[idle]\nbackends = []\nnpu_smi = "{FAKES / "idle" / "npu-smi"}"\n'
        f'ascend_env = "{FAKES / "idle" / "acl_site" / "set_env.sh"}"\n'
        f'[resume]\nhealth_check = {"true" if health else "false"}\ncuda_library = "{lib}"\n'
        f'modprobe = "{FAKES / "health" / "modprobe"}"\n')
    return path


def stop_jobs(state: Path, jobs: int) -> None:
    now = time.time()
    with History.open(str(state)) as h:
        attempt = h.begin("suspend", "unit", False, "bench", now - 2)
        stops = tuple(Stop(Owner("systemd-service", f"job{i}.service"), i, now - 1.5)
                      for i in range(jobs))
        h.finish(Attempt(attempt, now - 2, now - 1, "suspend", "unit", False, "allow", (), (),
                         "bench", stops=stops))


def one(conf: Path, env: dict[str, str], before: Callable[[], None]) -> tuple[float, float]:
    """(the whole restore's wall time, the health step's own seconds as restore --json says)."""
    before()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "suspendguard", "--config", str(conf), "restore",
                           "--json"], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    health = json.loads(done.stdout).get("health") or {}
    return wall, float(health.get("seconds", 0.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-resume-bench-") as tmp:
        work = Path(tmp)
        lib = build_lib(work)
        (work / "acl.json").write_text('{"count": 2, "open": [0, 0], "devices": []}')
        env = dict(os.environ, PYTHONPATH=str(REPO),
                   DBUS_SYSTEM_BUS_ADDRESS=f"unix:path={work / 'no-bus'}",
                   FAKE_CUDA_RELOADED=str(work / "reloaded"), FAKE_NPU_SMI_INFO=str(NPU_INFO),
                   FAKE_ACL_STATE=str(work / "acl.json"))
        def idle(name: str) -> Callable[[], None]:
            return lambda: None

        def jobs_unhealthy(name: str) -> Callable[[], None]:
            def before() -> None:
                (work / "reloaded").unlink(missing_ok=True)
                shutil.rmtree(work / name / "state", ignore_errors=True)
                stop_jobs(work / name / "state", args.jobs)
            return before

        cases = [
            ("idle host, GPU healthy", "nvidia", {"FAKE_CUDA_MODE": "ok"}, idle),
            ("idle host, Ascend healthy", "ascend", {}, idle),
            (f"{args.jobs} jobs, GPU 999 until reload", "nvidia", {}, jobs_unhealthy),
        ]
        print(f"restore, median of {args.runs} runs each (health check off -> on)")
        for number, (label, family, extra, prepare) in enumerate(cases):
            name = f"case{number}"
            off = config(work, name + "-off", family, lib, False)
            on = config(work, name + "-on", family, lib, True)
            case_env = {**env, **extra}
            times: dict[bool, list[float]] = {False: [], True: []}
            step: list[float] = []
            for _ in range(args.runs):
                for health, conf in ((False, off), (True, on)):
                    tag = f"{name}-{'on' if health else 'off'}"
                    wall, seconds = one(conf, case_env, prepare(tag))
                    times[health].append(wall)
                    if health:
                        step.append(seconds)
            base, with_check = statistics.median(times[False]), statistics.median(times[True])
            print(f"  {label:36} {base * 1000:7.0f} ms -> {with_check * 1000:7.0f} ms "
                  f"(+{(with_check - base) * 1000:.0f} ms, x{with_check / base:.2f}); "
                  f"the health step itself {statistics.median(step) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

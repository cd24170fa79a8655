"""An NVIDIA GPU that no backend can answer for; run in PID and mount namespaces of its own.

    unshare --pid --fork --mount-proc --kill-child --propagation private \
        python scene_no_backend.py STATE MARKER

Mounts a tmpfs on /dev holding null and nvidia0 (rdev 1:7, as /dev/full: the
private PID namespace keeps every other holder of that number out of the
guard's sight, so nothing outside the scene can be signalled), starts a job
holding /dev/nvidia0, and runs the guard with the built-in families and the
default idle backends, on a host where neither pynvml nor nvidia-smi is to
be found; then ``status``. Prints one JSON line:
the verdict and its reasons, the idle backends' words, the signals the job
got, and status's first line.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from suspendguard.cli import main
from suspendguard.config import build
from suspendguard.guard.pipeline import run
from suspendguard.store.history import History
from suspendguard.system.log import Logger

HOLDER = str(Path(__file__).resolve().parent.parent / "helpers" / "holder.py")
state, marker = sys.argv[1], sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/dev"], check=True)
os.mknod("/dev/null", 0o666 | 0o020000, os.makedev(1, 3))
os.chmod("/dev/null", 0o666)
os.mknod("/dev/nvidia0", 0o666 | 0o020000, os.makedev(1, 7))
job = subprocess.Popen([sys.executable, HOLDER, "--node", "/dev/nvidia0", "--marker", marker],
                       stdout=subprocess.PIPE, text=True)
assert job.stdout is not None
job.stdout.readline()
os.environ["PATH"] = "/nonexistent"  # no nvidia-smi; pynvml is not installed either
conf = Path(state) / "guard.toml"
conf.write_text(f'[state]\ndir = "{state}"\n[drain]\ntimeout_s = 5\n')
config = build({"state": {"dir": state}, "drain": {"timeout_s": 5}})
started = time.monotonic()
report = run(config, dry_run=False, action="suspend", origin="unit",
             log=Logger(io.StringIO(), {}), history=History.open)
took = time.monotonic() - started
out = io.StringIO()
main(["--config", str(conf), "status"], out=out, err=io.StringIO(),
     environ={"PATH": "/nonexistent", "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent"})
time.sleep(0.2)
signals = Path(marker).read_text().splitlines() if os.path.exists(marker) else []
alive = job.poll() is None
job.kill()
job.wait()
print(json.dumps({"verdict": report.verdict.kind, "reasons": report.verdict.texts,
                  "families": report.inventory.families(), "took": took,
                  "signals": signals, "alive": alive, "recorded": report.history == "recorded",
                  "status": out.getvalue().splitlines()[:1]}))

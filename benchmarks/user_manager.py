"""A user service's state read from its user's manager: over D-Bus against ``systemctl --user``.

    python benchmarks/user_manager.py [--reads 150]

Inside a booted systemd 252 (tests/helpers/systemd_harness.py) with a
lingering user and one user service, root reads that service's state
(what the drain needs: restart settings, stop timeout, main pid, job)
``--reads`` times, each on a fresh connection, the way the guard does
(supervise/user_services.py: the manager's private socket), and, in the same
run, as the ``systemctl --user show`` child run as the user that it
replaced. Prints the median, the 95th percentile and the worst of each, and
how many reads got no answer: a fresh connection whose Hello systemd left
unread waited the whole 2 s timeout (system/dbus/bus.py). Needs root.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from helpers.systemd_harness import Container, unavailable_reason

USER, UID, UNIT = "bench-user", 1235, "bench.service"

# Run in the container as root: both ways of reading, alternated in rounds.
READS = """
import json, statistics, sys, time
from suspendguard.supervise.user_services import UserServices
from suspendguard.model import Owner
from suspendguard.system import runner
unit, uid, reads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
users = UserServices(time.monotonic)
owner = Owner("user-service", unit, uid=uid)
props = ("Id,LoadState,ActiveState,Restart,RestartUSec,KillMode,ExecStop,TriggeredBy,Job,"
         "MainPID,TimeoutStopUSec,Transient")
env = {"XDG_RUNTIME_DIR": f"/run/user/{uid}", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def dbus():
    return isinstance(users.states(owner), dict)


def child():
    return runner.run(["systemctl", "--user", "show", "-p", props, unit], 10.0, env=env,
                      as_user=(uid, 100)).ok


out = {"dbus": [[], 0], "systemctl --user show": [[], 0]}
for _ in range(2):
    for name, read in (("dbus", dbus), ("systemctl --user show", child)):
        for _ in range(reads // 2):
            t = time.perf_counter()
            ok = read()
            out[name][0].append(time.perf_counter() - t)
            out[name][1] += not ok
print(json.dumps(out))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reads", type=int, default=150, help="reads of each kind (default 150)")
    args = p.parse_args()
    reason = unavailable_reason()
    if reason is not None:
        print(f"benchmarks/user_manager.py: {reason}", file=sys.stderr)
        return 2
    with Container(REPO) as box:
        box.lingering_user(USER, UID)
        box.sh(f"install -d -o {USER} /home/{USER}/.config /home/{USER}/.config/systemd "
               f"/home/{USER}/.config/systemd/user")
        box.write(f"/home/{USER}/.config/systemd/user/{UNIT}",
                  "[Service]\nRestart=always\nRestartSec=100ms\nExecStart=/bin/sleep 3600\n")
        box.as_user(UID, "systemctl", "--user", "daemon-reload")
        box.as_user(UID, "systemctl", "--user", "start", UNIT)
        found = json.loads(box.run(sys.executable, "-c", READS, UNIT, str(UID), str(args.reads),
                                   timeout=600).stdout)
    print(f"a user service's state, {args.reads} reads of each kind, each on a fresh "
          "connection or child (systemd 252, in a booted container)")
    for name, (took, failed) in found.items():
        took.sort()
        print(f"  {name:22s} median {took[len(took) // 2] * 1000:6.1f} ms  p95 "
              f"{took[int(len(took) * 0.95)] * 1000:6.1f} ms  worst {took[-1] * 1000:7.1f} ms  "
              f"no answer {failed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

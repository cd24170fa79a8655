"""The veto unit sees what root sees: a job holding the node only through a mapping.

The job runs in a mount namespace of its own, on a /dev of its own where it
made the node (rdev 1:5, which can be mapped) and mapped it, then closed the
fd: its maps name a file the guard's /dev does not have, and only
/proc/PID/map_files leads from that mapping to the node. Following that link
takes CAP_SYS_ADMIN in the initial user namespace (the kernel's
checkpoint_restore_ns_capable()), which the installed unit's bounding set
must therefore hold. ``check`` run as root and ``pre-sleep`` run by the unit
through a real ``systemctl suspend`` must name the same holder.
"""

from __future__ import annotations

import json
import sys

import pytest
from helpers.systemd_harness import HOLDER, Boot, Container, container_marks, guard_config

pytestmark = container_marks()

# 1:5 (as /dev/zero): mappable, and no other container test's number.
NODE = "/dev/suspendguard-test/zero0"
MARKER = "/run/suspendguard-test/signals.log"
STATE_DIR = "/var/lib/suspendguard-test-state"


@pytest.fixture(scope="module")
def box(boot: Boot) -> Container:
    return boot(NODE, "1 5", "/run/suspendguard-test",
                config=guard_config(NODE, state_dir=STATE_DIR, deadline_s=20))


def test_unit_finds_the_map_only_holder_check_finds(box: Container) -> None:
    script = ("mount -t tmpfs none /dev && mknod /dev/davinci0 c 1 5 && "
              f"exec {sys.executable} {HOLDER} --node /dev/davinci0 --mode map --delay 0.2 "
              f"--marker {MARKER}")
    pid = box.start_job("sg-test-map.service",
                        ["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    try:
        check = json.loads(box.suspendguard("check", "--dry-run", "--json", check=False).stdout)
        seen = [(h["pid"], [n["via"] for n in h["nodes"]]) for h in check["holders"]]
        assert seen == [(pid, ["map"])], check
        assert not any("map_files" in w for w in check["warnings"]), check["warnings"]

        box.suspend()
        out = box.suspendguard("history", "--json", "-n", "5").stdout
        [attempt] = [a for a in json.loads(out)["attempts"]
                     if a["origin"] == "unit" and a["action"] == "suspend"][:1]
        assert [h["pid"] for h in attempt["holders"]] == [pid], attempt
        assert not any("map_files" in w for w in attempt["warnings"]), attempt["warnings"]
        assert attempt["verdict"] == "allow", attempt
        assert box.power_state().splitlines()[0] == "mem"
        signals = box.run("sh", "-c", f"cat {MARKER} 2>/dev/null || :").stdout.splitlines()
        assert f"{pid} SIGINT" in signals
    finally:
        box.stop_jobs()

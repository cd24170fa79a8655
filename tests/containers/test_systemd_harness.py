"""The container harness itself: what it masks, and what it says when a boot hangs.

On a host with podman or Docker installed, network-online.target pulls
systemd-networkd-wait-online.service into the boot of the host's own /usr,
and in a container without network it waits 120 s. Here the same job is
asked for on the container's command line (``systemd.wants=``), so these
tests reproduce that host on any machine that has the unit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO
from helpers.systemd_harness import Container, HarnessError, unavailable_reason

WAIT_ONLINE = "systemd-networkd-wait-online.service"
HAS_WAIT_ONLINE = any(Path(d, WAIT_ONLINE).exists()
                      for d in ("/usr/lib/systemd/system", "/lib/systemd/system"))

pytestmark = [
    pytest.mark.systemd,
    pytest.mark.root,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.skipif(not HAS_WAIT_ONLINE, reason=f"{WAIT_ONLINE} is not installed"),
]

WANT_WAIT_ONLINE = [f"systemd.wants={WAIT_ONLINE}"]


def test_wait_online_is_masked_and_does_not_hold_the_boot() -> None:
    with Container(REPO, init_args=WANT_WAIT_ONLINE, boot_timeout=30) as box:
        show = box.run("systemctl", "show", "-p", "LoadState", "--value", WAIT_ONLINE).stdout
        assert show.strip() == "masked"
        # the template too: NetworkManager-less hosts use per-interface instances
        show = box.run("systemctl", "show", "-p", "LoadState", "--value",
                       "systemd-networkd-wait-online@eth0.service").stdout
        assert show.strip() == "masked"


def test_a_boot_that_does_not_finish_says_what_it_waits_for() -> None:
    box = Container(REPO, masked=(), init_args=WANT_WAIT_ONLINE, boot_timeout=5)
    with pytest.raises(HarnessError) as caught, box:
        pass
    message = str(caught.value)
    assert message.startswith("the container did not boot within 5 s (state 'starting'):\n")
    jobs = message.split("--- jobs", 1)[1].split("\n--- ", 1)[0]
    assert any(line.split()[1:4] == [WAIT_ONLINE, "start", "running"]
               for line in jobs.splitlines()[1:] if len(line.split()) >= 4), message
    journal = message.split("--- journal", 1)[1].split("\n--- ", 1)[0]
    assert " systemd[1]: " in journal and "(empty)" not in journal, message  # its own journal
    assert box.pid is None and not box.workdir.exists()  # stopped and cleaned up all the same

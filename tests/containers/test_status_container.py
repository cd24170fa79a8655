"""``suspendguard status`` inside a real booted systemd with a real logind (systemd-nspawn).

The container and its fake /sys/power come from tests/systemd_harness.py;
this module boots its own (the scenarios' container in
test_systemd_container.py is private to that module). After
``suspendguard install``, status must see what the real logind and systemd
say: CanSuspend "yes" (the fake /sys/power offers mem), the veto units
loaded and enabled; after a vetoed ``systemctl suspend``, the failed veto
unit and the recorded attempt.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from helpers.systemd_harness import HOLDER, Boot, Container, container_marks, guard_config
from prometheus_client.parser import text_string_to_metric_families

pytestmark = container_marks()

NODE = "/dev/suspendguard-status/accel0"  # /run is nodev in the container: /dev is not
STATE_DIR = "/var/lib/suspendguard"
CONFIG = guard_config(NODE, state_dir=STATE_DIR)
VETO_UNIT = "suspendguard@suspend.service"


@pytest.fixture(scope="module")
def box(boot: Boot) -> Container:
    return boot(NODE, "1 7", "/run/suspendguard-test", config=CONFIG)


def status_json(box: Container) -> dict[str, Any]:
    result = box.suspendguard("status", "--json", check=False)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_status_sees_the_real_logind_and_the_enabled_veto_units(box: Container) -> None:
    data = status_json(box)
    assert data["logind"]["available"] is True, data["logind"]
    assert data["logind"]["can_suspend"] == "yes"
    assert data["logind"]["preparing_for_sleep"] is False
    assert isinstance(data["logind"]["inhibit_delay_max_usec"], int)
    assert data["systemd"]["available"] is True, data["systemd"]
    unit = data["systemd"]["units"][VETO_UNIT]
    assert unit["load_state"] == "loaded"
    assert unit["unit_file_state"] in ("enabled", "enabled-runtime", "static"), unit
    assert data["installation"]["installed"] is True
    assert data["installation"]["instances"]["suspend"]["enabled"] is True
    assert data["installation"]["hook"]["executable"] is True
    assert data["config"] == {"path": "/etc/suspendguard/config.toml", "valid": True,
                              "error": None, "loaded": True}
    assert data["verdict"]["verdict"] == "allow"

    human = box.suspendguard("status", check=False)
    assert human.returncode == 0, human.stderr
    assert "logind: CanSuspend yes" in human.stdout
    assert "installation: installed" in human.stdout
    line = next(x for x in human.stdout.splitlines() if VETO_UNIT in x)
    assert line.split()[1] == "loaded"


def test_status_after_a_vetoed_suspend(box: Container) -> None:
    unit = "sg-status-deaf.service"
    box.start_job(unit, [sys.executable, HOLDER, "--node", NODE, "--mode", "deaf",
                         "--marker", "/run/suspendguard-test/signals.log"])
    try:
        journal = box.suspend()
        assert "Dependency failed" in journal, journal[-3000:]
        data = status_json(box)
        assert box.power_state() == "freeze mem disk\n"  # it never slept
    finally:
        for name in (unit, VETO_UNIT):
            box.run("systemctl", "stop", name, check=False)
            box.run("systemctl", "reset-failed", name, check=False)
        box.reset_power()
    veto = data["systemd"]["units"][VETO_UNIT]
    assert veto["active_state"] == "failed" and veto["result"] == "exit-code", veto
    history = data["history"]
    assert history["counts"].get("veto", 0) >= 1
    last = history["attempts"][0]
    assert last["action"] == "suspend" and last["verdict"] == "veto"
    assert any("cannot stop it" in r for r in last["reasons"])

    prom = box.suspendguard("status", "--prometheus", check=False)
    assert prom.returncode == 0, prom.stderr
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(prom.stdout) for s in f.samples}
    assert samples[("suspendguard_logind_can_suspend", (("answer", "yes"),))] == 1
    assert samples[("suspendguard_attempts_total", (("verdict", "veto"),))] >= 1
    assert samples[("suspendguard_installed", ())] == 1

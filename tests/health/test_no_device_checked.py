"""``restore`` after a resume no tool could check (no npu-smi, no CANN): no clean bill, and the
check is the last one that ``status`` shows, not an earlier one's devices."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.runners import cli
from prometheus_client.parser import text_string_to_metric_families

from suspendguard.record import DeviceHealth
from suspendguard.store.history import History


def test_a_check_that_reached_no_device_is_the_last_check_status_shows(
        tmp_path: Path, no_bus: str) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(
        f'[devices]\nfamilies = ["ascend"]\n[state]\ndir = "{tmp_path / "state"}"\n'
        f'[idle]\nbackends = []\nnpu_smi = "{tmp_path / "no-npu-smi"}"\n'
        f'ascend_env = "{tmp_path / "no-set_env.sh"}"\n')
    with History.open(str(tmp_path / "state")) as h:  # the resume before, checked healthy
        h.record_health(None, [DeviceHealth("npu 0", "ascend", "healthy")])

    code, out, err = cli("--config", str(conf), "restore", "--json")
    assert code == 0, err
    health = json.loads(out)["health"]
    assert health["final"]["devices"] == [] and health["final"]["healthy"] is None, health
    assert "npu-smi not asked" in err

    code, out, err = cli("--config", str(conf), "status", "--json")
    assert code == 0, err
    [row] = json.loads(out)["history"]["health"]
    assert (row["device"], row["family"], row["state"]) == ("none", "", "unknown"), row
    assert row["reason"].startswith("no device checked")

    code, out, err = cli("--config", str(conf), "status", "--prometheus")
    assert code == 0, err
    ones = {(s.labels["device"], s.labels["state"])
            for family in text_string_to_metric_families(out) for s in family.samples
            if s.name == "suspendguard_device_health" and s.value == 1}
    assert ones == {("none", "unknown")}, ones

    code, out, _ = cli("--config", str(conf), "status")
    assert "  none: unknown: no device checked" in out, out

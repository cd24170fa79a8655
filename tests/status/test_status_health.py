"""``status`` on the last health check after resume: a device that several sources answered
for in one check, and a check whose recorded time is damaged."""

from __future__ import annotations

import io
import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from suspendguard.cli import main
from suspendguard.record import DeviceHealth
from suspendguard.store.history import History


def status(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["status", *argv], out=out, err=err, environ={})
    return code, out.getvalue(), err.getvalue()


def test_a_device_two_sources_answered_for_is_one_series_set_its_worst_state(
        conf: Path, tmp_path: Path, no_bus: str) -> None:
    """CUDA and NVML both name a GPU "gpu N", npu-smi and pyACL both answer for an Ascend
    chip: node_exporter's textfile collector refuses a series given twice."""
    with History.open(str(tmp_path / "state")) as h:
        h.record_health(None, [
            DeviceHealth("gpu 0", "nvidia", "healthy"),  # CUDA
            DeviceHealth("gpu 0", "nvidia", "unhealthy", "GPU is lost"),  # NVML
            DeviceHealth("gpu 1", "nvidia", "unknown", "CUDA did not answer"),
            DeviceHealth("gpu 1", "nvidia", "healthy"),
            DeviceHealth("npu 0 chip 0", "ascend", "healthy"),
            DeviceHealth("npu 0 chip 0", "ascend", "healthy")])
    code, out, _ = status("--prometheus", "--config", str(conf))
    assert code == 0
    samples = [(tuple(sorted(s.labels.items())), s.value)
               for family in text_string_to_metric_families(out)
               for s in family.samples if s.name == "suspendguard_device_health"]
    assert len(samples) == len(set(labels for labels, _ in samples)) == 9
    ones = {(dict(labels)["device"], dict(labels)["state"]) for labels, v in samples if v == 1}
    assert ones == {("gpu 0", "unhealthy"), ("gpu 1", "unknown"), ("npu 0 chip 0", "healthy")}


def test_a_health_check_whose_time_is_damaged_leaves_status_json_whole(
        conf: Path, tmp_path: Path, no_bus: str) -> None:
    """Text in the REAL column: no traceback, and the newer check is the last one."""
    with History.open(str(tmp_path / "state")) as h:
        h.record_health(None, [DeviceHealth("gpu 0", "nvidia", "unhealthy", "Xid 79")])
        h.conn.execute("UPDATE health SET time = 'garbage'")
        h.conn.commit()
        h.record_health(None, [DeviceHealth("gpu 0", "nvidia", "healthy")])
    code, out, err = status("--json", "--config", str(conf))
    assert code == 0 and "Traceback" not in err, err
    [row] = json.loads(out)["history"]["health"]
    assert (row["device"], row["state"]) == ("gpu 0", "healthy")
    assert row["time"]

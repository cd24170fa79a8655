"""NVML through a fake ``pynvml`` with the real module's names and shapes,
scripted with the figures of the H200 capture (tests/fixtures/nvidia-h200/)."""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from helpers import FAKES
from helpers.wait import wait_for

from suspendguard.config import IdleConfig, defaults
from suspendguard.idle.base import QueryFailed
from suspendguard.idle.nvml import NvmlBackend
from suspendguard.system.deadline import UNBOUNDED, Deadline, bounded

FAKES = FAKES / "idle" / "nvml"
MiB = 1024 * 1024

# `## nvml` section of three-torch-holders.txt: util gpu 100 mem 23, three compute pids
H200_BUSY = {"gpu": 100, "memory": 23, "used": 2318 * MiB,
             "compute": [(432, 1050673152), (434, 679477248), (433, 679477248)]}
H200_IDLE = {"gpu": 0, "memory": 0, "used": 0}


@pytest.fixture
def pynvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    before = sys.modules.pop("pynvml", None)
    monkeypatch.syspath_prepend(str(FAKES))
    module = importlib.import_module("pynvml")
    assert Path(str(module.__file__)).parent == FAKES
    module.STATE["names"] = {432: "python3", 433: "python3", 434: "python3"}
    yield module
    sys.modules.pop("pynvml", None)
    if before is not None:
        sys.modules["pynvml"] = before


def config() -> IdleConfig:
    return replace(defaults().idle, command_timeout_s=5.0)


def test_busy_h200_with_its_three_holders(pynvml: ModuleType) -> None:
    pynvml.SCRIPT[:] = [H200_BUSY]
    backend = NvmlBackend(config())
    assert backend.probe() == (True, "pynvml")
    [gpu] = backend.query(5.0)
    assert (gpu.id, gpu.family, gpu.source, gpu.state) == ("gpu 0", "nvidia", "nvml", "busy")
    assert gpu.readings["gpu_pct"] == 100.0 and gpu.readings["gpu_memory_pct"] == 23.0
    assert gpu.readings["memory_used_mb"] == 2318.0
    assert [(p.pid, p.name, round(p.memory_mb or 0)) for p in gpu.processes] == [
        (432, "python3", 1002), (434, "python3", 648), (433, "python3", 648)]
    assert gpu.load() == ("GPU", 100.0)
    assert pynvml.STATE["initialised"] == 0  # shut down again after each query


def test_idle_h200(pynvml: ModuleType) -> None:
    pynvml.SCRIPT[:] = [H200_IDLE]
    [gpu] = NvmlBackend(config()).query(5.0)
    assert (gpu.state, gpu.processes) == ("idle", ())


def test_utilization_not_supported_is_unknown_not_busy(pynvml: ModuleType) -> None:
    pynvml.SCRIPT[:] = [dict(H200_BUSY, error_nvmlDeviceGetUtilizationRates=pynvml.NVML_ERROR_NOT_SUPPORTED)]
    [gpu] = NvmlBackend(config()).query(5.0)
    assert gpu.state == "unknown"
    assert "utilization: Not Supported" in gpu.reason
    assert len(gpu.processes) == 3  # still reported, for the holder list


def test_graphics_processes_and_unknown_memory(pynvml: ModuleType) -> None:
    pynvml.SCRIPT[:] = [H200_IDLE, {"gpu": 4, "memory": 0, "compute": [(77, None)],
                                    "graphics": [(77, None), (78, 5 * MiB)]}]
    idle, busy = NvmlBackend(config()).query(5.0)
    assert (idle.state, busy.state) == ("idle", "busy")
    assert [(p.pid, p.name, p.memory_mb) for p in busy.processes] == [(77, "", None),
                                                                      (78, "", 5.0)]


def test_driver_not_loaded_fails_the_query(pynvml: ModuleType) -> None:
    pynvml.STATE["init_error"] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    try:
        with pytest.raises(QueryFailed, match="NVML: Driver Not Loaded"):
            NvmlBackend(config()).query(5.0)
    finally:
        pynvml.STATE["init_error"] = None


def nvml_answers() -> bool:
    """Whether a fresh backend gets an answer from NVML (no call of its stuck any more)."""
    try:
        return bool(NvmlBackend(config()).query(5.0))
    except QueryFailed:
        return False


def test_hung_nvml_is_abandoned_and_not_asked_again(pynvml: ModuleType) -> None:
    pynvml.SCRIPT[:] = [H200_IDLE]
    pynvml.STATE["hang_s"] = 2.0
    backend = NvmlBackend(config())
    try:
        with pytest.raises(QueryFailed, match=r"no answer within 0\.2 s"):
            backend.query(0.2)
        with pytest.raises(QueryFailed, match="not asked again"):
            backend.query(5.0)
        # The next check (after the drain, the next watch look, the health check) makes
        # a backend of its own: it must not enter NVML either while that call is stuck.
        with pytest.raises(QueryFailed, match="not asked again while that call is stuck"):
            NvmlBackend(config()).query(5.0)
        assert pynvml.STATE["calls"].count("nvmlInit") == 1
    finally:
        pynvml.STATE["hang_s"] = 0.0

    # Once the stuck call has returned, NVML is asked again.
    wait_for(nvml_answers, timeout=10.0, interval=0.1, message="NVML was never asked again")


def test_hung_nvml_is_given_up_by_the_runs_deadline(pynvml: ModuleType) -> None:
    # `slurm health` bounds its checks by a Deadline (45 s); the NVML call, asked with a
    # longer timeout of its own, was waited for past it, as long as the driver hung.
    pynvml.SCRIPT[:] = [H200_IDLE]
    pynvml.STATE["hang_s"] = 8.0
    try:
        with bounded(Deadline(time.monotonic() + 1.0)), pytest.raises(
                QueryFailed, match=r"^nvml: no answer within [01]\.\d s \(the run's deadline\) "
                                   r"\(abandoned\)$"):
            NvmlBackend(config()).query(60.0)
    finally:
        pynvml.STATE["hang_s"] = 0.0

    # The abandoned call returns at the end of its hang; the next test's NVML is free then.
    wait_for(nvml_answers, timeout=20.0, interval=0.1, message="NVML was never asked again")


def test_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    ok, why = NvmlBackend(config()).probe()
    assert not ok and "nvidia-ml-py" in why and "suspendguard[nvidia]" in why


def test_mig_gpu_not_supported_vetoes_by_default(pynvml: ModuleType) -> None:
    from suspendguard.idle.sampler import check_idle

    # A MIG-enabled GPU: NVML has no whole-GPU utilization for it.
    pynvml.SCRIPT[:] = [dict(H200_IDLE, error_nvmlDeviceGetUtilizationRates=pynvml.NVML_ERROR_NOT_SUPPORTED)]
    cfg = replace(config(), samples=1, settle_s=0.1, interval_ms=10)
    assert defaults().idle.on_unknown == "veto"
    report = check_idle(cfg, ["nvidia"], UNBOUNDED, backends=[NvmlBackend(cfg)])
    assert report.state == "unknown"
    [why] = report.veto_reasons
    assert "gpu 0 (nvml): no utilization reading (not supported); utilization: Not Supported" in why
    assert why.endswith("vetoed by [idle] on_unknown = veto")

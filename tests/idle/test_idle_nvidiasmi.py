"""nvidia-smi: the backend on a fake tool printing the H200 capture's own CSV
(tests/fixtures/nvidia-h200/), and its place behind NVML in the sampler."""

from __future__ import annotations

import importlib
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import FAKES
from helpers.nvidia import APPS_HEADER, BUSY_APPS, IDLE_GPUS, TOOL, FakeNvidiaSmi, busy_gpus

from suspendguard.config import IDLE_BACKENDS, IdleConfig, defaults
from suspendguard.idle.base import QueryFailed
from suspendguard.idle.nvidiasmi import NvidiaSmiBackend, parse_apps
from suspendguard.idle.nvml import NvmlBackend
from suspendguard.idle.sampler import check_idle, make_backends
from suspendguard.system.deadline import UNBOUNDED


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvidiaSmi:
    return FakeNvidiaSmi(tmp_path, monkeypatch)


def config(**kw: object) -> IdleConfig:
    base = replace(defaults().idle, nvidia_smi=str(TOOL), command_timeout_s=5.0,
                   interval_ms=10, settle_s=0.2, samples=2)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_busy_h200_with_its_three_holders(smi: FakeNvidiaSmi) -> None:
    smi.show(busy_gpus(), [432, 434, 433])
    backend = NvidiaSmiBackend(config())
    assert backend.probe() == (True, str(TOOL))
    [gpu] = backend.query(5.0)
    assert (gpu.id, gpu.family, gpu.source, gpu.state) == ("gpu 0", "nvidia", "nvidia-smi", "busy")
    assert gpu.readings["gpu_pct"] == 100.0 and gpu.readings["gpu_memory_pct"] == 23.0
    assert gpu.readings["memory_used_mb"] == 2318.0 and gpu.readings["memory_total_mb"] == 143771.0
    assert [(p.pid, p.name, p.memory_mb) for p in gpu.processes] == [
        (432, "python3", 1002.0), (434, "python3", 648.0), (433, "python3", 648.0)]
    assert gpu.lists_processes
    # The machine-readable form, as the tool documents it.
    assert smi.calls() == [
        "--query-gpu=index,uuid,utilization.gpu,utilization.memory,memory.used,memory.total "
        "--format=csv,noheader,nounits",
        "--query-compute-apps=gpu_uuid,pid,used_gpu_memory,process_name "
        "--format=csv,noheader,nounits"]


@pytest.mark.parametrize("row", ["GPU-aaa, [N/A], [N/A], python3",  # no pid
                                 "MIG-xyz, 434, 648, python3"])  # on no GPU listed here
def test_a_process_row_it_cannot_place_makes_the_list_not_whole(smi: FakeNvidiaSmi,
                                                               row: str) -> None:
    smi.show(busy_gpus(), apps=[APPS_HEADER, BUSY_APPS[1], row])
    [gpu] = NvidiaSmiBackend(config()).query(5.0)
    assert [p.pid for p in gpu.processes] == [int(BUSY_APPS[1].split(", ")[1])]
    assert not gpu.lists_processes
    assert gpu.reason == ("compute processes: 1 row(s) name no pid or no GPU listed here: the "
                          "list is not whole")


def test_idle_h200_has_no_process(smi: FakeNvidiaSmi) -> None:
    [gpu] = NvidiaSmiBackend(config()).query(5.0)
    assert gpu.state == "idle" and gpu.processes == () and gpu.lists_processes
    report = check_idle(config(), ["nvidia"], UNBOUNDED, backends=[NvidiaSmiBackend(config())])
    assert report.state == "idle" and report.veto_reasons == ()
    assert report.process_view("nvidia") == "nvidia-smi"


def test_mig_gpu_without_utilization_is_unknown_and_vetoes(smi: FakeNvidiaSmi) -> None:
    # A MIG-enabled GPU has no whole-GPU utilization: nvidia-smi prints [N/A].
    smi.show(busy_gpus(util="[N/A]", memory="[N/A]", used="0 MiB"), [])
    report = check_idle(config(), ["nvidia"], UNBOUNDED, backends=[NvidiaSmiBackend(config())])
    assert report.state == "unknown"
    [why] = report.veto_reasons
    assert why.startswith("nvidia: no idle backend could answer (gpu 0 (nvidia-smi): "
                          "no utilization reading (not supported)")
    assert why.endswith("vetoed by [idle] on_unknown = veto")


def test_failing_tool_is_a_failed_query_with_its_words(smi: FakeNvidiaSmi) -> None:
    smi.mode("fail")
    with pytest.raises(QueryFailed, match="exit status 9: NVIDIA-SMI has failed because it "
                       "couldn't communicate with the NVIDIA driver"):
        NvidiaSmiBackend(config()).query(5.0)
    report = check_idle(config(), ["nvidia"], UNBOUNDED, backends=[NvidiaSmiBackend(config())])
    assert report.state == "unknown" and report.veto_reasons


def test_hung_tool_is_killed_at_the_query_timeout(smi: FakeNvidiaSmi) -> None:
    smi.mode("hang")
    with pytest.raises(QueryFailed, match="no answer within the timeout"):
        NvidiaSmiBackend(config()).query(0.5)


def test_process_name_with_commas_stays_whole() -> None:
    text = "GPU-1, 77, 12, /opt/my, odd/job\nGPU-1, [N/A], 3, x\n"
    assert parse_apps(text) == [("GPU-1", 77, 12.0, "/opt/my, odd/job")]


def test_missing_tool_says_where_it_comes_from() -> None:
    ok, why = NvidiaSmiBackend(config(nvidia_smi="no-such-nvidia-smi")).probe()
    assert not ok and "ships with the NVIDIA driver" in why


def test_default_backends_include_nvidia_smi_after_nvml() -> None:
    names = [b.name for b in make_backends(defaults().idle)]
    assert names.index("nvml") < names.index("nvidia-smi")
    assert IDLE_BACKENDS["nvidia-smi"].family == "nvidia"


def test_nvml_first_when_importable_else_nvidia_smi(smi: FakeNvidiaSmi,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config()
    smi.show(IDLE_GPUS, [])
    # No pynvml: nvidia-smi answers.
    monkeypatch.setitem(sys.modules, "pynvml", None)  # type: ignore[arg-type]
    report = check_idle(cfg, ["nvidia"], UNBOUNDED, backends=[NvmlBackend(cfg), NvidiaSmiBackend(cfg)])
    assert report.state == "idle"
    assert {b.name: b.available for b in report.backends} == {"nvml": False, "nvidia-smi": True}
    # pynvml importable (the fake module): NVML answers, nvidia-smi is not asked.
    monkeypatch.delitem(sys.modules, "pynvml")
    monkeypatch.syspath_prepend(str(FAKES / "idle" / "nvml"))
    pynvml = importlib.import_module("pynvml")
    pynvml.SCRIPT[:] = [{"gpu": 0, "memory": 0, "used": 0}]
    before = len(smi.calls())
    report = check_idle(cfg, ["nvidia"], UNBOUNDED, backends=[NvmlBackend(cfg), NvidiaSmiBackend(cfg)])
    assert report.state == "idle"
    [smi_status] = [b for b in report.backends if b.name == "nvidia-smi"]
    assert smi_status.reason == "not needed: nvml answers for nvidia"
    assert len(smi.calls()) == before
    monkeypatch.delitem(sys.modules, "pynvml")

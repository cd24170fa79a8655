"""Each health check on its own: the CUDA probe in a child, NVML, the kernel log, npu-smi, pyACL."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import NPU_INFO, Gpu, journalctl
from helpers.records import finding
from helpers.slurm_cluster import critical

from suspendguard.config import Config, build
from suspendguard.errors import ConfigError
from suspendguard.health import ascend, nvidia
from suspendguard.health.model import UVM_SIGNATURE, HealthReport, merge
from suspendguard.health.resume import check
from suspendguard.record import DeviceHealth

SINCE = datetime.fromtimestamp(1_700_000_000)


def gpu_config(gpu: Gpu, **resume: Any) -> Config:
    return build({"devices": {"families": ["nvidia"]}, "idle": {"backends": []},
                  "resume": {"cuda_library": str(gpu.lib), **resume}})


def test_cuda_999_after_resume_is_unhealthy_with_the_uvm_signature(gpu: Gpu) -> None:
    found = nvidia.cuda_check(gpu_config(gpu), 20.0)
    assert found == [DeviceHealth("nvidia", "nvidia", "unhealthy",
                                  "CUDA init error 999 (CUDA_ERROR_UNKNOWN)", "cuda",
                                  UVM_SIGNATURE)]
    assert gpu.calls() == ["cuInit 0"]  # nothing after a failed cuInit


def test_cuda_healthy_makes_and_destroys_a_context_on_each_device(
        gpu: Gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "ok")
    monkeypatch.setenv("FAKE_CUDA_COUNT", "2")
    found = nvidia.cuda_check(gpu_config(gpu), 20.0)
    assert [(d.device, d.state) for d in found or []] == [("gpu 0", "healthy"),
                                                         ("gpu 1", "healthy")]
    calls = gpu.calls()
    assert calls[:2] == ["cuInit 0", "cuDeviceGetCount 0"]
    assert calls.count("cuCtxDestroy_v2 0") == 1 and calls.count("cuCtxDestroy_v2 1") == 1


def test_a_context_that_fails_names_its_device(gpu: Gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "ctx")
    monkeypatch.setenv("FAKE_CUDA_COUNT", "2")
    found = nvidia.cuda_check(gpu_config(gpu), 20.0) or []
    assert [d.describe() for d in found] == [
        "gpu 0 healthy", "gpu 1 unhealthy: cuCtxCreate error 999 (CUDA_ERROR_UNKNOWN)"]


@pytest.mark.parametrize(("mode", "error"), [("exclusive", "46 (CUDA_ERROR_DEVICES_UNAVAILABLE)"),
                                            ("full", "2 (CUDA_ERROR_OUT_OF_MEMORY)")])
def test_a_gpu_a_job_uses_is_unknown_not_unhealthy(gpu: Gpu, monkeypatch: pytest.MonkeyPatch,
                                                   mode: str, error: str) -> None:
    # slurm health runs beside jobs: an exclusive-process GPU, or one whose memory a job
    # took, refuses the probe's context; that says nothing of its health.
    monkeypatch.setenv("FAKE_CUDA_MODE", mode)
    monkeypatch.setenv("FAKE_CUDA_COUNT", "2")
    found = nvidia.cuda_check(gpu_config(gpu), 20.0) or []
    assert [d.describe() for d in found] == [
        "gpu 0 healthy", f"gpu 1 unknown: cuCtxCreate error {error}: in use by another process "
        "(exclusive compute mode, or its memory taken), so not probed"]


def test_a_hung_cuda_init_is_killed_at_the_timeout(gpu: Gpu,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "hang")
    started = time.monotonic()
    found = nvidia.cuda_check(gpu_config(gpu), 1.0) or []
    assert time.monotonic() - started < 10
    assert [(d.state, d.reason) for d in found] == [
        ("unhealthy", "CUDA initialisation did not answer within 1 s (killed)")]


def test_a_cuda_init_that_crashes_is_unhealthy(gpu: Gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    # The driver takes the probe down (SIGSEGV): a job started now would meet the same.
    monkeypatch.setenv("FAKE_CUDA_MODE", "crash")
    found = nvidia.cuda_check(gpu_config(gpu), 20.0) or []
    assert [(d.state, d.reason.startswith("CUDA initialisation crashed (")) for d in found] == [
        ("unhealthy", True)], found
    assert "killed by SIGSEGV" in found[0].reason


def test_no_cuda_driver_is_no_nvidia_device(tmp_path: Path) -> None:
    config = build({"resume": {"cuda_library": str(tmp_path / "no-libcuda.so.1")}})
    assert nvidia.cuda_check(config, 20.0) is None
    report = check(config, SINCE, families=("nvidia",))
    assert report.devices == () and report.healthy
    assert "no CUDA driver" in report.notes[0]


def test_a_driver_that_sees_no_gpu_is_no_nvidia_device(
        gpu: Gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # cuInit answers 100 (CUDA_ERROR_NO_DEVICE) on a host that has the driver's
    # libraries and no GPU: nothing to check, not a GPU unhealthy after resume.
    monkeypatch.setenv("FAKE_CUDA_MODE", "nodevice")
    monkeypatch.setattr(nvidia, "GPU_NODES", str(tmp_path / "nvidia[0-9]*"))
    config = gpu_config(gpu)
    assert nvidia.cuda_check(config, 20.0) is None
    report = check(config, SINCE)
    assert report.devices == () and report.healthy
    # Where a GPU's device node is, the same answer is a GPU the driver lost.
    (tmp_path / "nvidia0").touch()
    found = nvidia.cuda_check(config, 20.0) or []
    assert [(d.state, d.reason) for d in found] == [
        ("unhealthy", "CUDA init error 100 (CUDA_ERROR_NO_DEVICE)")]


@pytest.mark.parametrize(("line", "unhealthy"), [
    ("NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus.", True),
    ("NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.", True),
    ("PM: pci_pm_suspend(): nv_pmops_suspend+0x0/0x30 [nvidia] returns -5", False),
    ("NVRM: Xid (PCI:0000:01:00): 31, pid=1234, Ch 00000008, MMU Fault", False),
])
def test_kernel_log_since_the_attempt(tmp_path: Path, line: str, unhealthy: bool) -> None:
    tool = journalctl(tmp_path, "usb 1-1: new device", line)
    found, note = nvidia.kernel_check(SINCE, 5.0, tool)
    assert bool(found) is unhealthy
    if unhealthy:
        assert found[0].state == "unhealthy" and line in found[0].reason
    argv = (tmp_path / "journalctl.log").read_text().split()
    assert "-k" in argv and f"--since=@{SINCE.timestamp():.6f}" in argv
    assert ("nv_pmops" in note) is ("nv_pmops" in line)


def test_nvml_lost_gpu_is_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from helpers import FAKES
    monkeypatch.syspath_prepend(str(FAKES / "idle" / "nvml"))
    # recorded as absent, so that the fake module is gone again after the test
    monkeypatch.setitem(sys.modules, "pynvml", None)
    del sys.modules["pynvml"]
    import pynvml
    monkeypatch.setattr(pynvml, "SCRIPT", [{"gpu": 0, "memory": 0},
                                           {"error_nvmlDeviceGetUtilizationRates":
                                            pynvml.NVML_ERROR_GPU_IS_LOST}])
    found, note = nvidia.nvml_check(build({}), 5.0)
    assert [(d.device, d.state) for d in found] == [("gpu 0", "healthy"), ("gpu 1", "unhealthy")]
    assert "GPU is lost" in found[1].reason and not note


def test_nvml_gpu_it_counts_and_cannot_open_is_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's init and count answered, and it has no handle for a GPU ("Unknown Error", the
    usual answer after a bad resume): unhealthy as a GPU whose CUDA device or context fails,
    with NVML's words. CUDA's numbering may differ, so CUDA healthy does not outvote it."""
    import sys

    from helpers import FAKES
    monkeypatch.syspath_prepend(str(FAKES / "idle" / "nvml"))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    del sys.modules["pynvml"]
    import pynvml
    monkeypatch.setattr(pynvml, "SCRIPT", [{"gpu": 0, "memory": 0}, {"gpu": 0, "memory": 0}])
    opens = pynvml.nvmlDeviceGetHandleByIndex

    def handle(index: int) -> Any:
        if index == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return opens(index)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", handle)
    found, note = nvidia.nvml_check(build({}), 5.0, {"gpu 0": "", "gpu 1": ""})
    assert [(d.device, d.state, d.reason) for d in found] == [
        ("gpu 0", "healthy", ""), ("gpu 1", "unhealthy", "NVML handle: Unknown Error")], note
    cuda = [DeviceHealth("gpu 0", "nvidia", "healthy", "", "cuda")]
    report = HealthReport(merge(cuda + found))
    assert not report.healthy and report.to_json()["healthy"] is False


def test_a_check_of_no_device_is_not_reported_healthy(tmp_path: Path) -> None:
    """No tool answered (no npu-smi, no CANN): nothing holds the jobs back, and nothing says
    the devices are healthy either."""
    config = build({"devices": {"families": ["ascend"]},
                    "idle": {"npu_smi": str(tmp_path / "none"),
                             "ascend_env": str(tmp_path / "none.sh")}})
    report = check(config, SINCE, before={"npu 0": "OK"})
    assert report.devices == () and report.healthy and len(report.notes) == 2
    assert report.to_json()["healthy"] is None


def npu_config(npu: Any, **resume: Any) -> Config:
    return build({"devices": {"families": ["ascend"]},
                  "idle": {"backends": [], "npu_smi": npu.tool, "ascend_env": npu.env},
                  "resume": resume})


def test_npu_smi_health_per_chip(npu: Any) -> None:
    found, _ = ascend.npu_smi_check(npu_config(npu), 10.0)
    assert [d.describe() for d in found] == ["npu 0 healthy", "npu 1 healthy"]
    npu.alarms(1)
    found, _ = ascend.npu_smi_check(npu_config(npu), 10.0)
    assert [d.describe() for d in found] == ["npu 0 unhealthy: npu-smi health Alarm",
                                             "npu 1 unhealthy: npu-smi health Alarm"]


def test_npu_smi_health_is_judged_against_the_word_before_the_suspend(npu: Any) -> None:
    npu.alarms(1)
    found, _ = ascend.npu_smi_check(npu_config(npu), 10.0, {"npu 0": "Alarm", "npu 1": "OK"})
    assert [(d.device, d.state, d.reason) for d in found] == [
        ("npu 0", "healthy", "npu-smi health Alarm, as before the suspend"),
        ("npu 1", "unhealthy", "npu-smi health Alarm (before the suspend: OK)")]
    npu.alarms(1)
    found, _ = ascend.npu_smi_check(npu_config(npu), 10.0, {"npu 0": "Critical", "npu 1": "0x4"})
    assert [(d.device, d.state) for d in found] == [("npu 0", "healthy"), ("npu 1", "unhealthy")]


def test_a_chip_critical_before_and_after_the_suspend_is_unhealthy(
        npu: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No worse than before, yet a critical alarm: its jobs are held, unless the site's
    # ascend_healthy lists Critical.
    info = tmp_path / "info.txt"
    info.write_text(critical(NPU_INFO.read_text()))
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(info))
    before = {"npu 0": "Critical", "npu 1": "OK"}
    found, _ = ascend.npu_smi_check(npu_config(npu), 10.0, before)
    assert [(d.device, d.state, d.reason) for d in found] == [
        ("npu 0", "unhealthy", "npu-smi health Critical (before the suspend: Critical)"),
        ("npu 1", "unhealthy", "npu-smi health Critical (before the suspend: OK)")]
    taken = npu_config(npu, ascend_healthy=["OK", "Warning", "Critical"])
    found, _ = ascend.npu_smi_check(taken, 10.0, before)
    assert [(d.device, d.state) for d in found] == [("npu 0", "healthy"), ("npu 1", "healthy")]


def test_a_chip_listed_before_the_suspend_and_gone_after_it_is_unhealthy(npu: Any) -> None:
    # npu-smi lists npu 0 and npu 1 now. Before the suspend npu 0 had two chips, so its
    # first was "npu 0 chip 0": the same chip, now the NPU's only one, is "npu 0".
    found, _ = ascend.npu_smi_check(npu_config(npu), 10.0, {
        "npu 0 chip 0": "OK", "npu 0 chip 1": "OK", "npu 1": "OK", "npu 2": "Warning"})
    assert [(d.device, d.state, d.reason) for d in found] == [
        ("npu 0", "healthy", ""), ("npu 1", "healthy", ""),
        ("npu 0 chip 1", "unhealthy", "not listed by npu-smi after resume (before the "
                                      "suspend: OK)"),
        ("npu 2", "unhealthy", "not listed by npu-smi after resume (before the suspend: "
                               "Warning)")]


def test_npu_smi_words_taken_as_healthy_are_the_configs(npu: Any) -> None:
    npu.alarms(1)
    found, _ = ascend.npu_smi_check(npu_config(npu, ascend_healthy=["OK", "Alarm"]), 10.0)
    assert [(d.device, d.state, d.reason) for d in found] == [("npu 0", "healthy", ""),
                                                              ("npu 1", "healthy", "")]
    npu.alarms(1)
    found, _ = ascend.npu_smi_check(npu_config(npu), 10.0)  # the default: OK and Warning
    assert [(d.device, d.state) for d in found] == [("npu 0", "unhealthy"), ("npu 1", "unhealthy")]
    with pytest.raises(ConfigError, match=r"\[resume\] ascend_healthy.*got 'Fine'"):
        npu_config(npu, ascend_healthy=["OK", "Fine"])


def test_npu_smi_that_cannot_read_the_board_is_unhealthy(
        npu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NPU_SMI_MODE", "fail")
    found, _ = ascend.npu_smi_check(npu_config(npu), 10.0)
    assert [(d.device, d.state) for d in found] == [("ascend", "unhealthy")]
    assert "ret is -8020" in found[0].reason


def test_acl_opens_and_resets_each_device(npu: Any) -> None:
    npu.acl(count=2, open=[0, 507033])
    found, _ = ascend.acl_check(npu_config(npu), 20.0)
    assert [d.describe() for d in found] == [
        "device 0 healthy", "device 1 unhealthy: aclrtSetDevice returned 507033"]
    calls = npu.acl_calls()
    assert calls.index("rt.set_device 0") < calls.index("rt.reset_device 0")
    assert "rt.reset_device 1" not in calls and calls[-1] == "finalize"


def test_a_device_pyacl_counted_before_the_suspend_and_not_now_is_unhealthy(npu: Any) -> None:
    # aclrtGetDeviceCount answers 1 after resume where the guard read 2 devices before it;
    # npu-smi's chips ("npu N") are npu-smi's to judge.
    npu.acl(count=1, open=[0])
    found, _ = ascend.acl_check(npu_config(npu), 20.0,
                                {"device 0": "", "device 1": "", "npu 0": "OK"})
    assert [(d.device, d.state, d.reason, d.source) for d in found] == [
        ("device 0", "healthy", "", "acl"),
        ("device 1", "unhealthy", "not listed by pyACL after resume (before the suspend: "
                                  "listed)", "acl")]
    assert [d.device for d in ascend.acl_check(npu_config(npu), 20.0)[0]] == ["device 0"]


BEFORE = {"device 0": "", "device 1": "", "npu 0": "OK"}
NOT_LISTED = [(f"device {n}", "unhealthy", "not listed by pyACL after resume (before the suspend: "
               "listed)") for n in (0, 1)]


@pytest.mark.parametrize(("state", "why"), [
    ({"mode": "crash"}, "pyACL probe: killed by SIGSEGV"),
    ({"init": 507033}, "pyACL probe: acl.init() returned 507033"),
    ({"count_ret": 507033}, "pyACL probe: acl.rt.get_device_count() returned 507033"),
])
def test_a_pyacl_runtime_failing_after_resume_is_unhealthy(
        npu: Any, state: dict[str, Any], why: str) -> None:
    # A runtime that crashes in acl.init() or answers with an error after resume was
    # "unknown", and the held jobs were started on a device that does not open.
    npu.acl(count=2, open=[0, 0], **state)
    found, _ = ascend.acl_check(npu_config(npu), 20.0, BEFORE)
    assert [(d.device, d.state, d.reason) for d in found] == [
        ("ascend", "unhealthy", why), *NOT_LISTED]
    assert {d.source for d in found} == {"acl"}


def test_pyacl_that_cannot_be_imported_is_unknown(npu: Any, tmp_path: Path) -> None:
    # A set_env.sh that puts no acl on the path (no CANN toolkit) says nothing of the device.
    no_cann = tmp_path / "set_env.sh"
    no_cann.write_text("export SOMETHING=1\n")
    config = build({"devices": {"families": ["ascend"]},
                    "idle": {"backends": [], "ascend_env": str(no_cann)}})
    found, _ = ascend.acl_check(config, 20.0, BEFORE)
    assert [(d.device, d.state) for d in found] == [("ascend", "unknown")]
    assert found[0].reason.startswith("pyACL probe: cannot import acl")


def test_catalog_findings_since_the_attempt() -> None:
    found = ascend.catalog_check([finding("heartbeat-lost"), finding("hwts-busy-suspend"),
                                  finding("heartbeat-lost")])
    assert [(d.device, d.state, d.source) for d in found] == [("ascend", "unhealthy", "catalog")]
    assert "heartbeat" in found[0].reason
    assert ascend.catalog_check([finding("hwts-busy-suspend")]) == []


def test_a_catalog_finding_stamped_before_the_attempt_is_not_the_suspend_s() -> None:
    # The logs are read from 5 s before the attempt began (a device clock behind the host's):
    # a lost heartbeat stamped then happened before anyone asked to sleep.
    began = datetime(2026, 12, 1, 10, 0, 0)
    early = replace(finding("heartbeat-lost"), time="2026-12-01T09:59:57")
    late = replace(finding("heartbeat-lost"), time="2026-12-01T10:00:03")
    assert ascend.catalog_check([early], began) == []
    assert [d.state for d in ascend.catalog_check([early, late], began)] == ["unhealthy"]
    assert [d.state for d in ascend.catalog_check([finding("heartbeat-lost")], began)] == [
        "unhealthy"]  # a masked line, with no stamp of its own: counted as before


def test_catalog_alone_is_unknown_when_nothing_can_ask_the_device(tmp_path: Path) -> None:
    config = build({"devices": {"families": ["ascend"]},
                    "idle": {"npu_smi": str(tmp_path / "none"),
                             "ascend_env": str(tmp_path / "none.sh")}})
    report = check(config, SINCE, [finding("device-busy")])
    assert [(d.device, d.state) for d in report.devices] == [("ascend", "unknown")]
    assert report.healthy  # unknown holds nothing back


def test_nvidia_smi_answers_where_nvml_is_not_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from helpers.nvidia import TOOL, FakeNvidiaSmi
    FakeNvidiaSmi(tmp_path, monkeypatch)  # the H200 capture, idle
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    found, note = nvidia.nvml_check(build({"idle": {"nvidia_smi": str(TOOL)}}), 5.0)
    assert [(d.device, d.state, d.source) for d in found] == [("gpu 0", "healthy", "nvidia-smi")]
    assert not note


def test_a_gpu_read_before_the_suspend_and_not_listed_after_it_is_unhealthy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A GPU whose PCI device did not come back is in NVML's count no more: no "lost" answer
    # names it. The H200 capture lists one GPU; the guard read two before the suspend.
    import sys

    from helpers.nvidia import TOOL, FakeNvidiaSmi
    FakeNvidiaSmi(tmp_path, monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    config = build({"idle": {"nvidia_smi": str(TOOL)}})
    found, _ = nvidia.nvml_check(config, 5.0, {"gpu 0": "", "gpu 1": "", "npu 0": "OK"})
    assert [(d.device, d.state, d.reason) for d in found] == [
        ("gpu 0", "healthy", ""),
        ("gpu 1", "unhealthy", "not listed by nvidia-smi after resume (before the suspend: "
                               "listed)")]
    assert [d.state for d in nvidia.nvml_check(config, 5.0, {"gpu 0": ""})[0]] == ["healthy"]


def test_nvidia_smi_gpu_that_requires_reset_is_unhealthy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia-smi prints NVML's error in each field it cannot read: a GPU
    # after a failed resume reads "[GPU requires reset]", never a figure.
    import sys

    from helpers.nvidia import IDLE_GPUS, TOOL, FakeNvidiaSmi
    smi = FakeNvidiaSmi(tmp_path, monkeypatch)
    cells = IDLE_GPUS[1].split(", ")
    cells[3] = cells[4] = cells[5] = "[GPU requires reset]"
    smi.show([IDLE_GPUS[0], IDLE_GPUS[1].replace("0, GPU-", "1, GPU-x", 1), ", ".join(cells)], [])
    monkeypatch.setitem(sys.modules, "pynvml", None)
    found, _ = nvidia.nvml_check(build({"idle": {"nvidia_smi": str(TOOL)}}), 5.0)
    assert [(d.device, d.state) for d in found] == [("gpu 1", "healthy"), ("gpu 0", "unhealthy")]
    assert "GPU requires reset" in found[1].reason

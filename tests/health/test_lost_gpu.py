"""A GPU gone (Xid 79, NVML's lost GPU) beside CUDA's 999, and NVML or nvidia-smi failing as a whole."""

from __future__ import annotations

import shlex
import sys
from datetime import datetime
from pathlib import Path

import pytest
from conftest import MODPROBE, Gpu, journalctl

from suspendguard.config import Config, build
from suspendguard.health import nvidia
from suspendguard.health.model import UVM_SIGNATURE
from suspendguard.health.resume import AfterResume, Tools, after_resume

SINCE = datetime.fromtimestamp(1_700_000_000)
XID_79 = "NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus."
UNOPENED = "Unable to determine the device handle for GPU0000:02:00.0: Unknown Error"


def smi(tmp_path: Path, status: int, *lines: str) -> str:
    """An nvidia-smi that prints ``lines`` and exits ``status``, whatever it is asked."""
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + "".join(f"echo {shlex.quote(line)}\n" for line in lines)
                      + f"exit {status}\n")
    script.chmod(0o755)
    return str(script)


def config(gpu: Gpu, nvidia_smi: str, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: nvidia-smi answers for it
    return build({"devices": {"families": ["nvidia"]},
                  "idle": {"backends": [], "nvidia_smi": nvidia_smi},
                  "resume": {"cuda_library": str(gpu.lib)}})


def resumed(conf: Config, kernel: str) -> tuple[AfterResume, list[tuple[str, str]]]:
    steps: list[tuple[str, str]] = []
    outcome = after_resume(conf, SINCE, (), blockers=lambda _family: [],
                           step=lambda name, note: steps.append((name, note)),
                           tools=Tools(modprobe=str(MODPROBE), journalctl=kernel))
    return outcome, steps


def test_xid_79_beside_cuda_999_reloads_nothing_and_the_hold_names_it(
        gpu: Gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # cuInit answers 999 (the fake until a reload) and the GPU fell off the bus: the reload
    # would not bring it back, and must not be tried on a GPU that is gone.
    conf = config(gpu, str(tmp_path / "no-nvidia-smi"), monkeypatch)
    outcome, steps = resumed(conf, journalctl(tmp_path, "usb 1-1: new device", XID_79))
    assert not any(c.startswith("modprobe") for c in gpu.calls()), gpu.calls()
    bad = outcome.final.unhealthy()
    assert [(d.source, d.signature) for d in bad] == [("cuda", UVM_SIGNATURE), ("kernel-log", "")]
    assert [name for name, _ in steps] == ["health", "repair"]
    assert steps[1][1].startswith("nvidia: no repair known for nvidia unhealthy: Xid 79 in the "
                                  "kernel log") and "nvidia_uvm is not reloaded" in steps[1][1]
    reason = outcome.held_reason()
    assert "CUDA init error 999" in reason and "Xid 79 in the kernel log: NVRM: Xid" in reason


def test_a_gpu_nvidia_smi_reads_lost_beside_cuda_999_reloads_nothing(
        gpu: Gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lost = smi(tmp_path, 15, "Unable to determine the device handle for GPU0000:01:00.0: GPU is "
               "lost. Reboot the system to recover this GPU")
    outcome, steps = resumed(config(gpu, lost, monkeypatch), journalctl(tmp_path))
    assert not any(c.startswith("modprobe") for c in gpu.calls()), gpu.calls()
    assert "GPU is lost" in steps[-1][1] and "no repair known" in steps[-1][1]
    assert "GPU is lost" in outcome.held_reason()


def test_cuda_999_alone_is_still_reloaded(gpu: Gpu, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    outcome, _ = resumed(config(gpu, str(tmp_path / "no-nvidia-smi"), monkeypatch),
                         journalctl(tmp_path, "usb 1-1: new device"))
    assert "modprobe nvidia_uvm" in gpu.calls()
    assert outcome.final.healthy


def test_nvidia_smi_failing_as_a_whole_makes_each_gpu_read_before_unhealthy(
        gpu: Gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A GPU whose handle cannot be opened: nvidia-smi prints NVML's words for it and exits 255.
    conf = config(gpu, smi(tmp_path, 255, UNOPENED), monkeypatch)
    found, note = nvidia.nvml_check(conf, 5.0, {"gpu 0": "", "gpu 1": "", "npu 0": "OK"})
    assert [(d.device, d.state, d.source) for d in found] == [
        ("nvidia", "unhealthy", "nvidia-smi"), ("gpu 0", "unhealthy", "nvidia-smi"),
        ("gpu 1", "unhealthy", "nvidia-smi")], note
    assert UNOPENED in found[0].reason and not note
    assert found[1].reason.startswith("not listed by nvidia-smi (")
    assert found[1].reason.endswith(") after resume (before the suspend: listed)")
    # Read before the suspend or not, a GPU whose handle cannot be opened is unhealthy.
    found, _ = nvidia.nvml_check(conf, 5.0)
    assert [(d.device, d.state) for d in found] == [("nvidia", "unhealthy")]


def test_nvidia_smi_failing_otherwise_holds_the_gpus_read_before_the_suspend(
        gpu: Gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = config(gpu, smi(tmp_path, 9, "NVIDIA-SMI has failed because it couldn't communicate "
                           "with the NVIDIA driver."), monkeypatch)
    found, note = nvidia.nvml_check(conf, 5.0, {"gpu 0": "", "gpu 1": ""})
    assert [(d.device, d.state) for d in found] == [("gpu 0", "unhealthy"),
                                                    ("gpu 1", "unhealthy")], note
    assert "couldn't communicate with the NVIDIA driver" in found[0].reason
    # With no GPU read before, nothing is known of one: said, not decided on.
    found, note = nvidia.nvml_check(conf, 5.0)
    assert found == [] and note.startswith("nvidia-smi: ") and "couldn't communicate" in note

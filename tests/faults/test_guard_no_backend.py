"""Issue 19: no allow without backing. An NVIDIA GPU nobody can query vetoes every
suspend, before anyone is signalled, and status leads with why and what to install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.isolation import needs_root

HERE = Path(__file__).resolve().parent


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare not installed")
def test_no_backend_for_the_gpu_vetoes_before_the_drain(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                           "--propagation", "private", sys.executable,
                           str(HERE / "scene_no_backend.py"), str(state), str(tmp_path / "marks")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["families"] == ["nvidia"]
    assert result["verdict"] == "veto" and result["recorded"]
    [why] = result["reasons"]
    assert why.startswith("nvidia: no idle backend could answer (nvml: pynvml not importable")
    assert "; nvidia-smi: not found on PATH ([idle] nvidia_smi; it ships with the NVIDIA driver)" in why
    assert why.endswith("vetoed by [idle] on_unknown = veto")
    assert result["signals"] == [] and result["alive"]  # nobody was signalled for nothing
    assert result["status"] == [
        "suspends are not guarded (the veto unit is not enabled: suspendguard install); once "
        "it is, every suspend will be refused: no backend can answer for nvidia (install the "
        "NVIDIA driver's nvidia-smi, or nvidia-ml-py for NVML)"]

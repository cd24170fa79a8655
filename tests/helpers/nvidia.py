"""The fake nvidia-smi (tests/fakes/idle/nvidia-smi) fed with the H200 capture's own CSV.

``section()`` cuts a ``## name`` block out of a capture file; ``FakeNvidiaSmi``
writes the CSV files the fake prints and points it at them through the
environment, with our own pids in the process table where a test needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import FAKES, FIXTURES
from suspendguard.config import IdleConfig
from suspendguard.idle.base import IdleReport
from suspendguard.idle.nvidiasmi import NvidiaSmiBackend
from suspendguard.idle.sampler import check_idle
from suspendguard.system.deadline import Deadline

TOOL = FAKES / "idle" / "nvidia-smi"
CAPTURE = FIXTURES / "nvidia-h200"


def section(file: str, name: str) -> list[str]:
    """The lines of block ``## name`` in capture ``file``."""
    out: list[str] = []
    inside = False
    for line in (CAPTURE / file).read_text().splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == name
            continue
        if inside and line.strip():
            out.append(line)
    return out


# As recorded: the idle GPU (header and row), and the three torch jobs'
# compute-apps table (header and rows).
IDLE_GPUS = section("idle.txt", "query-gpu")
BUSY_APPS = section("three-torch-holders.txt", "compute-apps")
APPS_HEADER = section("idle.txt", "compute-apps (idle)")[0]


def busy_gpus(util: str = "100 %", memory: str = "23 %", used: str = "2318 MiB") -> list[str]:
    """The idle GPU row with the figures the busy capture printed (its query-gpu
    block has no header, so the row is rebuilt on the idle one's)."""
    cells = IDLE_GPUS[1].split(", ")
    cells[3], cells[4], cells[5] = util, memory, used
    return [IDLE_GPUS[0], ", ".join(cells)]


class FakeNvidiaSmi:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dir = tmp_path / "nvidia-smi"
        self.dir.mkdir(exist_ok=True)
        self.monkeypatch = monkeypatch
        self.log = self.dir / "calls.log"
        monkeypatch.setenv("FAKE_NVIDIA_SMI_LOG", str(self.log))
        monkeypatch.delenv("FAKE_NVIDIA_SMI_MODE", raising=False)
        self.show(IDLE_GPUS, [])

    def show(self, gpus: list[str], pids: list[int] | None = None,
             apps: list[str] | None = None) -> None:
        """Print ``gpus``, and as compute apps our ``pids`` (on the captured rows) or ``apps``."""
        if apps is None:
            rows = [r.split(", ") for r in BUSY_APPS[1:]]
            apps = [APPS_HEADER] + [
                ", ".join([rows[i % len(rows)][0], str(pid), *rows[i % len(rows)][2:]])
                for i, pid in enumerate(pids or [])]
        (self.dir / "gpus.csv").write_text("\n".join(gpus) + "\n")
        (self.dir / "apps.csv").write_text("\n".join(apps) + "\n")
        self.monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", str(self.dir / "gpus.csv"))
        self.monkeypatch.setenv("FAKE_NVIDIA_SMI_APPS", str(self.dir / "apps.csv"))

    def mode(self, mode: str) -> None:
        self.monkeypatch.setenv("FAKE_NVIDIA_SMI_MODE", mode)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


class Checks:
    """An idle check through the real nvidia-smi backend; counts its calls."""

    def __init__(self, tool: str = str(TOOL)) -> None:
        self.tool = tool
        self.calls: list[IdleConfig] = []

    def __call__(self, config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
        self.calls.append(config)
        cfg = replace(config, nvidia_smi=self.tool, backends=("nvidia-smi",), interval_ms=10,
                      settle_s=min(config.settle_s, 0.3))
        return check_idle(cfg, ["nvidia"], deadline, backends=[NvidiaSmiBackend(cfg)])

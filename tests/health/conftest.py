"""The health check's fakes: a libcuda.so.1 built from C, modprobe, journalctl and npu-smi."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES, FIXTURES
from helpers.clib import build_shared

CUDA_SOURCE = FAKES / "health" / "fake_cuda.c"
MODPROBE = FAKES / "health" / "modprobe"
NPU_SMI = FAKES / "idle" / "npu-smi"
ACL_ENV = FAKES / "idle" / "acl_site" / "set_env.sh"
NPU_INFO = FIXTURES / "npu-smi" / "910b2c-hbm-one-process.txt"


@pytest.fixture(scope="session")
def libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shared(CUDA_SOURCE, tmp_path_factory.mktemp("cuda"), "libcuda.so.1")


@dataclass
class Gpu:
    """The fake GPU host: where its files are, and every call its fakes took, in order."""

    lib: Path
    reloaded: Path  # exists once `modprobe nvidia_uvm` ran
    log: Path  # the fake libcuda, modprobe and systemctl all write here
    systemctl: str

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def gpu(libcuda: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Gpu:
    """A GPU that answers cuInit with 999 until nvidia_uvm is reloaded (FAKE_CUDA_MODE changes it).

    Its systemctl says nvidia-persistenced runs (FAKE_PERSISTENCED=absent: it does not).
    """
    log = tmp_path / "calls.log"
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(
        '#!/bin/sh\n'
        f'echo "systemctl $*" >>"{log}"\n'
        'if [ "$1" = is-active ] && [ "$FAKE_PERSISTENCED" = absent ]; then exit 3; fi\n'
        'exit 0\n')
    systemctl.chmod(0o755)
    host = Gpu(libcuda, tmp_path / "uvm-reloaded", log, str(systemctl))
    monkeypatch.setenv("FAKE_CUDA_RELOADED", str(host.reloaded))
    monkeypatch.setenv("FAKE_MODPROBE_LOG", str(log))
    monkeypatch.setenv("FAKE_CUDA_LOG", str(log))
    monkeypatch.delenv("FAKE_PERSISTENCED", raising=False)
    for name in ("FAKE_CUDA_MODE", "FAKE_CUDA_COUNT", "FAKE_MODPROBE_IN_USE"):
        monkeypatch.delenv(name, raising=False)
    return host


@pytest.fixture
def npu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake npu-smi on a 910B board, and the fake pyACL; ``alarms(n)``: n Alarm answers first."""
    counter = tmp_path / "alarms"
    state = tmp_path / "acl.json"
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(NPU_INFO))
    monkeypatch.setenv("FAKE_NPU_SMI_ALARMS", str(counter))
    monkeypatch.setenv("FAKE_NPU_SMI_LOG", str(tmp_path / "npu-smi.log"))
    monkeypatch.delenv("FAKE_NPU_SMI_MODE", raising=False)
    monkeypatch.setenv("FAKE_ACL_STATE", str(state))
    monkeypatch.setenv("FAKE_ACL_LOG", str(tmp_path / "acl.log"))
    monkeypatch.delenv("FAKE_ACL_SET_DEVICE_MARKER", raising=False)

    class Board:
        tool = str(NPU_SMI)
        env = str(ACL_ENV)

        def alarms(self, n: int) -> None:
            counter.write_text(f"{n}\n")
            counter.with_name("alarms.count").unlink(missing_ok=True)

        def acl(self, **values: Any) -> None:
            state.write_text(json.dumps(values))

        def info_calls(self) -> int:
            log = tmp_path / "npu-smi.log"
            return log.read_text().splitlines().count("info") if log.exists() else 0

        def acl_calls(self) -> list[str]:
            log = tmp_path / "acl.log"
            return log.read_text().splitlines() if log.exists() else []

    board = Board()
    board.alarms(0)
    board.acl(count=2, open=[0, 0])
    yield board


def journalctl(tmp_path: Path, *messages: str) -> str:
    """A journalctl that prints ``messages`` as ``-o json`` entries, whatever it is asked."""
    data = tmp_path / "kernel.json"
    data.write_text("".join(json.dumps({"MESSAGE": m, "__REALTIME_TIMESTAMP": "1"}) + "\n"
                            for m in messages))
    script = tmp_path / "journalctl"
    script.write_text(f'#!/bin/sh\necho "$*" >>"{tmp_path / "journalctl.log"}"\n'
                      f'cat "{data}"\n')
    script.chmod(0o755)
    return str(script)
